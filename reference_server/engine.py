"""The synchronous engine: requests in, one step at a time, RequestOutputs and StepRecords out.

It owns request validation, seeds, stop conditions, statistics and the step log; it delegates
who runs to the Scheduler, block counting to the BlockManager and tensors to the model runner
(constructed lazily, so importing this module never imports torch) and queued embeddings to
EmbeddingJobs. An exception in a forward pass fails that step's requests (StepResult.failures)
and leaves the engine serving. Not thread-safe: one thread drives it (AsyncEngine's loop or the
engine core process).
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Sequence as SequenceOf
from typing import Any, Protocol

from reference_server.block_manager import BlockManager
from reference_server.config import EngineConfig
from reference_server.embedding_jobs import EmbeddingJobs, validate_embedding_inputs
from reference_server.errors import AdmissionError, ConfigError, EngineError, EngineFailure
from reference_server.output_processor import OutputProcessor
from reference_server.outputs import EngineStats, RequestOutput, StepResult
from reference_server.request_validation import validate_request
from reference_server.sampling_params import SamplingParams
from reference_server.scheduler import Scheduler
from reference_server.sequence import ScheduledChunk, Sequence, request_output
from reference_server.step_cost import step_features
from reference_server.step_record import StepLog, StepRecord
from reference_server.tokenizer import ByteTokenizer

__all__ = ["Engine", "ModelRunnerLike"]

_SEED_LIMIT = 2**63

logger = logging.getLogger(__name__)


class ModelRunnerLike(Protocol):
    num_kv_blocks: int
    block_size: int
    vocab_size: int
    eos_token_id: int
    device: str
    model_name: str

    def execute(self, chunks: SequenceOf[ScheduledChunk]) -> list[int | None]: ...

    def embed(self, token_id_lists: list[list[int]]) -> list[list[float]]: ...


class Engine:
    def __init__(self, config: EngineConfig, *, runner: ModelRunnerLike | None = None) -> None:
        if not isinstance(config, EngineConfig):
            raise ConfigError("config", f"must be an EngineConfig, got {type(config).__name__}")
        if runner is None:
            # torch only when needed
            from reference_server.model_runner import ModelRunner, auto_num_threads

            num_threads = config.torch_num_threads
            if num_threads is None:
                num_threads = auto_num_threads(config.device)

            runner = ModelRunner(
                model=config.model,
                model_path=config.model_path,
                device=config.device,
                dtype=config.dtype,
                seed=config.seed,
                block_size=config.block_size,
                kv_cache_memory_bytes=config.kv_cache_memory_bytes,
                num_kv_blocks_override=config.num_gpu_blocks_override,
                gpu_memory_utilization=config.gpu_memory_utilization,
                max_model_len=config.max_model_len,
                max_num_batched_tokens=config.batching.max_num_batched_tokens,
                num_threads=num_threads,
                batch_invariant=config.batch_invariant,
            )
        self._config = config
        self.runner = runner
        self.tokenizer = ByteTokenizer()
        self.block_manager = BlockManager(
            num_blocks=runner.num_kv_blocks,
            block_size=runner.block_size,
            watermark_ratio=config.watermark_ratio,
        )
        self.scheduler = Scheduler(config.batching, self.block_manager)
        self._apply_sampler_settings(config.batching)
        self.step_log = StepLog(max_records=config.step_log_size, path=config.step_log_path)
        self._rng = random.Random(config.seed)
        self._max_model_len = config.max_model_len
        self._seqs: dict[str, Sequence] = {}
        self._output_processor = OutputProcessor(
            self.tokenizer,
            eos_token_id=runner.eos_token_id,
            max_model_len=config.max_model_len,
            on_finish=self._finish_flushing,
        )
        self._pending_outputs: list[RequestOutput] = []
        self._num_with_deadline = 0
        self._num_added = 0
        self._step_seq = 0
        self._step_seconds_ema = 0.01
        self._last_step_end: float | None = None  # set while the slo policy has sequences running
        self._stats = EngineStats(num_rejected_total_by_reason={})
        self._embedding_jobs = EmbeddingJobs()
        self._embedding_results: list[tuple[int, Any, EngineError | None]] = []

    # -- configuration ---------------------------------------------------------------------

    @property
    def config(self) -> EngineConfig:
        return self._config

    def get_batching(self) -> dict[str, Any]:
        return self._config.batching.to_dict()

    def update_batching(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Validate `changes` (partial, nested dict) and apply all of them or none; returns the
        previous settings. ConfigError.field names the offending key, e.g.
        "interactive.max_wait_ms"."""
        if not isinstance(changes, dict):
            raise ConfigError("batching", f"must be a mapping, got {type(changes).__name__}")
        previous = self._config.batching
        updated = previous.merged(changes)
        check = getattr(self.runner, "check_step_memory", None)  # a fake runner has none
        if check is not None and updated.max_num_batched_tokens != previous.max_num_batched_tokens:
            check(updated.max_num_batched_tokens)
        self.scheduler.set_config(updated)
        self._apply_sampler_settings(updated)
        self._config = dataclasses.replace(self._config, batching=updated)
        return previous.to_dict()

    def _apply_sampler_settings(self, batching: Any) -> None:
        # The runner samples; the one batching setting it reads is the shared_sampler_seed bug
        # (a fake runner without the attribute ignores it).
        if hasattr(self.runner, "shared_sampler_seed"):
            self.runner.shared_sampler_seed = batching.shared_sampler_seed

    # -- requests --------------------------------------------------------------------------

    def validate_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, priority: str
    ) -> None:
        """Raise RequestValidationError for anything the request itself gets wrong."""
        validate_request(
            request_id=request_id,
            prompt_token_ids=prompt_token_ids,
            params=params,
            priority=priority,
            in_flight=self._seqs,
            vocab_size=self.runner.vocab_size,
            config=self._config,
            block_manager=self.block_manager,
        )

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        priority: str = "interactive",
        arrival_time: float | None = None,
    ) -> None:
        self.validate_request(request_id, prompt_token_ids, params, priority)
        limit = self._config.batching.class_config(priority).max_waiting
        waiting = self.scheduler.num_waiting_by_class[priority]
        if waiting >= limit:
            rejected = self._stats.num_rejected_total_by_reason
            rejected["queue_full"] = rejected.get("queue_full", 0) + 1
            # A rough wait: one step per queued request ahead, bounded to something actionable.
            retry = min(30.0, max(0.1, self._step_seconds_ema * max(1, waiting)))
            raise AdmissionError("queue_full", retry_after_seconds=round(retry, 3))
        signature = params.signature()  # before the seed is drawn: given-or-not is part of it
        if params.seed is None:
            # Drawn now so a recompute after preemption samples the same tokens.
            params = dataclasses.replace(params, seed=self._rng.randrange(_SEED_LIMIT))
        self._num_added += 1
        seq = Sequence(
            request_id,
            list(prompt_token_ids),
            params,
            priority=priority,
            arrival_time=time.monotonic() if arrival_time is None else arrival_time,
            order=self._num_added,
            signature=signature,
        )
        self._seqs[request_id] = seq
        self._output_processor.add(request_id, params)
        if seq.deadline_time is not None:
            self._num_with_deadline += 1
        self.scheduler.add(seq)

    def abort(self, request_id: str) -> bool:
        """Finish `request_id` with reason "abort" and free its blocks now; False if unknown."""
        seq = self._seqs.get(request_id)
        if seq is None:
            return False
        self._stats.num_aborted_total += 1
        self.scheduler.remove(seq)
        self._pending_outputs.append(self._finish(seq, "abort", []))
        return True

    def abort_all(self) -> int:
        request_ids = list(self._seqs)
        for request_id in request_ids:
            self.abort(request_id)
        self._embedding_results.extend(self._embedding_jobs.cancel_all("draining"))
        return len(request_ids)

    def has_unfinished(self) -> bool:
        return bool(self._seqs or self._pending_outputs or self.num_embedding_jobs)

    def num_unfinished(self) -> int:
        return len(self._seqs)

    @property
    def num_embedding_jobs(self) -> int:
        """Queued embedding jobs, and cancelled ones the next step answers."""
        return len(self._embedding_jobs) + len(self._embedding_results)

    def next_wakeup_seconds(self) -> float | None:
        """0 when step() has work now; else seconds until it may (a dynamic window or a deadline
        expires); None when there is nothing to do until a request arrives."""
        if self._pending_outputs or self.num_embedding_jobs:
            return 0.0
        now = time.monotonic()
        wakeup = self.scheduler.next_wakeup_seconds(now)
        if self._num_with_deadline and wakeup != 0.0:
            soonest = min(
                s.deadline_time for s in self._seqs.values() if s.deadline_time is not None
            )
            until = max(0.0, soonest - now)
            wakeup = until if wakeup is None else min(wakeup, until)
        return wakeup

    def embed(self, token_id_lists: list[list[int]]) -> list[list[float]]:
        """All inputs in one forward, now (offline use; the server queues add_embedding)."""
        return self.runner.embed(self._valid_embedding_inputs(token_id_lists))

    def add_embedding(self, job_id: int, token_id_lists: list[list[int]]) -> None:
        """Queue an embedding job; it runs a slice of at most max_num_batched_tokens after each
        step, and its vectors come back in a StepResult's `embeddings`."""
        self._embedding_jobs.add(job_id, self._valid_embedding_inputs(token_id_lists))

    def _valid_embedding_inputs(self, token_id_lists: list[list[int]]) -> list[list[int]]:
        return validate_embedding_inputs(
            token_id_lists, vocab_size=self.runner.vocab_size, max_model_len=self._max_model_len
        )

    # -- the step --------------------------------------------------------------------------

    def step(self) -> StepResult:
        """One generation step, then (if any is queued) one embedding slice."""
        result = self._generation_step()
        result.embeddings, self._embedding_results = self._embedding_results, []
        budget = self._config.batching.max_num_batched_tokens
        result.embeddings.extend(self._embedding_jobs.run_slice(self.runner.embed, budget))
        return result

    def _generation_step(self) -> StepResult:
        start = time.monotonic()
        wall = time.time()
        if self._last_step_end is not None:
            # Sequences were still running after the last step, so the loop did not wait idle:
            # this is the gap every running request sees between two of its tokens beyond the
            # step itself (the slo policy's target is a time between tokens).
            self.scheduler.cost_model.observe_gap((start - self._last_step_end) * 1000.0)
            self._last_step_end = None
        outputs = self._pending_outputs
        self._pending_outputs = []
        if self._num_with_deadline:
            self._expire_deadlines(start, outputs)
        scheduled = self.scheduler.schedule(start)
        if scheduled.is_empty:
            return StepResult(outputs, None)
        stats = self._stats
        caching = self._config.batching.enable_prefix_caching
        for seq in scheduled.admitted:
            if seq.num_preemptions == 0:
                stats.num_prompt_tokens_total += seq.num_prompt_tokens
                if caching:
                    # Once per request, at its first admission: a re-admission's lookup of its
                    # own blocks would inflate the hit ratio (vLLM counts those apart too).
                    stats.num_prefix_cache_queries_total += seq.num_prompt_tokens
                    stats.num_prefix_cache_hits_total += seq.num_cached_tokens
        slo = self._config.batching.policy == "slo"
        # Features are read before num_computed_tokens advances (the cost model's input).
        features = step_features(scheduled.chunks) if slo else None
        forward_start = time.monotonic()
        try:
            tokens = self.runner.execute(scheduled.chunks)
        except Exception as exc:  # fails this step's requests, not the engine
            return StepResult(outputs, None, failures=self._fail_chunks(scheduled.chunks, exc))
        forward_end = time.monotonic()
        if len(tokens) != len(scheduled.chunks):
            raise RuntimeError(
                f"runner returned {len(tokens)} tokens for {len(scheduled.chunks)} chunks"
            )
        any_finished = False
        append_token = self._append_token
        append_output = outputs.append
        for chunk, token in zip(scheduled.chunks, tokens, strict=True):
            seq = chunk.seq
            seq.num_computed_tokens += chunk.num_new_tokens
            if not chunk.sample:
                continue
            if token is None:
                raise RuntimeError(f"runner sampled no token for {seq.request_id}")
            output = append_token(seq, token, forward_end)
            append_output(output)
            if output.finished:
                any_finished = True
        if any_finished:
            self.scheduler.remove_finished_running()
        stats.num_steps_total += 1
        stats.num_preemptions_total += scheduled.num_preemptions
        stats.num_recomputed_tokens_total += scheduled.num_recomputed_tokens
        stats.num_prefill_tokens_total += scheduled.num_prefill_tokens
        self._step_seq += 1
        end = time.monotonic()
        self._step_seconds_ema += 0.1 * (end - start - self._step_seconds_ema)
        predicted_ms = self.scheduler.slo_predicted_ms if slo else None
        if features is not None:
            self.scheduler.cost_model.observe(features, (end - start) * 1000.0)
            if any(self.scheduler.num_running_by_class.values()):
                self._last_step_end = end
        record = StepRecord(
            seq=self._step_seq,
            start_time=start,
            wall_time=wall,
            duration_seconds=end - start,
            forward_seconds=forward_end - forward_start,
            policy=self._config.batching.policy,
            num_seqs=len(scheduled.chunks),
            num_prefill_tokens=scheduled.num_prefill_tokens,
            num_decode_tokens=scheduled.num_decode_tokens,
            num_kv_blocks_used=self.block_manager.num_used_blocks,
            num_kv_blocks_total=self.block_manager.num_blocks,
            num_preemptions=scheduled.num_preemptions,
            num_recomputed_tokens=scheduled.num_recomputed_tokens,
            num_waiting=dict(self.scheduler.num_waiting_by_class),
            num_running=dict(self.scheduler.num_running_by_class),
            token_budget=self.scheduler.slo_token_budget if slo else None,
            predicted_seconds=None if predicted_ms is None else predicted_ms / 1000.0,
            num_cached_tokens=scheduled.num_cached_tokens,
        )
        self.step_log.append(record)
        return StepResult(outputs, record)

    def _fail_chunks(
        self, chunks: SequenceOf[ScheduledChunk], exc: Exception
    ) -> list[tuple[str, EngineError]]:
        # Their KV may be half written: free it. Their clients get the error, not an "abort".
        logger.error("forward pass failed for %d sequence(s): %r", len(chunks), exc)
        error = EngineFailure(f"the forward pass failed: {exc!r}")
        failures = []
        for chunk in chunks:
            seq = chunk.seq
            if seq.request_id in self._seqs:
                # Blocks registered for this step hold no valid KV: they must not be hit.
                self.scheduler.remove(seq, discard_cached=True)
                self._finish(seq, "abort", [])
                failures.append((seq.request_id, error))
        return failures

    def _append_token(self, seq: Sequence, token: int, now: float) -> RequestOutput:
        seq.output_token_ids.append(token)
        self._stats.num_generation_tokens_total += 1
        if seq.first_token_time is None:
            seq.first_token_time = now
        return self._output_processor.append_token(seq, token)

    def _finish_flushing(
        self, seq: Sequence, reason: str, new_token_ids: list[int], text: str, flush: bool
    ) -> RequestOutput:
        return self._finish(seq, reason, new_token_ids, text, flush=flush)

    def _finish(
        self,
        seq: Sequence,
        reason: str,
        new_token_ids: list[int],
        text: str = "",
        *,
        flush: bool = True,
    ) -> RequestOutput:
        seq.finish_reason = reason
        text += self._output_processor.remove(seq.request_id, flush=flush)
        del self._seqs[seq.request_id]
        if seq.deadline_time is not None:
            self._num_with_deadline -= 1
        self._stats.num_finished_total_by_reason[reason] += 1
        return request_output(seq, new_token_ids, text, reason)

    def _expire_deadlines(self, now: float, outputs: list[RequestOutput]) -> None:
        expired = [
            s for s in self._seqs.values() if s.deadline_time is not None and s.deadline_time <= now
        ]
        for seq in expired:
            self.scheduler.remove(seq)
            outputs.append(self._finish(seq, "deadline", []))

    # -- statistics ------------------------------------------------------------------------

    def stats(self) -> EngineStats:
        bm = self.block_manager.stats()
        snapshot = dataclasses.replace(
            self._stats,
            num_finished_total_by_reason=dict(self._stats.num_finished_total_by_reason),
            num_rejected_total_by_reason=dict(self._stats.num_rejected_total_by_reason),
            num_running_by_class=dict(self.scheduler.num_running_by_class),
            num_waiting_by_class=dict(self.scheduler.num_waiting_by_class),
            num_kv_blocks_used=bm.num_blocks_used,
            num_kv_blocks_cached=bm.num_blocks_cached,
            num_kv_blocks_total=bm.num_blocks_total,
            num_kv_tokens_total=bm.num_blocks_total * bm.block_size,
            num_kv_blocks_peak=bm.num_blocks_peak,
            kv_usage_ratio=bm.usage_ratio,
            kv_usage_peak_ratio=bm.peak_usage_ratio,
            num_kv_slots_unused=bm.num_slots_unused,
            num_kv_slots_unused_at_peak=bm.num_slots_unused_at_peak,
            **self._slo_stats(),
        )
        return snapshot

    def _slo_stats(self) -> dict[str, Any]:
        scheduler = self.scheduler
        if self._config.batching.policy != "slo" or scheduler.slo_predicted_ms is None:
            return {}
        return {
            "slo_token_budget": scheduler.slo_token_budget,
            "slo_predicted_step_seconds": _seconds(scheduler.slo_predicted_ms),
            "slo_prediction_error_seconds": _seconds(scheduler.cost_model.mean_abs_error_ms),
        }

    def steps_after(self, seq: int, limit: int = 1000) -> tuple[list[dict[str, Any]], int, int]:
        return self.step_log.after(seq, limit)

    def close(self) -> None:
        self.step_log.close()


def _seconds(milliseconds: float | None) -> float | None:
    return None if milliseconds is None else milliseconds / 1000.0
