"""The pandas and DuckDB snippets of docs/records.md (`requests.parquet`) run as printed, three
lines each, on a run the gate wrote the Parquet files of."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from rundir_builder import request_records, write_jsonl

from gate.rundir.run import load_run

REPO = Path(__file__).resolve().parents[3]


def _snippets() -> list[str]:
    text = (REPO / "docs" / "records.md").read_text()
    section = text.split("## `requests.parquet`", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def _run(tmp_path, snippet: str) -> str:
    assert len(snippet.strip().splitlines()) == 3
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet.replace("runs/RUN", str(tmp_path)), "records.md", "exec"), {})
    return out.getvalue().strip()


@pytest.fixture
def run_dir(tmp_path):
    for profile, n in (("steady", 30), ("burst", 12)):
        (tmp_path / profile).mkdir()
        ttft = [0.1 + 0.01 * i for i in range(n)]
        write_jsonl(
            tmp_path / profile / "requests.jsonl",
            request_records(n, profile=profile, ttft_seconds=ttft),
        )
    load_run(tmp_path)  # the first read writes requests.parquet
    return tmp_path


def test_the_doc_has_a_pandas_and_a_duckdb_snippet() -> None:
    snippets = _snippets()
    assert [s.splitlines()[0] for s in snippets] == ["import pandas as pd", "import duckdb"]


def test_the_pandas_snippet_prints_the_p99_ttft(run_dir) -> None:
    pd = pytest.importorskip("pandas")
    printed = _run(run_dir, _snippets()[0])
    expected = pd.Series([0.1 + 0.01 * i for i in range(30)]).quantile(0.99)
    assert float(printed) == pytest.approx(expected, abs=1e-6)


def test_the_duckdb_snippet_counts_every_profile(run_dir) -> None:
    pytest.importorskip("duckdb")
    printed = _run(run_dir, _snippets()[1])
    assert sorted(eval(printed)) == [("burst", 12), ("steady", 30)]
