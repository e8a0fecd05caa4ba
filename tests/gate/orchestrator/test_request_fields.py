"""The start-of-run request-field check (gate.orchestrator.request_fields): a strict target's
refused fields are found and recorded, a lenient one costs one request, a check that cannot
tell refuses nothing; and the thinking gates are not measurable where thinking cannot be asked
for (gate.orchestrator.capabilities)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gate.gates.file import load, packaged_gates_path
from gate.orchestrator.capabilities import unmeasurable_reason
from gate.orchestrator.request_fields import EXTENSION_FIELDS, FieldProbe, probe_fields
from gate.orchestrator.target import TargetClient, TargetInfo

FAKE = Path(__file__).resolve().parents[2] / "loadgen" / "fake_openai_server.py"
THINKING_GATES = {"chat_during_thinking", "thinking_ttfc", "thinking_reasoned"}


def _fake(tmp_path: Path, *args: str) -> Iterator[str]:
    port_file = tmp_path / f"port-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, str(FAKE), "--port", "0", "--port-file", str(port_file),
         "--ttft-ms", "1", "--itl-ms", "1", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "fake did not start"
            time.sleep(0.02)
        yield f"http://127.0.0.1:{port_file.read_text().strip()}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
def strict_url(tmp_path: Path) -> Iterator[str]:
    yield from _fake(tmp_path, "--strict-fields")


@pytest.fixture
def lenient_url(tmp_path: Path) -> Iterator[str]:
    yield from _fake(tmp_path)


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/stats", timeout=5) as resp:
        return json.loads(resp.read())


def test_a_strict_target_s_refused_fields_are_found_and_recorded(strict_url):
    with TargetClient(strict_url) as client:
        info = client.info()
    assert info.server_kind == "openai"
    assert info.refused_fields == tuple(EXTENSION_FIELDS)  # it knows none of them
    assert info.fields is not None and info.fields.status == 422
    assert info.fields.requests == 2 + len(EXTENSION_FIELDS)
    manifest = info.to_manifest()
    assert manifest["refused_fields"] == list(EXTENSION_FIELDS)
    assert "Unexpected fields" in manifest["fields_check"]


def test_a_target_that_takes_every_field_costs_one_request(lenient_url):
    with TargetClient(lenient_url) as client:
        info = client.info()
    assert info.refused_fields == ()
    assert info.to_manifest()["refused_fields"] == []
    assert info.to_manifest()["fields_check"] is None
    assert _stats(lenient_url)["by_path"].get("/v1/chat/completions") == 1


def _post_answering(rule):  # type: ignore[no-untyped-def]
    sent: list[dict[str, Any]] = []

    def post(body: dict[str, Any]) -> tuple[int | None, str]:
        sent.append(body)
        return rule(body)

    return post, sent


def test_only_the_fields_refused_alone_are_dropped():
    post, sent = _post_answering(
        lambda body: (422, "no") if {"top_k", "ignore_eos"} & set(body) else (200, "ok")
    )
    found = probe_fields(post, "m")
    assert found.refused == ("ignore_eos", "top_k") and found.status == 422
    assert len(sent) == found.requests == 2 + len(EXTENSION_FIELDS)
    assert all(body["model"] == "m" and body["max_tokens"] == 1 for body in sent)


def test_a_check_that_cannot_tell_refuses_nothing():
    # The plain request is refused too (a wrong key, a broken target): nothing is blamed on
    # the fields, and the load goes out as before.
    post, sent = _post_answering(lambda body: (401, "HTTP 401: bad key"))
    found = probe_fields(post, None)
    assert found.refused == () and len(sent) == 2 and "refused too" in (found.note or "")
    # No answer at all, or a server error: one request, nothing refused, the reason kept.
    for answer in ((None, "no answer: ReadTimeout"), (500, "HTTP 500: boom")):
        post, sent = _post_answering(lambda body, a=answer: a)
        found = probe_fields(post, None)
        assert found.refused == () and len(sent) == 1 and found.note == f"not checked: {answer[1]}"


def test_refused_together_but_accepted_alone_drops_them_all():
    post, _ = _post_answering(
        lambda body: (422, "too many") if len(set(body) & set(EXTENSION_FIELDS)) > 1 else (200, "")
    )
    found = probe_fields(post, None)
    assert found.refused == tuple(EXTENSION_FIELDS) and "together" in (found.note or "")


def _info(*refused: str) -> TargetInfo:
    fields = FieldProbe(refused=refused, status=422, requests=8) if refused else None
    return TargetInfo(url="u", server_kind="openai", model="m", batching=None, fields=fields)


def test_the_thinking_gates_are_not_measurable_where_thinking_cannot_be_asked_for():
    gates = load(packaged_gates_path()).gates

    def unmeasurable(info: TargetInfo) -> dict[str, str]:
        return {g.name: why for g in gates if (why := unmeasurable_reason(g, info)) is not None}

    assert not unmeasurable(_info()).keys() & THINKING_GATES
    # Only the bundled server's reasoning length refused: thinking is still asked for.
    assert not unmeasurable(_info("thinking_tokens", "min_tokens")).keys() & THINKING_GATES
    left_out = unmeasurable(_info("chat_template_kwargs", "thinking_tokens", "top_k"))
    assert left_out.keys() >= THINKING_GATES
    assert "refuses chat_template_kwargs" in left_out["chat_during_thinking"]
    # Only the gates that judge thinking: the reasoning mix's other gates, and the rest, stay.
    assert left_out.keys() - THINKING_GATES == unmeasurable(_info()).keys()
