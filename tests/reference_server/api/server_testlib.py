"""Small helpers shared by the server tests: SSE parsing, metric lookup, bounded waiting."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

API_KEY = "sk-test-key"
ADMIN_TOKEN = "admin-test-token"


def parse_sse(lines: Iterable[str]) -> list[Any]:
    """The `data:` payloads of an event stream, decoded; "[DONE]" stays a string."""
    events: list[Any] = []
    for line in lines:
        if not line:
            continue
        assert line.startswith("data: "), f"not an SSE data line: {line!r}"
        payload = line[len("data: ") :]
        events.append(payload if payload == "[DONE]" else orjson.loads(payload))
    return events


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def metric(text: str, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    samples = metric_samples(text)
    assert key in samples, f"{name}{labels} not in /metrics"
    return samples[key]


def wait_until(
    check: Callable[[], bool], *, timeout_seconds: float, interval: float = 0.05
) -> bool:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()
