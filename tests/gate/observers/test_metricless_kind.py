"""A server without /metrics is named from its /v1/models answer: Hugging Face `transformers
serve` marks each model with its load state; anything else is a plain `openai` server."""

from __future__ import annotations

from gate.observers.namemaps import METRICLESS_KINDS, detect_metricless_kind


def test_transformers_serve_is_named_from_its_model_list():
    # As transformers 5.25's `transformers serve` answers /v1/models (a pinned local model).
    body = {
        "object": "list",
        "data": [
            {"owned_by": "local", "id": "/m", "object": "model", "created": 0,
             "status": {"value": "loaded"}},
        ],
    }  # fmt: skip
    assert detect_metricless_kind(body) == "transformers" in METRICLESS_KINDS


def test_other_model_lists_are_plain_openai():
    plain = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "me"}]}
    assert detect_metricless_kind(plain) == "openai"
    assert detect_metricless_kind({"object": "list", "data": []}) == "openai"
    assert detect_metricless_kind([]) == "openai"
    mixed = {"data": [{"id": "a", "status": {"value": "loaded"}}, {"id": "b"}]}
    assert detect_metricless_kind(mixed) == "openai"
