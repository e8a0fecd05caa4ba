"""report.html's capacity curve: one row per sweep step from the manifest, the capacity step
marked, the stop in words, a lower bound said so; nothing for a run without a measured sweep."""

from __future__ import annotations

from gate.outputs.html.capacity import capacity_section


def _step(users: int, tps: float, valid: bool = True) -> dict:
    return {
        "users": users, "output_tokens_per_second": tps, "rps": tps / 12, "e2e_p50": 0.25,
        "failed": 0, "rate_limited": 0, "client_valid": valid,
        "client_reasons": [] if valid else ["client CPU 0.97 > 0.9"],
    }  # fmt: skip


def test_the_curve_is_a_table_with_the_capacity_marked():
    sweep = {
        "curve": [_step(16, 600), _step(32, 900), _step(64, 1200), _step(128, 1135)],
        "capacity_users": 64, "knee_users": 64, "stop": "plateau",
        "detail": "128 users gave 1135 output tokens/s", "saturated": True,
        "limit": {"users": 256, "source": "/admin/batching max_num_seqs"},
    }  # fmt: skip
    html = capacity_section({"calibration": {"capacity_sweep": sweep}})
    assert html.count("<tr>") == 5  # header + 4 steps
    assert "64 ← capacity" in html and "1200" in html and "250ms" in html.replace(" ", "")
    assert "Stopped: plateau" in html and "Knee at 64" in html and "max_num_seqs" in html
    assert "saturated." in html


def test_a_lower_bound_says_so_and_no_sweep_shows_nothing():
    sweep = {
        "curve": [_step(16, 600), _step(32, 700, valid=False)], "capacity_users": 32,
        "knee_users": 32, "stop": "client saturated", "detail": "the load generator saturated",
        "saturated": False, "limit": {"users": None, "source": "not stated"},
    }  # fmt: skip
    html = capacity_section({"calibration": {"capacity_sweep": sweep}})
    assert "not saturated: a lower bound" in html and "no: client CPU 0.97" in html
    assert capacity_section({"calibration": {"capacity": {}}}) == ""
    assert capacity_section(None) == ""


def test_a_step_measured_again_with_more_workers_marks_only_the_chosen_phase():
    saturated = {**_step(64, 900, valid=False), "phase": "capacity-64", "workers": 1}
    again = {**_step(64, 1200), "phase": "capacity-64-w2", "workers": 2}
    sweep = {
        "curve": [{**_step(32, 700), "phase": "capacity-32", "workers": 1}, saturated, again],
        "capacity_users": 64, "capacity_phase": "capacity-64-w2", "knee_users": 64,
        "stop": "plateau", "detail": "d", "saturated": True, "limit": {"users": 64, "source": "s"},
    }  # fmt: skip
    html = capacity_section({"calibration": {"capacity_sweep": sweep}})
    assert "load-generator workers" in html and html.count("← capacity") == 1
    rows = html.split("<tr>")
    assert "← capacity" in rows[-1] and "<td>2</td>" in rows[-1]  # the two-worker row
    assert "← capacity" not in rows[-2] and "no: client CPU" in rows[-2]
