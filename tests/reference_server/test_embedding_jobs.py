"""EmbeddingJobs: slices within the token budget, in order; a failed forward fails its job only."""

from __future__ import annotations

import pytest

from reference_server.embedding_jobs import EmbeddingJobs, validate_embedding_inputs
from reference_server.errors import AdmissionError, EngineFailure, RequestValidationError


def _embed_recording(calls):
    def embed(token_id_lists):
        calls.append([len(ids) for ids in token_id_lists])
        return [[float(len(ids)), float(ids[0])] for ids in token_id_lists]

    return embed


def test_slices_respect_the_budget_keep_order_and_a_long_input_goes_alone():
    jobs = EmbeddingJobs()
    inputs = [[1] * 3, [2] * 4, [3] * 10, [4] * 2, [5] * 2]
    jobs.add(7, inputs)
    calls: list[list[int]] = []
    results = []
    while jobs.pending:
        results.extend(jobs.run_slice(_embed_recording(calls), token_budget=8))
    assert calls == [[3, 4], [10], [2, 2]]
    assert results == [(7, [[3.0, 1.0], [4.0, 2.0], [10.0, 3.0], [2.0, 4.0], [2.0, 5.0]], None)]


def test_jobs_run_oldest_first_and_a_failing_forward_fails_only_its_job():
    jobs = EmbeddingJobs()
    jobs.add(1, [[1, 1]])
    jobs.add(2, [[9, 9]])

    def embed(token_id_lists):
        if token_id_lists[0][0] == 1:
            raise MemoryError("out of memory (injected)")
        return [[1.0]]

    first = jobs.run_slice(embed, token_budget=16)
    assert first[0][0] == 1 and first[0][1] is None
    assert isinstance(first[0][2], EngineFailure) and "MemoryError" in str(first[0][2])
    assert jobs.run_slice(embed, token_budget=16) == [(2, [[1.0]], None)]
    assert not jobs.pending


def test_cancel_all_answers_every_queued_job():
    jobs = EmbeddingJobs()
    jobs.add(1, [[1]])
    jobs.add(2, [[2]])
    cancelled = jobs.cancel_all("draining")
    assert [job_id for job_id, _, _ in cancelled] == [1, 2]
    assert all(isinstance(error, AdmissionError) for _, _, error in cancelled)
    assert not jobs.pending


@pytest.mark.parametrize(
    "inputs", [[], [[]], [[1, 2, 3, 4, 5, 6, 7, 8, 9]], [[True]], [[300]], "text", [[-1]]]
)
def test_invalid_inputs_are_refused_before_they_queue(inputs):
    with pytest.raises(RequestValidationError):
        validate_embedding_inputs(inputs, vocab_size=263, max_model_len=8)
