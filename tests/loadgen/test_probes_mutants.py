"""The consistency probe set and its schedule, in-process (loadgen.probes): what the gate and
the `consistency_probes` profile rely on -- a fixed set, exact-length interactive requests, and
groups spread over the schedule without losing a probe."""

from __future__ import annotations

import hashlib
import string

import pytest

from loadgen import probes
from loadgen.probes import (
    PROBE_GROUP,
    PROBE_MAX_TOKENS,
    PROBE_SET,
    probe_request,
    probe_schedule,
)


def _digest(probe_set: tuple[probes.Probe, ...]) -> str:
    text = "\n".join(f"{p.index}|{p.kind}|{p.prompt}|{sorted(p.body.items())}" for p in probe_set)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize("build", ["imported", "rebuilt"])
def test_the_probe_set_is_fixed(build: str) -> None:
    # The set is part of the record format: a probe's index names the same prompt and sampling
    # parameters in every run and every version, so answers of two runs can be compared. Any
    # change to the prompts or bodies must be a new set (a new seed name), not a silent edit.
    # Rebuilt too: building it is deterministic (a process that rebuilds it gets the same set).
    probe_set = PROBE_SET if build == "imported" else probes._probe_set()
    assert len(probe_set) == 8
    assert _digest(probe_set) == _PROBE_SET_DIGEST


_PROBE_SET_DIGEST = "3216e257202214c0"


@pytest.mark.parametrize("build", ["imported", "rebuilt"])
def test_probe_prompts_are_short_lowercase_text(build: str) -> None:
    probe_set = PROBE_SET if build == "imported" else probes._probe_set()
    allowed = set(string.ascii_lowercase + " ")
    assert [p.index for p in probe_set] == list(range(len(probe_set)))
    for p in probe_set:
        assert 24 <= len(p.prompt) <= 48
        assert set(p.prompt) <= allowed
    assert len({p.prompt for p in probe_set}) == len(probe_set)


@pytest.mark.parametrize("build", ["imported", "rebuilt"])
def test_probe_bodies(build: str) -> None:
    probe_set = PROBE_SET if build == "imported" else probes._probe_set()
    kinds = [p.kind for p in probe_set]
    assert kinds == ["greedy", "greedy", "seeded", "seeded"] * 2
    for p in probe_set:
        if p.kind == "greedy":
            assert p.body == {"temperature": 0.0}
        else:
            assert p.body == {"temperature": 0.8, "top_p": 0.95, "seed": 1000 + p.index}


def test_probe_request_asks_for_exactly_the_probe_length() -> None:
    probe = PROBE_SET[3]
    r = probe_request(probe, index=17, offset_seconds=2.5, stage="main")
    assert (r.index, r.offset_seconds, r.stage) == (17, 2.5, "main")
    assert r.priority == "interactive" and r.length_class == "short"
    assert r.messages == (("user", probe.prompt),)
    assert r.prompt_tokens == len(probe.prompt.encode())
    assert r.max_tokens == PROBE_MAX_TOKENS == 24
    assert r.exact_output is True
    assert r.body == probe.body and r.probe == 3


@pytest.mark.parametrize(("count", "duration"), [(0, 10.0), (-1, 10.0), (4, 0.0), (4, -1.0)])
def test_probe_schedule_is_empty_without_probes_or_time(count: int, duration: float) -> None:
    assert probe_schedule(count, duration) == []


def test_probe_schedule_small_counts() -> None:
    assert probe_schedule(1, 8.0) == [(4.0, [0])]
    assert probe_schedule(2, 8.0) == [(4.0, [0, 1])]
    assert probe_schedule(3, 8.0) == [(2.0, [0, 1]), (6.0, [2])]


def test_probe_schedule_cycles_through_the_set() -> None:
    count = len(PROBE_SET) + 3
    groups = probe_schedule(count, 12.0)
    sent = [i for _, members in groups for i in members]
    assert sent == [i % len(PROBE_SET) for i in range(count)]
    assert all(len(m) == PROBE_GROUP for _, m in groups[:-1]) and len(groups[-1][1]) == 1
    offsets = [t for t, _ in groups]
    assert offsets == sorted(offsets) and offsets[0] > 0 and offsets[-1] < 12.0


def test_a_schedule_shorter_than_a_second_still_sends_its_probes() -> None:
    assert probe_schedule(2, 0.5) == [(0.25, [0, 1])]
    assert probe_schedule(1, 1.0) == [(0.5, [0])]
