"""The vLLM-compatibility pieces without a server: parsing (unknown fields, integer priority,
min_tokens, stop_token_ids, continuous usage), chunk shapes, the OpenAPI document, the
ignored-fields log line and the min_tokens logit mask."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from reference_server.api.app import _log_ignored
from reference_server.api.errors import APIError
from reference_server.api.generation import ResponseShapes
from reference_server.api.openapi import openapi_document
from reference_server.api.protocol import (
    CHAT_FIELDS,
    COMPLETION_FIELDS,
    EMBEDDING_FIELDS,
    GenerationRequest,
    RequestLimits,
    parse_chat_request,
    parse_completion_request,
    parse_embedding_request,
)
from reference_server.api.tokenization import detokenize, tokenize
from reference_server.errors import RequestValidationError
from reference_server.outputs import RequestOutput
from reference_server.sampling_params import SamplingParams
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


def chat(body: dict, *, strict: bool = False, header: str | None = None) -> GenerationRequest:
    return parse_chat_request(
        body, tokenizer=TOKENIZER, limits=LIMITS, header_priority=header, strict=strict
    )


def completion(body: dict, *, strict: bool = False) -> GenerationRequest:
    return parse_completion_request(
        body, tokenizer=TOKENIZER, limits=LIMITS, header_priority=None, strict=strict
    )


def test_unknown_fields_are_collected_with_their_paths_when_not_strict():
    parsed = chat(
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a", "cache": 1}], "x": 1},
            ],
            "zeta": 1,
            "alpha": None,
            "stream": True,
            "stream_options": {"include_usage": True, "extra": True},
        }
    )
    assert parsed.ignored_fields == (
        "alpha", "zeta", "messages[0].x", "messages[0].content[0].cache", "stream_options.extra",
    )  # fmt: skip
    assert completion({"prompt": "x", "guided_json": {}}).ignored_fields == ("guided_json",)
    embedded = parse_embedding_request(
        {"input": "a", "truncate_prompt_tokens": 3}, tokenizer=TOKENIZER, limits=LIMITS,
        strict=False,
    )  # fmt: skip
    assert embedded.ignored_fields == ("truncate_prompt_tokens",)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": MESSAGES, "zeta": 1, "alpha": 2}, "alpha"),
        ({"messages": MESSAGES, "stream_options": {"bogus": True}}, "stream_options.bogus"),
        ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]},
         "messages[0].tool_calls"),
    ],
)  # fmt: skip
def test_strict_refuses_the_first_unknown_field(body, param):
    with pytest.raises(APIError) as caught:
        chat(body, strict=True)
    assert (caught.value.status_code, caught.value.param, caught.value.code) == (
        400, param, "unknown_parameter",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, "interactive"), (-5, "interactive"), (1, "batch"), (10**9, "batch"),
     ("batch", "batch"), ("interactive", "interactive")],
)  # fmt: skip
def test_priority_accepts_vllm_integers_and_class_names(value, expected):
    assert chat({"messages": MESSAGES, "priority": value}, header="interactive").priority == (
        expected
    )


@pytest.mark.parametrize("value", [1.0, 0.5, True, "1", [1], {}])
def test_priority_of_another_type_is_a_400_naming_it(value):
    with pytest.raises(APIError) as caught:
        chat({"messages": MESSAGES, "priority": value})
    assert caught.value.param == "priority"


def test_min_tokens_stop_token_ids_and_max_completion_tokens_reach_sampling_params():
    parsed = completion(
        {"prompt": "x", "max_completion_tokens": 9, "min_tokens": 4, "stop_token_ids": [10, 257]}
    )
    params = parsed.params
    assert (params.max_tokens, params.min_tokens, params.stop_token_ids) == (9, 4, (10, 257))
    assert not params.ignore_eos
    # No max_tokens: the default (16) rises to min_tokens, within the cap (32) and the context.
    assert completion({"prompt": "x", "min_tokens": 20}).params.max_tokens == 20
    assert completion({"prompt": "x", "min_tokens": 0}).params.max_tokens == 16


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": "x", "min_tokens": 40}, "min_tokens"),
        ({"prompt": "x", "max_tokens": 3, "min_tokens": 4}, "min_tokens"),
        ({"prompt": "x", "min_tokens": -1}, "min_tokens"),
        ({"prompt": "x", "stop_token_ids": [1] * 65}, "stop_token_ids"),
        ({"prompt": "x", "stop_token_ids": [True]}, "stop_token_ids[0]"),
        ({"prompt": "x", "stop_token_ids": {"a": 1}}, "stop_token_ids"),
        ({"prompt": "x", "max_completion_tokens": 0}, "max_completion_tokens"),
        ({"prompt": "x", "max_tokens": 2, "max_completion_tokens": 3}, "max_completion_tokens"),
        ({"prompt": "x", "stream_options": {"continuous_usage_stats": "y"}},
         "stream_options.continuous_usage_stats"),
    ],
)  # fmt: skip
def test_known_vllm_fields_are_checked_strictly_even_when_not_strict(body, param):
    with pytest.raises(APIError) as caught:
        completion(body)
    assert caught.value.param == param
    assert caught.value.message.startswith(param)


def test_continuous_usage_needs_include_usage():
    def options(value: dict) -> tuple[bool, bool]:
        parsed = chat({"messages": MESSAGES, "stream": True, "stream_options": value})
        return parsed.include_usage, parsed.continuous_usage

    assert options({"include_usage": True, "continuous_usage_stats": True}) == (True, True)
    assert options({"continuous_usage_stats": True}) == (False, False)
    assert options({"include_usage": True}) == (True, False)


def test_assistant_content_may_be_null_or_absent_but_not_elsewhere():
    parsed = chat({"messages": [{"role": "assistant", "content": None}, {"role": "assistant"}]})
    expected = [{"role": "assistant", "content": ""}, {"role": "assistant", "content": ""}]
    assert parsed.prompt_token_ids == TOKENIZER.apply_chat_template(expected)
    with pytest.raises(APIError) as caught:
        chat({"messages": [{"role": "user", "content": None}]})
    assert caught.value.param == "messages[0].content"


def _output(tokens: int, text: str = "a", cached: int = 0) -> RequestOutput:
    return RequestOutput(
        "r", [1], text, False, None, 3, tokens, 0.0, None, None, num_cached_tokens=cached
    )


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_continuous_usage_chunks_carry_the_running_count(endpoint):
    request = GenerationRequest(
        endpoint=endpoint, model=None, prompt_token_ids=[1, 2, 3], params=SamplingParams(),
        stream=True, include_usage=True, priority="interactive", continuous_usage=True,
    )  # fmt: skip
    shapes = ResponseShapes(request, "m")

    def usage(chunk: bytes) -> dict:
        return orjson.loads(chunk[len(b"data: ") : -2])["usage"]

    assert usage(shapes.role_chunk()) == {
        "prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 0},
    }  # fmt: skip
    # The role chunk goes out with the first output: its cached tokens are known, no token yet.
    assert usage(shapes.role_chunk(_output(1, cached=2))) == {
        "prompt_tokens": 3, "completion_tokens": 0, "total_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 2},
    }  # fmt: skip
    assert usage(shapes.content_chunk("ab", _output(2, cached=2)))["prompt_tokens_details"] == {
        "cached_tokens": 2
    }
    assert usage(shapes.content_chunk("ab", _output(2)))["completion_tokens"] == 2
    assert usage(shapes.content_chunk("c", _output(3)))["total_tokens"] == 6
    assert usage(shapes.finish_chunk("length", _output(3)))["completion_tokens"] == 3
    # Without continuous usage the chunks keep OpenAI's null.
    plain = ResponseShapes(
        GenerationRequest(
            endpoint=endpoint,
            model=None,
            prompt_token_ids=[1],
            params=SamplingParams(),
            stream=True,
            include_usage=True,
            priority="interactive",
        ),
        "m",
    )
    assert usage(plain.content_chunk("ab", _output(2))) is None
    assert usage(plain.finish_chunk("stop", _output(2))) is None


def test_openapi_lists_every_accepted_field_and_the_strict_mode():
    loose = openapi_document(version="9", strict=False)
    schemas = loose["components"]["schemas"]
    for name, fields in (
        ("ChatCompletionRequest", CHAT_FIELDS),
        ("CompletionRequest", COMPLETION_FIELDS),
        ("EmbeddingRequest", EMBEDDING_FIELDS),
    ):
        assert list(schemas[name]["properties"]) == list(fields)
        assert schemas[name]["additionalProperties"] is True
    assert loose["info"]["version"] == "9"
    strict = openapi_document(version="9", strict=True)
    assert strict["components"]["schemas"]["ChatCompletionRequest"]["additionalProperties"] is False
    orjson.dumps(strict)  # plain JSON all the way down


def test_openapi_documents_every_route_and_method_the_app_serves():
    from reference_server.api.app import build_app

    paths = openapi_document(version="9", strict=False)["paths"]
    for route in build_app(None).routes:  # type: ignore[arg-type]
        assert route.path in paths, route.path
        for method in route.methods - {"HEAD"}:
            assert method.lower() in paths[route.path], (route.path, method)
    create = openapi_document(version="9", strict=True)["components"]["schemas"]
    assert create["BatchCreateRequest"]["required"] == [
        "input_file_id",
        "endpoint",
        "completion_window",
    ]
    assert create["BatchCreateRequest"]["additionalProperties"] is False


def test_tokenize_and_detokenize_shapes():
    assert tokenize({"prompt": "ab"}, tokenizer=TOKENIZER, max_messages=3, strict=False).body(
        64
    ) == {"tokens": [TOKENIZER.bos_token_id, 97, 98], "count": 3, "max_model_len": 64}
    chat_tokens = tokenize(
        {"messages": MESSAGES}, tokenizer=TOKENIZER, max_messages=3, strict=False
    ).tokens
    assert chat_tokens == TOKENIZER.apply_chat_template(MESSAGES)
    assert detokenize({"tokens": chat_tokens}, tokenizer=TOKENIZER, strict=False).body() == {
        "prompt": "hi"
    }
    with pytest.raises(APIError) as caught:
        detokenize({"tokens": [TOKENIZER.vocab_size]}, tokenizer=TOKENIZER, strict=False)
    assert caught.value.param == "tokens[0]"


def test_ignored_fields_make_one_bounded_log_line(caplog):
    caplog.set_level(logging.WARNING, logger="reference_server.api")
    _log_ignored("/v1/completions", ())
    assert not caplog.records
    names = ("a\nforged line", "y" * 500, *(f"f{i}" for i in range(19)))
    _log_ignored("/v1/completions", names)
    (record,) = caplog.records
    message = record.getMessage()
    assert "\n" not in message  # names are repr()-quoted: no forged log lines
    assert f"'{'y' * 64}'" in message and "y" * 65 not in message
    assert "'f13'" in message and "'f14'" not in message
    assert message.endswith("(and 5 more)")


def test_sampling_params_min_tokens_is_bounded():
    assert SamplingParams(max_tokens=4, min_tokens=4).min_tokens == 4
    for value in (5, -1, 1.5):
        with pytest.raises(RequestValidationError) as caught:
            SamplingParams(max_tokens=4, min_tokens=value)
        assert caught.value.field == "min_tokens"


@pytest.mark.parametrize("synthetic", [False, True])
def test_min_tokens_masks_eos_and_stop_token_ids_until_reached(synthetic):
    import torch

    from reference_server.logits_mask import AllowedTokenMask

    vocab = TOKENIZER.vocab_size
    mask = AllowedTokenMask(vocab_size=vocab, eos_token_id=TOKENIZER.eos_token_id,
                            allow_eos=not synthetic, device=torch.device("cpu"))  # fmt: skip

    def seq(outputs: int, **params: Any) -> SimpleNamespace:
        return SimpleNamespace(
            sampling_params=SamplingParams(max_tokens=8, **params), output_token_ids=[7] * outputs,
            utf8_state=0, num_utf8_tokens=0,
        )  # fmt: skip

    seqs = [
        seq(1, min_tokens=3, stop_token_ids=(10, TOKENIZER.pad_token_id)),  # short: masked
        seq(3, min_tokens=3, stop_token_ids=(10, TOKENIZER.pad_token_id)),  # reached: free
        seq(0, stop_token_ids=(10,)),  # no min_tokens
    ]
    logits = torch.zeros(3, vocab)
    mask.apply(logits, seqs)  # type: ignore[arg-type]
    inf = float("-inf")
    eos, pad = TOKENIZER.eos_token_id, TOKENIZER.pad_token_id
    assert logits[0, 10] == inf and logits[0, eos] == inf and logits[0, pad] == inf
    assert logits[1, 10] == 0 and logits[2, 10] == 0
    assert logits[1, pad] == 0  # a special stop token is sampleable once min_tokens is reached
    assert logits[0, 65] == 0 and logits[0, 97] == 0  # other bytes untouched
    assert bool(logits[2, eos] == inf) is synthetic  # synthetic weights never end by EOS
