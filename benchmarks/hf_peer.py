"""The Hugging Face transformers peer of bench_engine.py: the same model (our seeded `tiny`
weights, written with our checkpoint writer and loaded by transformers' LlamaForCausalLM) run
through transformers' continuous batching with paged attention, and through plain padded
`generate` in fixed batches.

It owns building the HF model and timing the two HF paths on a list of (prompt, max_tokens)
requests; it knows nothing of our engine's policies. Both paths make EOS impossible so every
request generates exactly its max_tokens, run greedy, and honour the arrival times: the
continuous manager gets each request when it arrives; a padded batch starts once its last
member has arrived.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass

import torch

__all__ = ["HFRequest", "build_hf_model", "run_hf_continuous", "run_hf_padded"]


@dataclass(frozen=True, slots=True)
class HFRequest:
    prompt_token_ids: list[int]
    max_tokens: int
    is_short: bool
    arrival_seconds: float  # offset from the run's start; requests are sorted by it


def build_hf_model(model: str, seed: int, max_model_len: int):
    """Our seeded weights for preset `model`, loaded into transformers' LlamaForCausalLM."""
    from transformers import LlamaForCausalLM as HFLlama

    from reference_server.checkpoint import save_checkpoint
    from reference_server.model import build_random_model
    from reference_server.model_config import get_preset

    config = get_preset(model)
    ours = build_random_model(
        config, seed=seed, device=torch.device("cpu"), dtype=torch.float32, max_positions=None
    )
    with tempfile.TemporaryDirectory(prefix="bench-hf-") as directory:
        # No eos in config.json: HF then never stops early (eos -1 = disabled).
        save_checkpoint(ours, directory)
        hf_model = HFLlama.from_pretrained(directory, torch_dtype=torch.float32)
    hf_model.config.eos_token_id = None
    hf_model.generation_config.eos_token_id = None
    hf_model.generation_config.pad_token_id = 0
    return hf_model.eval()


def _latency_summary(short_latencies: list[float]) -> dict[str, float | None]:
    if not short_latencies:
        return {"short_p50_s": None, "short_p99_s": None}
    ordered = sorted(short_latencies)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return {"short_p50_s": pct(0.50), "short_p99_s": pct(0.99)}


def run_hf_continuous(
    hf_model, requests: list[HFRequest], *, max_num_seqs: int, block_size: int, num_blocks: int
) -> dict:
    """transformers' continuous batching manager (what `generate_batch` wraps), fed request by
    request so each keeps its own max_new_tokens (generate_batch takes one for all)."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    gen_config = GenerationConfig(
        do_sample=False,
        eos_token_id=-1,
        pad_token_id=0,
        max_new_tokens=max(r.max_tokens for r in requests),
    )
    cb_config = ContinuousBatchingConfig(
        page_size=block_size,
        num_blocks=num_blocks,
        max_batch_tokens=2048,
        max_requests_per_batch=max_num_seqs,
        allow_block_sharing=False,
        use_cuda_graph=False,
    )
    # Its warnings about CPU / missing flash attention would swamp the table.
    logging.getLogger("transformers").setLevel(logging.ERROR)
    finish: dict[str, float] = {}
    outputs: dict[str, int] = {}
    with hf_model.continuous_batching_context_manager(
        generation_config=gen_config,
        continuous_batching_config=cb_config,
        block=True,
        timeout=30,
        warmup=False,
    ) as manager:
        start = time.monotonic()
        cpu_start = time.process_time()
        ids: list[str] = []
        deadline = start + 600.0  # bounded: a stuck manager must not hang the benchmark
        while len(finish) < len(requests) and time.monotonic() < deadline:
            now = time.monotonic() - start
            while len(ids) < len(requests) and requests[len(ids)].arrival_seconds <= now:
                r = requests[len(ids)]
                rid = f"r{len(ids)}"
                manager.add_request(
                    r.prompt_token_ids, request_id=rid, max_new_tokens=r.max_tokens, eos_token_id=-1
                )
                ids.append(rid)
            wait = 1.0
            if len(ids) < len(requests):
                wait = min(wait, max(0.001, requests[len(ids)].arrival_seconds - now))
            result = manager.get_result(timeout=wait)
            if result is None:
                if not manager.is_running():
                    break
                continue
            if result.is_finished():
                finish[result.request_id] = time.monotonic()
                outputs[result.request_id] = len(result.generated_tokens)
        cpu_seconds = time.process_time() - cpu_start
    if len(finish) < len(requests):
        raise RuntimeError(f"HF continuous batching finished {len(finish)}/{len(requests)}")
    wall = max(finish.values()) - start
    expected = {f"r{i}": r.max_tokens for i, r in enumerate(requests)}
    mismatched = sum(1 for rid in ids if outputs.get(rid) != expected[rid])
    short = [
        finish[f"r{i}"] - start - r.arrival_seconds for i, r in enumerate(requests) if r.is_short
    ]
    tokens = sum(outputs.values())
    return {
        "name": "hf continuous (generate_batch manager)",
        "output_tokens": tokens,
        "wall_seconds": wall,
        "cpu_seconds": cpu_seconds,
        "output_tokens_per_second": tokens / wall,
        "requests_with_wrong_length": mismatched,
        **_latency_summary(short),
    }


def run_hf_padded(hf_model, requests: list[HFRequest], *, batch_size: int) -> dict:
    """Plain `generate` over fixed batches in arrival order, left-padded; each batch runs to its
    longest request. Only each request's own max_tokens count as output tokens."""
    start = time.monotonic()
    cpu_start = time.process_time()
    short: list[float] = []
    useful_tokens = 0
    for first in range(0, len(requests), batch_size):
        batch = requests[first : first + batch_size]
        time.sleep(max(0.0, start + batch[-1].arrival_seconds - time.monotonic()))
        width = max(len(r.prompt_token_ids) for r in batch)
        input_ids = torch.zeros((len(batch), width), dtype=torch.int64)
        mask = torch.zeros((len(batch), width), dtype=torch.int64)
        for row, r in enumerate(batch):
            n = len(r.prompt_token_ids)
            input_ids[row, width - n :] = torch.tensor(r.prompt_token_ids)
            mask[row, width - n :] = 1
        longest = max(r.max_tokens for r in batch)
        with torch.inference_mode():
            generated = hf_model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                do_sample=False,
                max_new_tokens=longest,
                min_new_tokens=longest,
                eos_token_id=None,
                pad_token_id=0,
            )
        if generated.shape[1] - width != longest:
            raise RuntimeError(f"padded generate made {generated.shape[1] - width} != {longest}")
        done = time.monotonic() - start
        # A padded batch returns all at once: every member completes when the batch does.
        short.extend(done - r.arrival_seconds for r in batch if r.is_short)
        useful_tokens += sum(r.max_tokens for r in batch)
    wall = time.monotonic() - start
    return {
        "name": f"hf padded generate (batches of {batch_size})",
        "output_tokens": useful_tokens,
        "wall_seconds": wall,
        "cpu_seconds": time.process_time() - cpu_start,
        "output_tokens_per_second": useful_tokens / wall,
        **_latency_summary(short),
    }
