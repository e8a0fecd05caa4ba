"""KV capacity in tokens is read where a server states it, and is unknown otherwise."""

from __future__ import annotations

from gate.observers.prom_scraper import parse_exposition
from gate.orchestrator.calibration import kv_capacity


def test_the_bundled_server_gauge_is_read_as_tokens():
    text = "# TYPE batchgate_kv_capacity_tokens gauge\nbatchgate_kv_capacity_tokens 65536\n"
    assert kv_capacity(parse_exposition(text)) == {
        "tokens": 65536,
        "source": "batchgate_kv_capacity_tokens",
    }


def test_vllm_cache_config_info_gives_blocks_times_block_size():
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="2000",cache_dtype="auto"} 1.0\n'
    )
    assert kv_capacity(parse_exposition(text))["tokens"] == 32000


def test_sglang_max_total_num_tokens_is_the_capacity():
    text = "# TYPE sglang:max_total_num_tokens gauge\nsglang:max_total_num_tokens 123456\n"
    assert kv_capacity(parse_exposition(text))["tokens"] == 123456


def test_a_server_that_does_not_say_is_unknown_not_zero():
    text = "# TYPE other_metric gauge\nother_metric 3\n"
    assert kv_capacity(parse_exposition(text)) == {"tokens": None, "source": "unknown"}
    broken = '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16"} 1.0\n'
    assert kv_capacity(parse_exposition(broken))["tokens"] is None


def _llamacpp_target(props: dict) -> object:  # type: ignore[type-arg]
    import httpx

    from gate.orchestrator.target import TargetClient

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/props":
            return httpx.Response(200, json=props)
        return httpx.Response(200, text="# TYPE llamacpp:n_busy_slots_per_decode gauge\n")

    target = TargetClient("http://127.0.0.1:1")
    target._client = httpx.Client(transport=httpx.MockTransport(answer))
    return target


def test_llamacpp_capacity_is_the_context_of_every_slot():
    # llama-server -c 32768 -np 8 (what its /props says, captured from a real one).
    from gate.orchestrator.calibration import _kv_capacity

    target = _llamacpp_target({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 8})
    found = _kv_capacity(target)  # type: ignore[arg-type]
    assert found["tokens"] == 32768
    assert found["source"] == "llama.cpp /props: n_ctx 4096 per slot x 8 slots"
    one_slot = _llamacpp_target({"default_generation_settings": {"n_ctx": 2048}})
    assert _kv_capacity(one_slot)["tokens"] == 2048  # type: ignore[arg-type]
