"""The Hugging Face tokenizer files that reproduce ByteTokenizer exactly, and where the copies
shipped inside the package live.

Client tools (guidellm, AIPerf, vLLM's benchmarks) load a tokenizer with `--tokenizer DIR`; these
files make them count the tokens the server's `usage` reports. This module renders the three
files (`tokenizer.json`, `tokenizer_config.json` with the chat template, `special_tokens_map.json`)
from ByteTokenizer's ids; `scripts/make_hf_tokenizer.py` writes them and a test checks that the
shipped copies equal this rendering. Plain Python: it never imports `tokenizers` or
`transformers`, and knows nothing about serving.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reference_server.tokenizer import CHAT_ROLES, NUM_BYTE_TOKENS, ByteTokenizer

__all__ = ["FILE_NAMES", "chat_template", "hf_tokenizer_dir", "render_files", "special_token_names"]

FILE_NAMES = ("special_tokens_map.json", "tokenizer.json", "tokenizer_config.json")
_DIR_NAME = "hf_tokenizer"


def hf_tokenizer_dir() -> Path:
    """The directory of the shipped files: point a client's `--tokenizer` at it."""
    return Path(__file__).resolve().parent / _DIR_NAME


def special_token_names(tokenizer: ByteTokenizer | None = None) -> dict[int, str]:
    """id -> name of every special token, in id order (`<|bos|>`, `<|eos|>`, ...)."""
    tok = tokenizer or ByteTokenizer()
    names = {
        tok.bos_token_id: "<|bos|>",
        tok.eos_token_id: "<|eos|>",
        tok.pad_token_id: "<|pad|>",
        tok.end_of_turn_token_id: "<|end|>",
    }
    names.update({token_id: f"<|{role}|>" for role, token_id in tok.role_token_ids.items()})
    if sorted(names) != list(tok.special_token_ids):
        raise RuntimeError("a ByteTokenizer special token has no Hugging Face name")
    return dict(sorted(names.items()))


def _byte_alphabet() -> list[str]:
    """GPT-2's byte-to-unicode map as a list indexed by byte: printable bytes stand for
    themselves, the rest are shifted past U+00FF, so every byte is one visible character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    alphabet = [""] * NUM_BYTE_TOKENS
    shifted = 0
    for byte in range(NUM_BYTE_TOKENS):
        if byte in printable:
            alphabet[byte] = chr(byte)
        else:
            alphabet[byte] = chr(NUM_BYTE_TOKENS + shifted)
            shifted += 1
    return alphabet


def chat_template(tokenizer: ByteTokenizer | None = None) -> str:
    """A Jinja chat template rendering the same tokens as ByteTokenizer.apply_chat_template
    when called with add_generation_prompt=True (what chat clients pass); without it the
    trailing assistant marker is left out, as /tokenize's `add_generation_prompt: false` does.
    It reads messages as the API does: `developer` is `system`, content is a string, a list of
    text parts, or null. No whitespace between tags, so trim_blocks/lstrip_blocks change nothing.
    """
    tok = tokenizer or ByteTokenizer()
    names = special_token_names(tok)
    role_marks = [
        ("{%- if" if index == 0 else "{%- elif")
        + f" role == '{role}' -%}}"
        + _emit(names[tok.role_token_ids[role]])
        for index, role in enumerate(CHAT_ROLES)
    ]
    return "".join(
        [
            _emit(names[tok.bos_token_id]),
            "{%- for message in messages -%}",
            "{%- set role = 'system' if message['role'] == 'developer' else message['role'] -%}",
            *role_marks,
            "{%- else -%}",
            "{{- raise_exception('message roles must be system, developer, user or assistant') -}}",
            "{%- endif -%}",
            "{%- if message['content'] is string -%}{{- message['content'] -}}",
            "{%- elif message['content'] is not none -%}",
            "{%- for part in message['content'] -%}{{- part['text'] -}}{%- endfor -%}",
            "{%- endif -%}",
            _emit(names[tok.end_of_turn_token_id]),
            "{%- endfor -%}",
            "{%- if add_generation_prompt -%}",
            _emit(names[tok.role_token_ids["assistant"]]),
            "{%- endif -%}",
        ]
    )


def _emit(literal: str) -> str:
    """A Jinja expression printing `literal` (special token names hold no quotes)."""
    return "{{- '" + literal + "' -}}"


def _added_token(content: str) -> dict[str, Any]:
    # normalized=False: matched in the raw text; special=True: skipped by decode().
    return {
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def _tokenizer_json(tok: ByteTokenizer) -> dict[str, Any]:
    names = special_token_names(tok)
    bos = names[tok.bos_token_id]
    # Byte-level BPE with no merges: the ByteLevel pre-tokenizer (no prefix space, no regex
    # split) turns the text into one byte-per-character word and every character is its own
    # token, id = the byte: exactly ByteTokenizer.encode. The ByteLevel decoder maps back.
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": i, **_added_token(name)} for i, name in names.items()],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        # add_special_tokens=True puts bos first, as /v1/completions does with a text prompt.
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [tok.bos_token_id], "tokens": [bos]}},
        },
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {char: byte for byte, char in enumerate(_byte_alphabet())},
            "merges": [],
        },
    }


def _special_tokens_map(tok: ByteTokenizer) -> dict[str, Any]:
    names = special_token_names(tok)
    named = {tok.bos_token_id, tok.eos_token_id, tok.pad_token_id}
    return {
        "bos_token": names[tok.bos_token_id],
        "eos_token": names[tok.eos_token_id],
        "pad_token": names[tok.pad_token_id],
        "additional_special_tokens": [n for i, n in names.items() if i not in named],
    }


def _tokenizer_config(tok: ByteTokenizer) -> dict[str, Any]:
    names = special_token_names(tok)
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": {str(i): _added_token(name) for i, name in names.items()},
        **_special_tokens_map(tok),
        # Decoding must give back the exact text: no " ." -> "." clean-up.
        "clean_up_tokenization_spaces": False,
        "chat_template": chat_template(tok),
    }


def render_files() -> dict[str, str]:
    """File name -> exact text of each file, as shipped."""
    tok = ByteTokenizer()
    documents = {
        "special_tokens_map.json": _special_tokens_map(tok),
        "tokenizer.json": _tokenizer_json(tok),
        "tokenizer_config.json": _tokenizer_config(tok),
    }
    return {
        name: json.dumps(document, indent=2, ensure_ascii=False) + "\n"
        for name, document in documents.items()
    }
