"""EmbeddingJobs: embedding requests queued inside the engine and run a slice at a time, under
the same per-step token budget as generation.

Why: an embedding batch run in one forward (128 inputs x 2,047 tokens) held the engine for 30 s
while every stream waited, and its activations took a gigabyte. Here a job is cut into slices of
at most `max_num_batched_tokens` tokens (an input longer than that is a slice by itself); the
engine runs one slice after each generation step, so a stream waits at most one slice between
two of its tokens and memory is bounded by the slice, not by the request. A slice whose forward
raises fails its job only (EngineFailure); the engine keeps serving.

It owns the queue, the slicing and input validation; it does not know the runner (the engine
passes its embed function) or HTTP. Which requests share a job, and how long they wait for each
other, is decided before a job gets here, by the API process's embeddings batcher
(`reference_server.api.embedding_batcher`, a wall-clock window across requests; why it sits
there: its docstring); this module decides only how a job shares the engine with generation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from reference_server.errors import AdmissionError, EngineError, EngineFailure
from reference_server.errors import RequestValidationError as _Invalid

__all__ = ["EmbeddingJobs", "EmbeddingResult", "validate_embedding_inputs"]

# (job id, vectors in input order or None, the error that failed the job or None)
EmbeddingResult = tuple[int, "list[list[float]] | None", "EngineError | None"]
EmbedFn = Callable[[list[list[int]]], list[list[float]]]


def validate_embedding_inputs(
    token_id_lists: object, *, vocab_size: int, max_model_len: int
) -> list[list[int]]:
    if not isinstance(token_id_lists, list) or not token_id_lists:
        raise _Invalid("input", "must be a non-empty list of token id lists")
    for ids in token_id_lists:
        if not isinstance(ids, list) or not ids:
            raise _Invalid("input", "each input must be a non-empty token list")
        if len(ids) > max_model_len:
            raise _Invalid("input", "an input exceeds max_model_len")
        if any(
            isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab_size for t in ids
        ):
            raise _Invalid("input", "token ids must be vocabulary integers")
    return token_id_lists


@dataclass(slots=True)
class _Job:
    job_id: int
    inputs: list[list[int]]
    vectors: list[list[float]] = field(default_factory=list)

    @property
    def next_index(self) -> int:
        return len(self.vectors)


class EmbeddingJobs:
    def __init__(self) -> None:
        self._jobs: deque[_Job] = deque()

    @property
    def pending(self) -> bool:
        return bool(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job_id: int, inputs: list[list[int]]) -> None:
        self._jobs.append(_Job(job_id, inputs))

    def run_slice(self, embed: EmbedFn, token_budget: int) -> list[EmbeddingResult]:
        """Run the oldest job's next slice (inputs in order, at most `token_budget` tokens, at
        least one input); the jobs this finished or failed."""
        if not self._jobs:
            return []
        job = self._jobs[0]
        start = job.next_index
        end, tokens = start, 0
        while end < len(job.inputs) and (
            end == start or tokens + len(job.inputs[end]) <= token_budget
        ):
            tokens += len(job.inputs[end])
            end += 1
        try:
            vectors = embed(job.inputs[start:end])
        except EngineError as exc:
            self._jobs.popleft()
            return [(job.job_id, None, exc)]
        except Exception as exc:  # this job's forward pass failed; the others go on
            self._jobs.popleft()
            return [(job.job_id, None, EngineFailure(f"embedding forward failed: {exc!r}"))]
        if len(vectors) != end - start:
            self._jobs.popleft()
            message = f"embed returned {len(vectors)} vectors for {end - start} inputs"
            return [(job.job_id, None, EngineFailure(message))]
        job.vectors.extend(vectors)
        if job.next_index < len(job.inputs):
            return []
        self._jobs.popleft()
        return [(job.job_id, job.vectors, None)]

    def cancel_all(self, reason: str) -> list[EmbeddingResult]:
        """Fail every queued job (the drain's abort): AdmissionError(`reason`) for each."""
        jobs, self._jobs = list(self._jobs), deque()
        return [(job.job_id, None, AdmissionError(reason)) for job in jobs]
