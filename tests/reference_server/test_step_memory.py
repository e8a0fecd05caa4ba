"""The step memory check: a token budget that would not fit is refused with the figures."""

from __future__ import annotations

import pytest

from reference_server.errors import ConfigError
from reference_server.model_config import get_preset
from reference_server.step_memory import check_step_memory, step_activation_bytes
from tests.reference_server.fakes import FakeRunner, make_engine

TINY = get_preset("tiny")
MIB = 2**20


def test_the_estimate_grows_with_tokens_and_context():
    one = step_activation_bytes(TINY, tokens=1, max_model_len=512)
    assert step_activation_bytes(TINY, tokens=100, max_model_len=512) == 100 * one
    assert step_activation_bytes(TINY, tokens=1, max_model_len=4096) > one


def test_cpu_allows_half_of_the_available_memory_and_names_what_fits():
    per_token = step_activation_bytes(TINY, tokens=1, max_model_len=512)
    free = 1000 * per_token * 2  # half of it holds exactly 1000 tokens
    check_step_memory(TINY, device="cpu", max_model_len=512, tokens=1000, reserved_tokens=0,
                      free_bytes=free)  # fmt: skip
    with pytest.raises(ConfigError) as error:
        check_step_memory(TINY, device="cpu", max_model_len=512, tokens=1001, reserved_tokens=0,
                          free_bytes=free)  # fmt: skip
    assert error.value.field == "max_num_batched_tokens"
    assert "at most about 1000 fit" in error.value.message


def test_cuda_counts_the_start_up_reserve_plus_most_of_what_is_free_now():
    per_token = step_activation_bytes(TINY, tokens=1, max_model_len=512)
    kwargs = {"device": "cuda", "max_model_len": 512, "reserved_tokens": 2048}
    check_step_memory(TINY, tokens=2048, free_bytes=0, **kwargs)  # the reserve covers it
    with pytest.raises(ConfigError, match="device memory free now"):
        check_step_memory(TINY, tokens=2049, free_bytes=0, **kwargs)
    check_step_memory(TINY, tokens=2048 + 900, free_bytes=1000 * per_token, **kwargs)


def test_update_batching_refuses_a_budget_the_runner_says_cannot_fit_and_keeps_the_old_one():
    class SmallMemoryRunner(FakeRunner):
        def check_step_memory(self, max_num_batched_tokens):
            if max_num_batched_tokens > 4096:
                raise ConfigError("max_num_batched_tokens", "would not fit (injected)")

    engine = make_engine(runner=SmallMemoryRunner())
    with pytest.raises(ConfigError, match="would not fit"):
        engine.update_batching({"max_num_batched_tokens": 10**9, "max_num_seqs": 8})
    assert engine.get_batching()["max_num_batched_tokens"] == 2048
    assert engine.get_batching()["max_num_seqs"] != 8  # all or nothing
    engine.update_batching({"max_num_batched_tokens": 4096})
    assert engine.get_batching()["max_num_batched_tokens"] == 4096
