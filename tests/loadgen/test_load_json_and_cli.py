"""load.json assembly (validity verdicts) and the CLI's override plumbing, in-process."""

from __future__ import annotations

import json

from loadgen.cli import main
from loadgen.load_json import build_load_json
from loadgen.profiles import resolve
from loadgen.records import validate_load_json


def _summary(lags: list[float], cpu_max: float = 0.2, sent: int | None = None) -> dict:
    return {
        "worker": 0,
        "planned": len(lags),
        "sent": len(lags) if sent is None else sent,
        "lags": lags,
        "cpu": {"mean": cpu_max / 2, "max": cpu_max},
        "cap_reached": 0,
        "records": len(lags),
    }


def _load(
    summaries: list[dict], workers: int = 1, sources: dict | None = None, **overrides: object
) -> dict:
    spec = resolve("burst", {"duration_seconds": 10, **overrides}, "full")
    return build_load_json(
        spec=spec,
        workers=workers,
        summaries=summaries,
        counts_by_status={"ok": 90, "timeout": 10},
        chunk_tokens_sources=sources,
        t0=100.0,
        wall_at_t0=1_700_000_000.0,
        ended_at=112.0,
        ended="completed",
    )


def test_valid_run_reports_rates_stages_and_lag_percentiles() -> None:
    load = _load([_summary([0.001] * 99 + [0.002])])
    assert validate_load_json(load) == []
    assert load["measurement_valid"] and load["invalid_reasons"] == []
    assert load["achieved_rate_rps"] == 10.0  # 100 sent over the 10 s window
    assert [s["name"] for s in load["stages"]] == ["baseline", "spike", "recovery"]
    assert load["stages"][0]["start"] == 100.0 and load["stages"][-1]["end"] == 110.0
    assert load["schedule_lag_seconds"]["max"] == 0.002


def test_load_json_counts_records_by_where_their_chunk_tokens_came_from() -> None:
    load = _load([_summary([0.001] * 100)], sources={"usage": 88, "assumed": 2})
    assert load["chunk_tokens_sources"] == {"assumed": 2, "usage": 88}
    assert validate_load_json(load) == []
    load["chunk_tokens_sources"] = {"guessed": 1}
    assert any("chunk_tokens_sources" in p for p in validate_load_json(load))


def test_lag_or_cpu_over_the_limit_invalidates_the_measurement() -> None:
    lagging = _load([_summary([0.001] * 90 + [0.2] * 10)])
    assert not lagging["measurement_valid"]
    assert "schedule lag p99" in lagging["invalid_reasons"][0]
    busy = _load([_summary([0.001] * 100, cpu_max=0.95)])
    assert not busy["measurement_valid"] and "client CPU" in busy["invalid_reasons"][0]
    relaxed = _load([_summary([0.001] * 100, cpu_max=0.95)], max_client_cpu_ratio=1.0)
    assert relaxed["measurement_valid"]
    missing = _load([_summary([0.001] * 50)], workers=2)
    assert "only 1 of 2 workers" in missing["invalid_reasons"][0]
    assert all(validate_load_json(x) == [] for x in (lagging, busy, relaxed, missing))


def test_show_profile_applies_file_then_set_then_flags(tmp_path, capsys) -> None:
    overrides = tmp_path / "profiles.json"
    overrides.write_text(json.dumps({"spike_rate_rps": 50, "seed": 4, "users": 9}))
    rc = main(
        ["--profile", "burst", "--profile-overrides-json", str(overrides), "--set", "seed=5",
         "--set", "extra_body.ignore_eos=true", "--seed", "6", "--show-profile"]
    )  # fmt: skip
    params = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert (params["spike_rate_rps"], params["seed"], params["users"]) == (50.0, 6, 9)
    assert params["extra_body"] == {"ignore_eos": True}


def test_bad_overrides_file_is_a_usage_error(tmp_path, capsys) -> None:
    bad = tmp_path / "profiles.json"
    bad.write_text("[1, 2]")
    assert (
        main(["--profile", "steady", "--profile-overrides-json", str(bad), "--show-profile"]) == 2
    )
    assert "must hold a JSON object" in capsys.readouterr().err
    assert main(["--profile", "steady", "--set", "novalue", "--show-profile"]) == 2
    assert "--set needs KEY=VALUE" in capsys.readouterr().err


def test_out_naming_a_file_is_a_usage_error_before_the_target_is_probed(tmp_path, capsys) -> None:
    out = tmp_path / "a-file"
    out.write_text("")
    # A closed port: had the check come after the probe, this would be "unreachable" (5).
    argv = ["--target", "http://127.0.0.1:9", "--profile", "steady", "--out", str(out)]
    assert main(argv) == 2
    assert "not a directory" in capsys.readouterr().err


def test_a_profile_that_plans_no_request_is_a_usage_error_before_the_target_is_probed(
    tmp_path, capsys
) -> None:
    # night_trickle offers 0.15 req/s: 3 s of it expects 0.45 requests and seed 0 draws none.
    # Such a load used to run, send nothing and exit 0; it can only end invalid.
    argv = ["--target", "http://127.0.0.1:9", "--profile", "night_trickle", "--duration", "3"]
    assert main([*argv, "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "plans no request" in err and "lengthen duration_seconds or raise rate_rps" in err
    assert not (tmp_path / "run").exists()
    # The same schedule with a seed whose first draw lands inside it is a valid plan.
    assert main([*argv, "--seed", "1", "--show-profile"]) == 0
