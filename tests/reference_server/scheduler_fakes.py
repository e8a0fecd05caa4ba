"""A Scheduler with its BlockManager and a fake engine loop, for scheduler tests that need no
model runner and no clock: time is a number the test passes in, and a "step" applies the
scheduled chunks exactly as Engine.step does (computed tokens advance, sampling chunks append one
token, a sequence finishes at its max_tokens).

Prefix caching is off unless a test passes `enable_prefix_caching=True`: every prompt here is
1..n, so with it on any two requests would share blocks and the arithmetic of tests about
something else would change (test_scheduler_prefix_cache.py is where caching is tested)."""

from __future__ import annotations

from reference_server.block_manager import BlockManager
from reference_server.config import BatchingConfig
from reference_server.sampling_params import SamplingParams
from reference_server.scheduler import Scheduler, SchedulerOutput
from reference_server.sequence import Sequence

GENERATED_TOKEN = 7


class FakeEngineLoop:
    def __init__(self, *, num_blocks: int = 64, block_size: int = 4, **batching: object) -> None:
        batching.setdefault("enable_prefix_caching", False)
        self.block_manager = BlockManager(num_blocks=num_blocks, block_size=block_size)
        self.scheduler = Scheduler(BatchingConfig.from_dict(batching), self.block_manager)
        self.seqs: dict[str, Sequence] = {}
        self.max_tokens: dict[str, int] = {}
        self._order = 0

    def add(
        self,
        request_id: str,
        *,
        prompt_len: int = 4,
        max_tokens: int = 2,
        priority: str = "interactive",
        arrival_time: float = 0.0,
        prompt: list[int] | None = None,
    ) -> Sequence:
        """`prompt` (token ids) wins over `prompt_len` (a prompt of 1..prompt_len)."""
        self._order += 1
        seq = Sequence(
            request_id,
            list(range(1, 1 + prompt_len)) if prompt is None else list(prompt),
            SamplingParams(max_tokens=max_tokens),
            priority=priority,
            arrival_time=arrival_time,
            order=self._order,
        )
        self.seqs[request_id] = seq
        self.max_tokens[request_id] = max_tokens
        self.scheduler.add(seq)
        return seq

    def step(self, now: float = 0.0) -> SchedulerOutput:
        out = self.scheduler.schedule(now)
        self.apply(out)
        return out

    def apply(self, out: SchedulerOutput) -> None:
        """What Engine.step does with a schedule: advance, sample, finish."""
        finished = False
        for chunk in out.chunks:
            seq = chunk.seq
            seq.num_computed_tokens += chunk.num_new_tokens
            if chunk.sample:
                seq.output_token_ids.append(GENERATED_TOKEN)
                if len(seq.output_token_ids) >= self.max_tokens[seq.request_id]:
                    seq.finish_reason = "length"
                    finished = True
        if finished:
            self.scheduler.remove_finished_running()

    def run(self, *, now: float = 0.0, max_steps: int = 1000) -> list[SchedulerOutput]:
        outputs = []
        for _ in range(max_steps):
            if not self.scheduler.has_unfinished():
                return outputs
            outputs.append(self.step(now))
        raise AssertionError(f"not finished within {max_steps} steps")


def ids(out: SchedulerOutput) -> list[str]:
    """Request ids of a step's chunks, in the order the scheduler emitted them."""
    return [chunk.seq.request_id for chunk in out.chunks]


def chunk_sizes(out: SchedulerOutput) -> dict[str, int]:
    return {chunk.seq.request_id: chunk.num_new_tokens for chunk in out.chunks}
