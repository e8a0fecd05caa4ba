"""The scheduler: which sequences run in the next step and how many tokens each computes.

It owns the per-class waiting queues, the running list, batch membership (dynamic / static),
admission order (interactive first, with the anti-starvation rule), preemption by recompute, at
admission how much of a prompt the prefix cache already holds, and the `sampling_alignment:
strict` failure preset (a step serves one sampling signature; they take turns). It counts
blocks through the BlockManager; it never touches tensors, samples, or checks stop conditions
(the engine does).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field

from reference_server.block_manager import BlockManager
from reference_server.config import ITERATION_POLICIES, BatchingConfig, ClassConfig
from reference_server.sampling_params import SamplingSignature
from reference_server.sequence import PRIORITY_CLASSES, ScheduledChunk, Sequence, SequenceStatus
from reference_server.slo_budget import plan_slo_budget
from reference_server.step_cost import StepCostModel

__all__ = ["Scheduler", "SchedulerOutput"]

_SHARED = "interactive"  # the queue that holds everything when shared_queue is on


def _sort_key(seq: Sequence) -> tuple[int, float, int]:
    return seq.sort_key


@dataclass(slots=True)
class SchedulerOutput:
    chunks: list[ScheduledChunk] = field(default_factory=list)
    num_prefill_tokens: int = 0
    num_decode_tokens: int = 0
    num_preemptions: int = 0
    # Counted when a preempted sequence is re-admitted: what it had computed, less what it
    # finds still cached, is computed again.
    num_recomputed_tokens: int = 0
    num_cached_tokens: int = 0  # tokens admitted sequences found cached (prefill skipped)
    preempted: list[Sequence] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    num_preempted_decodes: int = 0

    @property
    def is_empty(self) -> bool:
        return not self.chunks


class Scheduler:
    def __init__(self, config: BatchingConfig, block_manager: BlockManager) -> None:
        self._config = config
        self._block_manager = block_manager
        block_manager.set_prefix_caching(config.enable_prefix_caching)
        self._queues: dict[str, deque[Sequence]] = {name: deque() for name in PRIORITY_CLASSES}
        self._running: list[Sequence] = []  # sorted by Sequence.sort_key
        self.num_waiting_by_class = dict.fromkeys(PRIORITY_CLASSES, 0)
        self.num_running_by_class = dict.fromkeys(PRIORITY_CLASSES, 0)
        # Dynamic / static: the current batch's id and how many of its members are unfinished.
        self._batch_id = 0
        self._batch_members_left = 0
        self._batch_starved_steps = 0
        self._last_interactive_arrival = -math.inf
        # The slo policy's step-time model (the engine feeds it each step) and what it planned
        # for the step just scheduled: its token budget and predicted duration (None before the
        # model is ready, and under the other policies).
        self.cost_model = StepCostModel()
        # sampling_alignment strict: the signature the step being scheduled serves, and a turn
        # counter that rotates it between signatures.
        self._aligned: SamplingSignature | None = None
        self._alignment_turn = 0
        self.slo_token_budget: int | None = None
        self.slo_predicted_ms: float | None = None

    # -- configuration ---------------------------------------------------------------------

    @property
    def config(self) -> BatchingConfig:
        return self._config

    def set_config(self, config: BatchingConfig) -> None:
        """Apply new settings between steps. Running sequences are never preempted by a change:
        a smaller max_num_seqs only stops admissions until the running set shrinks."""
        old = self._config
        self._config = config
        if config.enable_prefix_caching != old.enable_prefix_caching:
            self._block_manager.set_prefix_caching(config.enable_prefix_caching)
        if config.shared_queue != old.shared_queue:
            self._regroup_queues(config.shared_queue)
        if config.policy != old.policy:
            if config.policy in ITERATION_POLICIES:
                self._batch_members_left = 0
            else:
                # What already runs becomes the batch in flight, so membership stays fixed.
                self._start_batch(self._running)

    def _regroup_queues(self, shared: bool) -> None:
        waiting = [seq for q in self._queues.values() for seq in q]
        in_flight = self._batch_members_left > 0
        # Members of the batch in flight first (batch admission stops at a non-member), then
        # preempted sequences (they were at their queue's front), then arrival order.
        waiting.sort(
            key=lambda s: (
                not (in_flight and s.batch_id == self._batch_id),
                s.num_preemptions == 0,
                s.arrival_time,
                s.order,
            )
        )
        for q in self._queues.values():
            q.clear()
        for seq in waiting:
            self._queues[_SHARED if shared else seq.priority].append(seq)

    # -- queue state -----------------------------------------------------------------------

    @property
    def running(self) -> list[Sequence]:
        return self._running

    def waiting(self) -> list[Sequence]:
        return [seq for q in self._queues.values() for seq in q]

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def has_unfinished(self) -> bool:
        return bool(self._running) or any(self._queues.values())

    def _queue_of(self, seq: Sequence) -> deque[Sequence]:
        return self._queues[_SHARED if self._config.shared_queue else seq.priority]

    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        self._queue_of(seq).append(seq)
        self.num_waiting_by_class[seq.priority] += 1
        if seq.priority == "interactive":
            self._last_interactive_arrival = max(self._last_interactive_arrival, seq.arrival_time)

    def _batch_running_limit(self, now: float) -> int:
        """Sequence slots the batch class may hold now (`batch_max_running_with_interactive`)."""
        cfg = self._config
        cap = cfg.batch_max_running_with_interactive
        if cap is None or cfg.shared_queue or cfg.policy not in ITERATION_POLICIES:
            return cfg.max_num_seqs
        active = (
            self.num_running_by_class["interactive"] > 0
            or self.num_waiting_by_class["interactive"] > 0
            or now - self._last_interactive_arrival < cfg.interactive_active_ms / 1000.0
        )
        return min(cap, cfg.max_num_seqs) if active else cfg.max_num_seqs

    def remove(self, seq: Sequence, *, discard_cached: bool = False) -> None:
        """Take `seq` out (finished, aborted, deadline, failed) and free its blocks at once;
        `discard_cached` when its KV may be half written (BlockManager.free)."""
        if seq.status is SequenceStatus.RUNNING:
            self._running.remove(seq)
            self.num_running_by_class[seq.priority] -= 1
        elif seq.status is SequenceStatus.WAITING:
            self._queue_of(seq).remove(seq)
            self.num_waiting_by_class[seq.priority] -= 1
        self._block_manager.free(seq, discard_cached=discard_cached)
        seq.status = SequenceStatus.FINISHED
        seq.decode_chunk = None
        if self._batch_members_left and seq.batch_id == self._batch_id:
            self._batch_members_left -= 1

    def remove_finished_running(self) -> None:
        """Drop running sequences the engine marked finished (one pass, after each step)."""
        keep: list[Sequence] = []
        for seq in self._running:
            if seq.finish_reason is None:
                keep.append(seq)
                continue
            self.num_running_by_class[seq.priority] -= 1
            self._block_manager.free(seq)
            seq.status = SequenceStatus.FINISHED
            seq.decode_chunk = None
            if self._batch_members_left and seq.batch_id == self._batch_id:
                self._batch_members_left -= 1
        self._running = keep

    # -- batch policies --------------------------------------------------------------------

    def _batch_in_flight(self) -> bool:
        return self._batch_members_left > 0

    def _start_batch(self, members: list[Sequence]) -> None:
        self._batch_id += 1
        for seq in members:
            seq.batch_id = self._batch_id
        self._batch_members_left = len(members)

    def _admission_order(self) -> tuple[str, ...]:
        if self._config.shared_queue:
            return (_SHARED,)
        if self._batch_starved_steps >= self._config.max_starvation_steps:
            return ("batch", "interactive")
        return PRIORITY_CLASSES

    def _class_config_for_queue(self, name: str) -> ClassConfig:
        if self._config.shared_queue:
            return self._config.interactive
        return self._config.class_config(name)

    def _dispatch_delay_seconds(self, name: str, now: float) -> float | None:
        """Seconds until queue `name` may dispatch a new batch (0 = now); None when empty."""
        queue = self._queues[name]
        if not queue:
            return None
        if self._config.policy == "static":
            return 0.0
        cfg = self._class_config_for_queue(name)
        if len(queue) >= min(cfg.max_batch_size, self._config.max_num_seqs):
            return 0.0
        if cfg.dispatch_threshold is not None and len(queue) >= cfg.dispatch_threshold:
            return 0.0
        return max(0.0, queue[0].arrival_time + cfg.max_wait_ms / 1000.0 - now)

    def _maybe_dispatch(self, now: float) -> None:
        for name in self._admission_order():
            delay = self._dispatch_delay_seconds(name, now)
            if delay == 0.0:
                queue = self._queues[name]
                cfg = self._class_config_for_queue(name)
                size = min(len(queue), cfg.max_batch_size, self._config.max_num_seqs)
                self._start_batch([queue[i] for i in range(size)])
                return

    def next_wakeup_seconds(self, now: float) -> float | None:
        """0 when a step would do work now; seconds until the dynamic window opens; None idle."""
        if self._running:
            return 0.0
        if self._config.policy in ITERATION_POLICIES or self._batch_in_flight():
            return 0.0 if any(self._queues.values()) else None
        delays = [
            delay
            for name in self._admission_order()
            if (delay := self._dispatch_delay_seconds(name, now)) is not None
        ]
        return min(delays) if delays else None

    # -- the step --------------------------------------------------------------------------

    def schedule(self, now: float) -> SchedulerOutput:
        out = SchedulerOutput()
        cfg = self._config
        budget = cfg.max_num_batched_tokens if cfg.policy != "slo" else self._slo_budget()
        running = self._running
        bm = self._block_manager
        chunks = out.chunks
        try_append_decode_slot = bm.try_append_decode_slot
        # Reserve one token per decode so a prefill chunk never takes a decode's place:
        # decodes_left counts the decodes in running[index:]. Only a prefill chunk reads it, so it
        # is counted when the first one comes up (None until then; all-decode steps never do).
        decodes_left: int | None = None
        num_decode_tokens = 0
        aligned = self._aligned = self._step_signature()
        index = 0
        while index < len(running):
            seq = running[index]
            if aligned is not None and seq.signature != aligned:
                index += 1  # strict alignment: another signature's turn; it waits, keeps its KV
                continue
            remaining = len(seq.prompt_token_ids) + len(seq.output_token_ids)
            remaining -= seq.num_computed_tokens
            if remaining == 1:
                if decodes_left is not None:
                    decodes_left -= 1
                if budget > 0 and try_append_decode_slot(seq):
                    # The hot path: a decode that fits; no victim search, no chunk arithmetic.
                    if seq.num_computed_tokens < seq.prefill_end:
                        out.num_prefill_tokens += 1
                    else:
                        num_decode_tokens += 1
                    chunk = seq.decode_chunk
                    if chunk is None:
                        chunk = seq.decode_chunk = ScheduledChunk(seq, 1, True)
                    chunks.append(chunk)
                    budget -= 1
                    index += 1
                    continue
                num_new = 1 if budget > 0 else 0
            else:
                if decodes_left is None:
                    decodes_left = 0
                    for s in running[index + 1 :]:
                        if len(s.prompt_token_ids) + len(s.output_token_ids) == (
                            s.num_computed_tokens + 1
                        ) and (aligned is None or s.signature == aligned):
                            decodes_left += 1
                num_new = min(remaining, cfg.max_prefill_chunk_tokens, budget - decodes_left)
            if num_new <= 0:
                index += 1
                continue
            decode_victims = out.num_preempted_decodes
            num_new = self._make_room(seq, num_new, out)
            if decodes_left is not None:
                decodes_left -= out.num_preempted_decodes - decode_victims
            if num_new == 0:
                break  # `seq` was the tail and became the victim: nothing is left to serve
            bm.append_slot(seq, num_new)
            self._emit(seq, num_new, out)
            budget -= num_new
            index += 1
        out.num_decode_tokens += num_decode_tokens
        # A preemption means memory is short: admitting now would only cause more.
        if not out.preempted:
            if cfg.policy not in ITERATION_POLICIES and not self._batch_in_flight():
                self._maybe_dispatch(now)
            budget = self._admit(now, budget, out)
        self._update_starvation(out)
        return out

    def _step_signature(self) -> SamplingSignature | None:
        """Under `sampling_alignment: strict`, the one sampling signature this step serves: the
        signatures of the running sequences and the queue heads take turns (None: mixed)."""
        if self._config.sampling_alignment != "strict":
            return None
        candidates = list(dict.fromkeys(seq.signature for seq in self._running))
        for name in self._admission_order():
            queue = self._queues[name]
            if queue and queue[0].signature not in candidates:
                candidates.append(queue[0].signature)
        if not candidates:
            return None
        self._alignment_turn += 1
        return candidates[self._alignment_turn % len(candidates)]

    def _slo_budget(self) -> int:
        """The slo policy's token budget for this step (slo_budget.plan_slo_budget)."""
        heads = [q[0] for name in self._admission_order() if (q := self._queues[name])]
        plan = plan_slo_budget(
            self._config, self.cost_model, self._running, heads, self._block_manager
        )
        self.slo_token_budget, self.slo_predicted_ms = plan
        return plan[0]

    def _make_room(self, seq: Sequence, num_new: int, out: SchedulerOutput) -> int:
        """Free blocks for `seq` by preempting from the tail; returns the tokens it may compute
        (a prefill chunk shrinks to what fits), 0 if `seq` had to be preempted itself."""
        bm = self._block_manager
        while not bm.can_append(seq, num_new):
            if num_new > 1:
                fit = bm.max_new_tokens(seq)
                if fit > 0:
                    return fit
            victim = self._running[-1]
            self._preempt(victim, out)
            if victim is seq:
                return 0
        return num_new

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self._running.pop()  # the victim is always the tail
        self.num_running_by_class[seq.priority] -= 1
        self._block_manager.free(seq)
        out.num_preemptions += 1
        seq.num_lost_tokens = seq.num_computed_tokens
        out.preempted.append(seq)
        if seq.num_uncomputed_tokens == 1:
            out.num_preempted_decodes += 1
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.WAITING
        self._queue_of(seq).appendleft(seq)
        self.num_waiting_by_class[seq.priority] += 1

    def _admit(self, now: float, budget: int, out: SchedulerOutput) -> int:
        cfg = self._config
        bm = self._block_manager
        block_size = bm.block_size
        batch_policy = cfg.policy not in ITERATION_POLICIES
        for name in self._admission_order():
            queue = self._queues[name]
            # Separate queues only: in the shared one "batch" is never a queue name.
            limit = self._batch_running_limit(now) if name == "batch" else cfg.max_num_seqs
            running_in_class = self.num_running_by_class
            while queue and budget > 0 and len(self._running) < cfg.max_num_seqs:
                if name == "batch" and running_in_class["batch"] >= limit:
                    break
                seq = queue[0]
                if batch_policy and seq.batch_id != self._batch_id:
                    break
                if self._aligned is not None and seq.signature != self._aligned:
                    break  # strict alignment: the head waits for its signature's turn
                cached_blocks = bm.find_cached_prefix(seq)  # [] with caching off
                num_cached = len(cached_blocks) * block_size
                num_new = min(
                    seq.num_uncomputed_tokens - num_cached, cfg.max_prefill_chunk_tokens, budget
                )
                if not bm.can_allocate(seq, num_new, cached_blocks):
                    return budget  # hold admission: nothing may overtake the head
                queue.popleft()
                self.num_waiting_by_class[seq.priority] -= 1
                self.num_running_by_class[seq.priority] += 1
                seq.status = SequenceStatus.RUNNING
                seq.prefill_end = seq.num_tokens
                if seq.first_scheduled_time is None:
                    seq.first_scheduled_time = now
                bisect.insort(self._running, seq, key=_sort_key)
                bm.allocate(seq, num_new, cached_blocks)
                # The shared blocks' KV is already there: their prefill is skipped.
                seq.num_computed_tokens = num_cached
                out.num_cached_tokens += num_cached
                if seq.num_preemptions == 0:
                    seq.num_cached_tokens = num_cached
                else:
                    out.num_recomputed_tokens += max(0, seq.num_lost_tokens - num_cached)
                    seq.num_lost_tokens = 0
                out.admitted.append(seq)
                self._emit(seq, num_new, out)
                budget -= num_new
        return budget

    def _emit(self, seq: Sequence, num_new: int, out: SchedulerOutput) -> None:
        start = seq.num_computed_tokens
        end = start + num_new
        prefill = max(0, min(end, seq.prefill_end) - start)
        out.num_prefill_tokens += prefill
        out.num_decode_tokens += num_new - prefill
        out.chunks.append(ScheduledChunk(seq, num_new, end == seq.num_tokens))

    def _update_starvation(self, out: SchedulerOutput) -> None:
        if self._config.shared_queue or not self._queues["batch"]:
            self._batch_starved_steps = 0
            return
        admitted_batch = any(seq.priority == "batch" for seq in out.admitted)
        self._batch_starved_steps = 0 if admitted_batch else self._batch_starved_steps + 1
