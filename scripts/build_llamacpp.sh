#!/usr/bin/env bash
# A real third-party OpenAI-compatible server to gate: llama.cpp's llama-server (continuous batching over
# -np slots, Prometheus /metrics) serving a tiny random Llama made here, with no model download.
# Usage: scripts/build_llamacpp.sh              # build the server and the model if missing (idempotent; ~5 min on 2 cores)
#        scripts/build_llamacpp.sh start PORT   # and start it in the background, wait for /health, print its PID
# Env: LLAMACPP_DIR (/tmp/llamacpp), LLAMACPP_MODEL (/tmp/tinyllama.gguf), LLAMACPP_HIDDEN (256),
#      LLAMACPP_LAYERS (4), LLAMACPP_NP (8 slots), LLAMACPP_CTX (32768 = 4096 per slot), LLAMACPP_ARGS (extra flags).
# Server log: /tmp/llamacpp-PORT.log. Stop it by the printed PID.
set -euo pipefail
SRC=${LLAMACPP_DIR:-/tmp/llamacpp}; BIN=$SRC/build/bin/llama-server
MODEL=${LLAMACPP_MODEL:-/tmp/tinyllama.gguf}; HF=${MODEL%.gguf}-hf
# A venv of its own for the model maker and llama.cpp's converter (torch CPU, transformers, tokenizers).
VENV=""; venv() {
  [ -n "$VENV" ] && return; VENV=${LLAMACPP_VENV:-/tmp/llamacpp-venv}
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch, transformers, tokenizers" 2>/dev/null; then
    python3 -m venv "$VENV" && "$VENV/bin/pip" install -q torch==2.13.0 && "$VENV/bin/pip" install -q transformers tokenizers numpy safetensors
  fi
}

# 1. Source: the llama.cpp repo is too big for `fetch`; llama-cpp-python's sdist vendors its full source tree.
if [ ! -x "$BIN" ]; then
  if [ ! -f "$SRC/CMakeLists.txt" ]; then
    venv; tmp=$(mktemp -d)
    "$VENV/bin/pip" download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$tmp" 2>/dev/null
    tar xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
    rm -rf "$SRC"; mv "$tmp"/llama_cpp_python-*/vendor/llama.cpp "$SRC"; rm -rf "$tmp"
  fi
  command -v cmake >/dev/null && command -v g++ >/dev/null || { apt-get update -qq; apt-get install -y -qq cmake build-essential; }
  # 2. Build only llama-server (about 5 min on 2 cores); no web UI download, no curl/openssl.
  (cd "$SRC" && cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
   && nice -n 10 cmake --build build --target llama-server -j2) >"$SRC/build.log" 2>&1 \
   || { tail -30 "$SRC/build.log" >&2; exit 1; }
fi

# 3. Model: random Llama in HF format + ASCII-only byte-level BPE trained here, converted by llama.cpp's own
#    convert_hf_to_gguf.py (its unknown-tokenizer check is bypassed: we declare the plain GPT-2 pre-tokenizer).
if [ ! -f "$MODEL" ]; then
  venv; rm -rf "$HF"
  HF_HUB_DISABLE_PROGRESS_BARS=1 "$VENV/bin/python" - "$HF" "${LLAMACPP_HIDDEN:-256}" "${LLAMACPP_LAYERS:-4}" >&2 <<'PY'
import glob, string, sys, torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import PreTrainedTokenizerFast, LlamaConfig, LlamaForCausalLM
out, hidden, layers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
# ASCII corpus and no full 256-byte alphabet: every token decodes to valid UTF-8 on its own.
text = [open(f, errors="ignore").read().encode("ascii", "ignore").decode()
        for f in sorted(glob.glob("/usr/share/common-licenses/*"))] + [string.printable] * 10
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=1024, special_tokens=specials))
t = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=specials[0], eos_token=specials[2], pad_token=specials[0])
t.chat_template = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n'}}"
                   "{% endfor %}{% if add_generation_prompt %}{{'<|im_start|>assistant\n'}}{% endif %}")
t.save_pretrained(out)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=len(t), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64,
                  num_key_value_heads=max(1, hidden // 128), intermediate_size=hidden * 43 // 16,
                  max_position_embeddings=4096, bos_token_id=t.bos_token_id, eos_token_id=t.eos_token_id,
                  tie_word_embeddings=False)
m = LlamaForCausalLM(cfg)
with torch.no_grad():  # residual channel 0 is a constant 1 that no layer writes ...
    m.model.embed_tokens.weight[:, 0] = 1.0
    for layer in m.model.layers:
        layer.self_attn.o_proj.weight[0] = 0
        layer.mlp.down_proj.weight[0] = 0
    m.lm_head.weight[:, 0] = 0  # ... used as a logit bias of about -20 on the special (EOS) tokens,
    m.lm_head.weight[[t.convert_tokens_to_ids(s) for s in specials], 0] = -4.0  # so replies run to max_tokens
m.save_pretrained(out)
PY
  "$VENV/bin/python" - "$SRC" "$HF" --outtype f32 --outfile "$MODEL" >"$HF/convert.log" 2>&1 <<'PY' \
    || { tail -20 "$HF/convert.log" >&2; exit 1; }
import runpy, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/gguf-py"]
import conversion.base as b, conversion.llama as l
b.TextModel.get_vocab_base_pre = lambda self, tok: "gpt-2"  # our BPE uses the plain GPT-2 pre-tokenizer regex
l.LlamaModel.set_vocab = b.TextModel._set_vocab_gpt2          # tokenizer.json path (skips the sentencepiece probe)
sys.argv = [sys.argv[1] + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
PY
fi

# 4. Start: background server, wait for /health, print the PID.
if [ "${1:-}" = start ]; then
  PORT=${2:?usage: llamacpp.sh start PORT}; LOG=/tmp/llamacpp-$PORT.log
  if curl -s -o /dev/null "http://127.0.0.1:$PORT/"; then echo "port $PORT is already in use" >&2; exit 1; fi
  # shellcheck disable=SC2086
  nohup "$BIN" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -np "${LLAMACPP_NP:-8}" -c "${LLAMACPP_CTX:-32768}" \
    --cont-batching --metrics ${LLAMACPP_ARGS:-} </dev/null >"$LOG" 2>&1 &
  pid=$!
  for _ in $(seq 150); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && { echo "$pid"; exit 0; }
    kill -0 "$pid" 2>/dev/null || break; sleep 0.2
  done
  echo "llama-server did not become healthy; see $LOG" >&2; kill "$pid" 2>/dev/null; exit 1
fi
