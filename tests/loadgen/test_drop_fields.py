"""`drop_fields` / `--drop-fields`: the fields a strict target refuses are left out of every
request body (probes, trace replay, sampling and reasoning mixes), and load.json says which."""

from __future__ import annotations

import pytest
from lg_support import read_load, read_records, run_loadgen

from loadgen.client import ClientConfig, OpenAIClient
from loadgen.errors import ConfigError
from loadgen.httpconn import parse_target
from loadgen.plan import PlannedRequest
from loadgen.probes import PROBE_SET, probe_request
from loadgen.profiles import resolve

EXACT = ("min_tokens", "ignore_eos")


def _client(drop: frozenset[str] = frozenset(), extra: dict | None = None) -> OpenAIClient:
    config = ClientConfig(model="m", drop_fields=drop, extra_body=extra)
    return OpenAIClient(parse_target("http://127.0.0.1:9"), config)


def _request(**body: object) -> PlannedRequest:
    return PlannedRequest(
        index=0, offset_seconds=0.0, stage="main", priority="interactive", length_class="short",
        messages=(("user", "hi"),), prompt_tokens=2, max_tokens=8, body=dict(body) or None,
    )  # fmt: skip


def test_the_body_leaves_out_the_dropped_fields_wherever_they_came_from():
    probe = probe_request(PROBE_SET[0], index=0, offset_seconds=0.0, stage="main")
    assert set(EXACT) <= set(_client().body(probe))  # sent as before when nothing is dropped
    client = _client(frozenset({*EXACT, "top_k", "thinking_tokens", "chat_template_kwargs"}),
                     extra={"top_k": 5, "keep": 1})  # fmt: skip
    body = client.body(probe)
    assert not set(body) & {*EXACT, "top_k"}
    assert body["temperature"] == 0.0 and body["max_tokens"] == probe.max_tokens
    body = client.body(
        _request(thinking_tokens=64, chat_template_kwargs={"enable_thinking": True}, top_p=0.9)
    )
    assert "thinking_tokens" not in body and "chat_template_kwargs" not in body
    assert body["top_p"] == 0.9 and body["keep"] == 1 and body["messages"]


def test_drop_fields_is_a_profile_parameter_that_cannot_drop_what_every_request_needs():
    assert resolve("burst", {}, "smoke").params["drop_fields"] == []
    assert resolve("burst", {"drop_fields": ["top_k"]}, "smoke").params["drop_fields"] == ["top_k"]
    with pytest.raises(ConfigError, match="cannot drop messages"):
        resolve("burst", {"drop_fields": ["messages", "top_k"]}, "smoke")
    with pytest.raises(ConfigError, match="list of field names"):
        resolve("burst", {"drop_fields": "top_k"}, "smoke")


def test_the_flag_reaches_the_profile_and_a_bad_one_is_a_usage_error():
    shown = run_loadgen(
        "--profile", "burst", "--show-profile", "--drop-fields", "top_k, min_tokens"
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert '"top_k",\n    "min_tokens"' in shown.stdout
    bad = run_loadgen("--profile", "burst", "--show-profile", "--drop-fields", "model")
    assert bad.returncode == 2 and "drop_fields cannot drop model" in bad.stderr


@pytest.mark.parametrize("profile", ["consistency_probes", "sampling_mix"])
def test_a_strict_target_refuses_the_fields_until_they_are_dropped(fake_server, tmp_path, profile):
    server = fake_server("--strict-fields", "--ttft-ms", "1", "--itl-ms", "1", "--tokens", "8")
    common = ("--target", server.url, "--profile", profile, "--scale", "smoke",
              "--set", "duration_seconds=1.5")  # fmt: skip
    refused_out = tmp_path / "refused"
    done = run_loadgen(*common, "--out", str(refused_out))
    assert done.returncode == 0, done.stderr
    statuses = {r["http_status"] for r in read_records(refused_out)}
    assert 422 in statuses  # the fake is strict: the fields are what it refuses
    before = server.stats()["refused_fields"]
    refused = set(before)
    assert refused, server.stats()

    dropped_out = tmp_path / "dropped"
    done = run_loadgen(*common, "--out", str(dropped_out), "--drop-fields", ",".join(refused))
    assert done.returncode == 0, done.stderr
    records = read_records(dropped_out)
    assert records and all(r["status"] == "ok" for r in records), {r["error"] for r in records}
    assert server.stats()["refused_fields"] == before  # not one more refusal
    load = read_load(dropped_out)
    assert load["dropped_fields"] == sorted(refused)
    assert set(load["params"]["drop_fields"]) == refused


def test_load_json_says_when_a_trace_replay_could_not_ask_for_exact_lengths():
    from loadgen.load_json import _exact_lengths

    assert _exact_lengths({"exact_output": True}, []) is True
    assert _exact_lengths({"exact_output": True}, ["ignore_eos"]) is False
    assert _exact_lengths({"exact_output": True}, ["top_k"]) is True
    assert _exact_lengths({"exact_output": False}, []) is False
