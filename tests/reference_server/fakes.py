"""A fake model runner for engine and scheduler tests: deterministic, torch-free, and strict.

It checks every ScheduledChunk against the contract (block table covers the chunk, `sample` set
exactly when the chunk ends at the sequence's end, no block written by two sequences in one step,
and every position a sequence counts as computed holds its token once the step's writes are
done: what prefix caching's shared blocks must guarantee) and keeps a fake KV cache keyed by
physical slot, so a token depends on what the block table really points at: a corrupted table
changes the output, just as it would with a real model.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence as SequenceOf

from reference_server.sequence import ScheduledChunk

LETTER_BASE = 97  # "a": generated tokens are lowercase letters, so texts are readable


class FakeRunner:
    def __init__(
        self,
        *,
        num_kv_blocks: int = 256,
        block_size: int = 4,
        vocab_size: int = 263,
        eos_token_id: int = 257,
        step_sleep_seconds: float = 0.0,
        fail_on_call: int | None = None,
    ) -> None:
        self.num_kv_blocks = num_kv_blocks
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self.device = "cpu"
        self.model_name = "fake"
        self.step_sleep_seconds = step_sleep_seconds
        self.fail_on_call = fail_on_call
        self.calls: list[list[tuple[str, int, int, bool]]] = []  # (id, start, count, sample)
        self.embed_calls = 0
        self._kv: dict[int, int] = {}  # physical slot -> token id written there

    def execute(self, chunks: SequenceOf[ScheduledChunk]) -> list[int | None]:
        if self.fail_on_call is not None and len(self.calls) >= self.fail_on_call:
            raise RuntimeError("fake runner failure (injected)")
        writers: dict[int, str] = {}
        call: list[tuple[str, int, int, bool]] = []
        for chunk in chunks:
            seq = chunk.seq
            start = seq.num_computed_tokens
            end = start + chunk.num_new_tokens
            assert chunk.num_new_tokens >= 1, chunk
            assert end <= seq.num_tokens, (seq, chunk.num_new_tokens)
            assert chunk.sample == (end == seq.num_tokens), (seq, chunk)
            assert len(seq.block_table) * self.block_size >= end, (seq, seq.block_table)
            for block in seq.block_table:
                assert 0 <= block < self.num_kv_blocks, block
            for position in range(start, end):
                block = seq.block_table[position // self.block_size]
                assert writers.setdefault(block, seq.request_id) == seq.request_id, (
                    f"block {block} written by {writers[block]} and {seq.request_id}"
                )
            call.append((seq.request_id, start, chunk.num_new_tokens, chunk.sample))
        # Every chunk's K/V is written before any is read, as the model runner does layer by
        # layer: a sequence may share a block another one fills in the same step.
        for chunk in chunks:
            seq = chunk.seq
            start = seq.num_computed_tokens
            ids = seq.all_token_ids()
            for position in range(start, start + chunk.num_new_tokens):
                self._kv[self._slot(seq.block_table, position)] = ids[position]
        tokens: list[int | None] = []
        for chunk in chunks:
            seq = chunk.seq
            start = seq.num_computed_tokens
            end = start + chunk.num_new_tokens
            ids = seq.all_token_ids()
            for position in range(start):  # computed before (or found cached): must be there
                slot = self._slot(seq.block_table, position)
                assert self._kv.get(slot) == ids[position], (seq, position, slot)
            if not chunk.sample:
                tokens.append(None)
                continue
            # "Attend" to the whole context through the block table, like a real model would.
            context = bytes(self._kv[self._slot(seq.block_table, p)] % 256 for p in range(end))
            seed = seq.sampling_params.seed or 0
            digest = zlib.crc32(context, zlib.crc32(seed.to_bytes(8, "little")))
            tokens.append(LETTER_BASE + digest % 26)
        self.calls.append(call)
        if self.step_sleep_seconds:
            time.sleep(self.step_sleep_seconds)
        return tokens

    def embed(self, token_id_lists: list[list[int]]) -> list[list[float]]:
        self.embed_calls += 1
        vectors = []
        for ids in token_id_lists:
            raw = [float(len(ids)), float(sum(ids) % 97), 1.0]
            norm = sum(v * v for v in raw) ** 0.5
            vectors.append([v / norm for v in raw])
        return vectors

    def _slot(self, block_table: list[int], position: int) -> int:
        return block_table[position // self.block_size] * self.block_size + (
            position % self.block_size
        )


def make_engine(
    *,
    runner: FakeRunner | None = None,
    engine_kwargs: dict | None = None,
    **batching: object,
):
    """An Engine over a FakeRunner; `batching` keys go to BatchingConfig (nested dicts allowed)."""
    from reference_server.config import BatchingConfig, EngineConfig
    from reference_server.engine import Engine

    config = EngineConfig(
        watermark_ratio=0.0,
        batching=BatchingConfig.from_dict(batching),
        **(engine_kwargs or {}),
    )
    return Engine(config, runner=runner or FakeRunner())


def run_to_completion(engine, *, max_steps: int = 10_000):
    """Step until nothing is unfinished; returns ({id: (tokens, text, reason)}, records)."""
    results: dict[str, tuple[list[int], str, str | None]] = {}
    records = []
    for _ in range(max_steps):
        if not engine.has_unfinished():
            return results, records
        result = engine.step()
        if result.record is not None:
            records.append(result.record)
        elif not result.outputs:
            # A dynamic window is open: wait for it exactly as the async loop would.
            time.sleep(min(1.0, engine.next_wakeup_seconds() or 0.0))
        for output in result.outputs:
            tokens, text, _ = results.get(output.request_id, ([], "", None))
            results[output.request_id] = (
                tokens + output.new_token_ids,
                text + output.new_text,
                output.finish_reason,
            )
    raise AssertionError(f"engine did not finish within {max_steps} steps")
