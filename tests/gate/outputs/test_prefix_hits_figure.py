"""The report's prefix-cache hit ratio figure: drawn for a replayed trace from the server's
counters, absent for a profile that neither replays a trace nor counts prefix-cache lookups."""

from __future__ import annotations

from rundir_builder import WALL0, request_records, write_profile

from gate.outputs.html.series import profile_figures
from gate.rundir.run import load_run


def _scrapes(n: int) -> list[dict]:
    return [
        {"t": WALL0 + 0.5 * i, "phase": "poll", "ok": True,
         "metrics": {"prefix_cache_hits_total": 30 * i, "prefix_cache_queries_total": 100 * i}}
        for i in range(n)
    ]  # fmt: skip


def test_a_trace_profile_gets_a_hit_ratio_figure_from_the_counters(tmp_path) -> None:
    directory = write_profile(tmp_path, "trace", request_records(60), scrapes=_scrapes(20))
    (directory / "trace.jsonl").write_text(
        '{"timestamp": 0, "input_tokens": 10, "output_tokens": 2, "hash_ids": [1], '
        '"block_tokens": 8}\n'
    )
    figures = {f.key: f for f in profile_figures(load_run(tmp_path).profiles["trace"])}
    hits = figures["prefix-hits"]
    assert hits.has_data, hits.no_data
    values = [v for line in hits.lines for v in line.y]
    assert values and all(abs(v - 0.3) < 1e-9 for v in values)


def test_other_profiles_get_no_hit_ratio_figure(tmp_path) -> None:
    write_profile(tmp_path, "steady", request_records(60))
    figures = profile_figures(load_run(tmp_path).profiles["steady"])
    assert "prefix-hits" not in {f.key for f in figures}
