"""`batchgate run --target URL` against a strict-schema OpenAI server (the fake with
`--strict-fields`: HTTP 422 on any body field OpenAI does not define, as Hugging Face
`transformers serve` does): the start-of-run check finds the refused fields, says so in one line
and in the manifest, the load generator leaves them out of every request (no 422 in any record:
the fake counts no refusal beyond the check's own), and the gates that judge thinking requests
are listed as not measurable instead of comparing chat with chat."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import pytest
from e2e_support import (
    RUN_TIMEOUT_SECONDS,
    assert_no_strays,
    batchgate_argv,
    fake_openai_server,
    read_json,
)

pytestmark = pytest.mark.slow

EXTENSION_FIELDS = {"min_tokens", "ignore_eos", "top_k", "repetition_penalty",
                    "thinking_tokens", "chat_template_kwargs"}  # fmt: skip
THINKING_GATES = ("chat_during_thinking", "thinking_ttfc", "thinking_reasoned")


@pytest.fixture
def strict_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    # As tests/e2e/test_foreign_target.py: server-bound, not client-bound, calibration.
    flags = ("--ttft-ms", "20", "--itl-ms", "8", "--strict-fields")
    with fake_openai_server(tmp_path, *flags) as url:
        yield url


def test_a_strict_target_gets_no_field_it_refuses(tmp_path, strict_server):
    workdir = tmp_path / "empty"
    workdir.mkdir()
    done = subprocess.run(
        batchgate_argv(
            "run", "--target", strict_server, "--profile", "sampling_mix,reasoning_mix",
            "--scale", "smoke", "--out", str(tmp_path / "runs"), "--run-id", "strict",
        ),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS * 2,
        check=False,
    )  # fmt: skip
    out = done.stdout + done.stderr
    run_dir = tmp_path / "runs" / "strict"
    assert done.returncode in (0, 1, 3), out[-4000:]
    assert "the target refuses the request fields" in out, out[-3000:]
    manifest = read_json(run_dir / "manifest.json")
    assert set(manifest["target"]["refused_fields"]) == EXTENSION_FIELDS
    # The check's own requests are the only ones refused: the full set once, each field alone
    # once; no load request (probes, calibration, both profiles) carried one of them.
    with urllib.request.urlopen(strict_server + "/stats", timeout=5) as resp:
        stats = json.loads(resp.read())
    assert stats["refused_fields"] == dict.fromkeys(EXTENSION_FIELDS, 2), stats["refused_fields"]
    records = list(run_dir.rglob("requests.jsonl"))
    assert any(p.parent.name == "sampling_mix" for p in records), records
    for path in records:
        statuses = [json.loads(line)["http_status"] for line in path.read_text().splitlines()]
        assert statuses and 422 not in statuses, path
    for load_path in run_dir.rglob("load.json"):
        assert set(read_json(load_path)["dropped_fields"]) == EXTENSION_FIELDS, load_path
    left_out = manifest["gates_not_measurable"]
    for gate in THINKING_GATES:
        assert "refuses chat_template_kwargs" in left_out[gate], left_out
    verdicts = {v["id"]: v for v in read_json(run_dir / "verdicts.json")["verdicts"]}
    assert not any(v.split("@")[0] in THINKING_GATES for v in verdicts)
    errors = [v for k, v in verdicts.items() if k.startswith("no_errors@")]
    assert errors and all(v["status"] == "pass" for v in errors), errors
    assert_no_strays(run_dir)
