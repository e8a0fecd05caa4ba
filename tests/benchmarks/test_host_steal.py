"""host_steal.py reads the hypervisor's share of CPU time from a /proc/stat-shaped file: the
aggregate line's steal over all its first eight fields (guest time is in user already), and no
figure (None), never a made-up zero, where the file or the field is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import host_steal


def _stat(path: Path, cpu_line: str) -> Path:
    path.write_text(f"{cpu_line}\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 12345\n")
    return path


def test_the_share_is_steal_over_all_time_between_two_readings(tmp_path: Path) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    before = host_steal.read(_stat(tmp_path / "a", "cpu  100 0 20 300 0 0 5 10 40 0"))
    after = host_steal.read(_stat(tmp_path / "b", "cpu  160 0 30 400 0 0 5 40 90 0"))
    assert before == (10, 435)
    assert after == (40, 635)
    assert host_steal.share(before, after) == pytest.approx(30 / 200)


@pytest.mark.parametrize(
    "content",
    ["", "intr 1 2 3\n", "cpu  1 2 3\n", "cpu  1 2 3 4 5 6 7 x\n", "cpu0 1 2 3 4 5 6 7 8\n"],
)
def test_no_aggregate_line_gives_no_figure(tmp_path: Path, content: str) -> None:
    path = tmp_path / "stat"
    path.write_text(content)
    assert host_steal.read(path) is None


def test_a_missing_file_or_reading_gives_no_figure(tmp_path: Path) -> None:
    assert host_steal.read(tmp_path / "absent") is None
    assert host_steal.share(None, (1, 10)) is None
    assert host_steal.share((1, 10), None) is None
    assert host_steal.share((1, 10), (1, 10)) is None  # no tick passed


def test_this_machine_reads_a_share_in_range() -> None:
    if not Path("/proc/stat").exists():
        pytest.skip("no /proc/stat here")
    before = host_steal.read()
    assert before is not None
    sum(range(2_000_000))  # let a few ticks pass
    after = host_steal.read()
    value = host_steal.share(before, after)
    assert value is None or 0.0 <= value <= 1.0
