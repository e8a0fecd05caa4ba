"""Request parsing and model-level limits, without a server: every refusal names its field."""

from __future__ import annotations

import pytest

from reference_server.api.errors import APIError
from reference_server.api.protocol import (
    RequestLimits,
    parse_chat_request,
    parse_completion_request,
    parse_embedding_request,
)
from reference_server.errors import RequestValidationError
from reference_server.tokenizer import ByteTokenizer

TOKENIZER = ByteTokenizer()
LIMITS = RequestLimits(
    max_model_len=64,
    max_tokens_cap=32,
    vocab_size=TOKENIZER.vocab_size,
    default_max_tokens=16,
    max_stop_sequences=4,
    max_stop_sequence_chars=8,
    max_messages=3,
    request_timeout_seconds=30.0,
    embedding_max_inputs_per_request=2,
)
MESSAGES = [{"role": "user", "content": "hi"}]


def chat(body: dict, header_priority: str | None = None):
    return parse_chat_request(
        body, tokenizer=TOKENIZER, limits=LIMITS, header_priority=header_priority
    )


def completion(body: dict):
    return parse_completion_request(body, tokenizer=TOKENIZER, limits=LIMITS, header_priority=None)


def test_chat_request_becomes_template_tokens_and_sampling_params():
    parsed = chat(
        {
            "model": "tiny",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "h"}, {"text": "i"}]},
            ],
            "max_completion_tokens": 5,
            "temperature": 0,
            "top_p": 0.5,
            "top_k": 3,
            "seed": 7,
            "stop": ["\n"],
            "stream": True,
            "stream_options": {"include_usage": True},
            "priority": "batch",
        }
    )
    expected = TOKENIZER.apply_chat_template(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    )
    assert parsed.prompt_token_ids == expected
    assert parsed.params.max_tokens == 5
    assert (parsed.params.temperature, parsed.params.top_p, parsed.params.top_k) == (0.0, 0.5, 3)
    assert parsed.params.seed == 7 and parsed.params.stop == ("\n",)
    assert parsed.params.deadline_seconds == LIMITS.request_timeout_seconds
    assert parsed.stream and parsed.include_usage and parsed.priority == "batch"


def test_max_tokens_defaults_to_the_server_default_capped_by_the_remaining_context():
    assert chat({"messages": MESSAGES}).params.max_tokens == 16
    long_prompt = completion({"prompt": "x" * 55})  # 56 tokens with bos: 8 left
    assert long_prompt.params.max_tokens == 8


def test_priority_comes_from_body_then_header_then_default():
    assert chat({"messages": MESSAGES}).priority == "interactive"
    assert chat({"messages": MESSAGES}, header_priority="Batch").priority == "batch"
    assert chat({"messages": MESSAGES, "priority": "interactive"}, "batch").priority == (
        "interactive"
    )


def test_completion_prompt_forms():
    assert completion({"prompt": "ab"}).prompt_token_ids == [TOKENIZER.bos_token_id, 97, 98]
    assert completion({"prompt": [5, 6]}).prompt_token_ids == [5, 6]
    assert completion({"prompt": ["ab"]}).prompt_token_ids == [TOKENIZER.bos_token_id, 97, 98]
    assert completion({"prompt": [[5, 6]]}).prompt_token_ids == [5, 6]


CHAT_ERRORS = [
    ({"messages": MESSAGES, "max_tokens": "8"}, "max_tokens"),
    ({"messages": MESSAGES, "max_tokens": True}, "max_tokens"),
    ({"messages": MESSAGES, "max_tokens": 8.0}, "max_tokens"),
    ({"messages": MESSAGES, "max_tokens": 0}, "max_tokens"),
    ({"messages": MESSAGES, "max_tokens": 33}, "max_tokens"),
    ({"messages": MESSAGES, "max_tokens": 4, "max_completion_tokens": 5}, "max_completion_tokens"),
    ({"messages": [{"role": "user", "content": "x" * 70}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x" * 40}], "max_tokens": 30}, "max_tokens"),
    ({"messages": MESSAGES, "n": 2}, "n"),
    ({"messages": MESSAGES, "temperature": 2.5}, "temperature"),
    ({"messages": MESSAGES, "temperature": "hot"}, "temperature"),
    ({"messages": MESSAGES, "top_p": 0}, "top_p"),
    ({"messages": MESSAGES, "top_p": 1.5}, "top_p"),
    ({"messages": MESSAGES, "top_k": -2}, "top_k"),
    ({"messages": MESSAGES, "seed": -1}, "seed"),
    ({"messages": MESSAGES, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"messages": MESSAGES, "stop": "123456789"}, "stop"),
    ({"messages": MESSAGES, "stop": ["ok", ""]}, "stop[1]"),
    ({"messages": MESSAGES, "stop": [1]}, "stop[0]"),
    ({"messages": MESSAGES, "priority": "urgent"}, "priority"),
    ({"messages": MESSAGES, "priority": 1.5}, "priority"),
    ({"messages": MESSAGES, "stream": "yes"}, "stream"),
    ({"messages": MESSAGES, "stream_options": {"include_usage": 1}},
     "stream_options.include_usage"),
    ({"messages": MESSAGES, "stream_options": {"bogus": True}}, "stream_options.bogus"),
    ({"messages": MESSAGES, "logprobs": True}, "logprobs"),
    ({"messages": MESSAGES, "presence_penalty": 2.5}, "presence_penalty"),
    ({"messages": MESSAGES, "frequency_penalty": "x"}, "frequency_penalty"),
    ({"messages": MESSAGES, "repetition_penalty": 0}, "repetition_penalty"),
    ({"messages": MESSAGES, "logit_bias": {"65": 101}}, "logit_bias.65"),
    ({"messages": MESSAGES, "logit_bias": {"abc": 1}}, "logit_bias.abc"),
    ({"messages": MESSAGES, "logit_bias": {"100000": 1}}, "logit_bias.100000"),
    ({"messages": MESSAGES, "logit_bias": [1]}, "logit_bias"),
    ({"messages": MESSAGES, "thinking_tokens": 4}, "thinking_tokens"),
    ({"messages": MESSAGES, "reasoning_effort": "max"}, "reasoning_effort"),
    ({"messages": MESSAGES, "reasoning_effort": "low",
      "chat_template_kwargs": {"enable_thinking": False}}, "reasoning_effort"),
    ({"messages": MESSAGES, "chat_template_kwargs": {"enable_thinking": "yes"}},
     "chat_template_kwargs.enable_thinking"),
    ({"messages": MESSAGES, "reasoning_effort": "high", "thinking_tokens": -1}, "thinking_tokens"),
    ({"messages": MESSAGES, "tools": [{"type": "function"}]}, "tools"),
    ({"messages": MESSAGES, "response_format": {"type": "json_object"}}, "response_format.type"),
    ({"messages": MESSAGES, "min_tokens": -1}, "min_tokens"),
    ({"messages": MESSAGES, "frobnicate": 1}, "frobnicate"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({}, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content[0].type"),
    ({"messages": MESSAGES * 4}, "messages"),
    ({"messages": [1]}, "messages[0]"),
    ({"messages": MESSAGES, "model": 3}, "model"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "field"), CHAT_ERRORS)
def test_bad_chat_fields_are_refused_with_a_400_naming_the_field(body, field):
    with pytest.raises(APIError) as caught:
        chat(body)
    assert caught.value.status_code == 400
    assert caught.value.param == field
    assert caught.value.message.startswith(field)


def test_bad_priority_header_is_refused_naming_the_header():
    with pytest.raises(APIError) as caught:
        chat({"messages": MESSAGES}, header_priority="urgent")
    assert caught.value.param == "X-Priority"


COMPLETION_ERRORS = [
    ({}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, -1]}, "prompt[1]"),
    ({"prompt": [TOKENIZER.vocab_size]}, "prompt[0]"),
    ({"prompt": "x" * 64}, "prompt"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": "x", "best_of": 2}, "best_of"),
    ({"prompt": "x", "logprobs": 2}, "logprobs"),
    ({"prompt": "x", "suffix": "y"}, "suffix"),
    ({"prompt": "x", "messages": MESSAGES}, "messages"),
]


@pytest.mark.parametrize(("body", "field"), COMPLETION_ERRORS)
def test_bad_completion_fields_are_refused_with_a_400_naming_the_field(body, field):
    with pytest.raises(APIError) as caught:
        completion(body)
    assert (caught.value.status_code, caught.value.param) == (400, field)


def test_body_that_is_not_an_object_is_refused():
    with pytest.raises(APIError) as caught:
        chat([1, 2])  # type: ignore[arg-type]
    assert caught.value.param == "body"


def test_sampling_params_validation_errors_surface_as_engine_validation_errors():
    # The engine's own SamplingParams check is the last line; ours run first and agree with it.
    with pytest.raises((APIError, RequestValidationError)):
        chat({"messages": MESSAGES, "seed": 2**63})


def test_embedding_inputs_are_tokenized_and_bounded():
    parsed = parse_embedding_request(
        {"input": ["ab", "c"], "encoding_format": "base64"}, tokenizer=TOKENIZER, limits=LIMITS
    )
    bos = TOKENIZER.bos_token_id
    assert parsed.inputs == [[bos, 97, 98], [bos, 99]]
    assert parse_embedding_request(
        {"input": [1, 2]}, tokenizer=TOKENIZER, limits=LIMITS
    ).inputs == [[1, 2]]
    for body, field in [
        ({}, "input"),
        ({"input": []}, "input"),
        ({"input": ["a", "b", "c"]}, "input"),
        ({"input": [""]}, "input[0]"),
        ({"input": ["x" * 70]}, "input[0]"),
        ({"input": [[1], [-3]]}, "input[1][0]"),
        ({"input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "a", "dimensions": 8}, "dimensions"),
        ({"input": 3}, "input"),
    ]:
        with pytest.raises(APIError) as caught:
            parse_embedding_request(body, tokenizer=TOKENIZER, limits=LIMITS)
        assert caught.value.param == field, body
