"""loadgen.cpu.CpuMeter: a run's last, short interval does not read as a saturated client."""

from __future__ import annotations

import pytest

from loadgen import cpu as cpu_module
from loadgen.cpu import CpuMeter


class FakeClocks:
    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 100.0

    def advance(self, wall_seconds: float, cpu_seconds: float) -> None:
        self.wall += wall_seconds
        self.cpu += cpu_seconds


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> FakeClocks:
    fake = FakeClocks()
    monkeypatch.setattr(cpu_module.time, "process_time", lambda: fake.cpu)
    monkeypatch.setattr(cpu_module.time, "monotonic", lambda: fake.wall)
    return fake


def test_full_intervals_are_sampled_as_they_are(clocks: FakeClocks) -> None:
    meter = CpuMeter()
    clocks.advance(1.0, 0.2)
    assert meter.sample() == pytest.approx(0.2)
    clocks.advance(1.0, 0.5)
    assert meter.sample() == pytest.approx(0.5)
    assert meter.summary() == {"mean": pytest.approx(0.35), "max": pytest.approx(0.5)}


def test_a_short_last_interval_is_folded_into_the_one_before(clocks: FakeClocks) -> None:
    meter = CpuMeter()
    clocks.advance(1.0, 0.2)
    meter.sample()
    clocks.advance(1.0, 0.3)
    meter.sample()
    # 10 ms spent handling the final responses: 100% of a core on its own.
    clocks.advance(0.010, 0.010)
    assert meter.sample() == pytest.approx(0.31 / 1.01)
    assert len(meter.samples) == 2
    assert meter.summary()["max"] == pytest.approx(0.31 / 1.01)


def test_a_saturated_client_still_shows(clocks: FakeClocks) -> None:
    meter = CpuMeter()
    clocks.advance(1.0, 0.97)
    meter.sample()
    clocks.advance(0.05, 0.05)
    assert meter.summary()["max"] > 0.9


def test_a_run_shorter_than_the_minimum_keeps_its_one_sample(clocks: FakeClocks) -> None:
    meter = CpuMeter()
    clocks.advance(0.1, 0.02)
    assert meter.sample() == pytest.approx(0.2)
    assert meter.samples == [pytest.approx(0.2)]
