"""Thinking mode over HTTP: `chat_template_kwargs.enable_thinking` / `reasoning_effort` turn it
on, `thinking_tokens` (or the server default) sets its exact length, reasoning streams as
`delta.reasoning_content` before any `delta.content`, and usage counts it in
`completion_tokens_details.reasoning_tokens`. Also the two alignment failure presets' keys on
/admin/batching, and the penalty and logit_bias fields."""

from __future__ import annotations

import httpx
from server_testlib import parse_sse

MESSAGES = [{"role": "user", "content": "Think first."}]
THINKING = {"chat_template_kwargs": {"enable_thinking": True}}


def _stream(client: httpx.Client, body: dict) -> list:
    with client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        return parse_sse(response.iter_lines())


def test_streamed_reasoning_comes_first_with_its_exact_length_and_count(client):
    body = {"messages": MESSAGES, "max_tokens": 12, "thinking_tokens": 5, **THINKING,
            "stream_options": {"include_usage": True}}  # fmt: skip
    events = _stream(client, body)
    assert events[-1] == "[DONE]"
    deltas = [e["choices"][0]["delta"] for e in events[:-1] if e["choices"]]
    kinds = [k for d in deltas for k in ("reasoning_content", "content") if d.get(k)]
    assert kinds and kinds[0] == "reasoning_content"
    assert "reasoning_content" not in kinds[kinds.index("content") :]  # reasoning first, then done
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    answer = "".join(d.get("content") or "" for d in deltas)
    usage = events[-2]["usage"]
    assert usage["completion_tokens"] == 12
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 5}
    # One byte per token (docs/model.md): the reasoning is exactly its 5 tokens.
    assert len(reasoning.encode()) == 5
    assert len(answer.encode()) == 7


def test_non_streaming_reasoning_effort_scales_the_server_default(client):
    body = {"messages": MESSAGES, "max_tokens": 70, "reasoning_effort": "high"}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    result = response.json()
    message = result["choices"][0]["message"]
    # --default-thinking-tokens 32 (the default) x 2 for "high".
    assert len(message["reasoning_content"].encode()) == 64
    assert len(message["content"].encode()) == 6
    assert result["usage"]["completion_tokens_details"] == {"reasoning_tokens": 64}
    low = client.post("/v1/chat/completions", json={**body, "reasoning_effort": "low"}).json()
    assert low["usage"]["completion_tokens_details"] == {"reasoning_tokens": 16}


def test_continuous_usage_counts_reasoning_as_it_streams(client):
    body = {"messages": MESSAGES, "max_tokens": 6, "thinking_tokens": 3, **THINKING,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}  # fmt: skip
    events = _stream(client, body)
    counts = [
        (
            e["usage"]["completion_tokens"],
            e["usage"]["completion_tokens_details"]["reasoning_tokens"],
        )
        for e in events[:-1]
    ]
    assert counts[0] == (0, 0)  # the role chunk
    assert counts[-1] == (6, 3)
    assert all(reasoning == min(done, 3) for done, reasoning in counts)


def test_without_thinking_the_response_has_no_reasoning_fields(client):
    for extra in ({}, {"chat_template_kwargs": {"enable_thinking": False}}):
        body = {"messages": MESSAGES, "max_tokens": 4, **extra}
        result = client.post("/v1/chat/completions", json=body).json()
        assert "reasoning_content" not in result["choices"][0]["message"]
        assert "completion_tokens_details" not in result["usage"]


def test_thinking_fields_are_validated_with_openai_errors(client):
    cases = [
        ({"thinking_tokens": 3}, "thinking_tokens"),
        ({**THINKING, "thinking_tokens": -1}, "thinking_tokens"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": False}},
         "reasoning_effort"),
    ]  # fmt: skip
    for extra, field in cases:
        response = client.post("/v1/chat/completions", json={"messages": MESSAGES, **extra})
        assert response.status_code == 400, extra
        error = response.json()["error"]
        assert error["param"] == field
        assert error["type"] == "invalid_request_error"


def test_penalties_and_logit_bias_are_served(client):
    body = {"messages": MESSAGES, "max_tokens": 5, "temperature": 0,
            "logit_bias": {str(ord("Z")): 100}, "presence_penalty": 0.5,
            "frequency_penalty": 0.5, "repetition_penalty": 1.1}  # fmt: skip
    result = client.post("/v1/chat/completions", json=body).json()
    # The penalties cannot outweigh a +100 bias on the tiny model's small logits.
    assert result["choices"][0]["message"]["content"] == "ZZZZZ"


def test_the_alignment_presets_are_live_batching_keys(client):
    settings = client.get("/admin/batching").json()
    assert settings["sampling_alignment"] == "mixed"
    assert settings["shared_sampler_seed"] is False
    bad = client.put("/admin/batching", json={"sampling_alignment": "lockstep"})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "sampling_alignment"
    change = {"sampling_alignment": "strict", "shared_sampler_seed": True}
    response = client.put("/admin/batching", json=change)
    assert response.status_code == 200
    try:
        assert response.json()["current"]["sampling_alignment"] == "strict"
        body = {"messages": MESSAGES, "max_tokens": 3, "seed": 1}
        assert client.post("/v1/chat/completions", json=body).status_code == 200
    finally:
        client.put("/admin/batching", json=response.json()["previous"])
    assert client.get("/admin/batching").json() == settings


def test_prerendered_reasoning_chunks_equal_the_plain_encoding():
    import orjson

    from reference_server.api.protocol import GenerationRequest
    from reference_server.api.response_shapes import ResponseShapes
    from reference_server.sampling_params import SamplingParams

    request = GenerationRequest(
        endpoint="chat", model=None, prompt_token_ids=[1], stream=True, include_usage=True,
        priority="interactive", params=SamplingParams(thinking=True, thinking_tokens=2),
    )  # fmt: skip
    shapes = ResponseShapes(request, 'mo"del')
    for text in ["a", 'quote " and \\ back', "é\u2028\x00\ufffd"]:
        chunk = orjson.loads(shapes.reasoning_chunk(text)[len(b"data: ") :])
        plain = orjson.loads(
            shapes.chunk(
                {
                    "index": 0,
                    "delta": {"reasoning_content": text},
                    "finish_reason": None,
                    "logprobs": None,
                }
            )[len(b"data: ") :]
        )
        assert chunk == plain
