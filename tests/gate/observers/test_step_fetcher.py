"""The step fetcher against a fake /admin/steps ring buffer: once each, gaps counted, 404 said."""

from __future__ import annotations

import json

import pytest
from fake_target import closed_port_url, running_target

from gate.observers.observer import ObserverConfigError
from gate.observers.step_fetcher import StepFetcher, StepFetcherConfig


class Ring:
    """The server side: a bounded ring of step records answering `after=N`."""

    def __init__(
        self, capacity: int = 1000, *, honour_after: bool = True, page: int = 1000
    ) -> None:
        self.capacity = capacity
        self.page = page
        self.records: list[dict] = []
        self.next_seq = 1
        self.honour_after = honour_after

    def steps(self, n: int) -> None:
        for _ in range(n):
            seq = self.next_seq
            self.records.append(
                {"seq": seq, "wall_time": 1_764_400_000.0 + seq, "duration_seconds": 0.001 * seq}
            )
            self.next_seq += 1
        self.records = self.records[-self.capacity :]

    def handle(self, req):
        after = int(req.query.get("after", 0)) if self.honour_after else 0
        out = [r for r in self.records if r["seq"] > after][: self.page]
        return 200, {
            "records": out,
            "oldest_seq": self.records[0]["seq"] if self.records else None,
            "latest_seq": self.records[-1]["seq"] if self.records else None,
            "missed": 0,
        }


@pytest.fixture
def target():
    with running_target() as t:
        yield t


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def fetcher_for(url, tmp_path, **kw):
    return StepFetcher(StepFetcherConfig(target_url=url, out_path=tmp_path / "steps.jsonl", **kw))


def test_records_land_exactly_once_with_t_from_wall_time(target, tmp_path):
    ring = Ring()
    ring.steps(5)  # before the window: skipped with from_now
    target.route("GET", "/admin/steps", ring.handle)
    fetcher = fetcher_for(target.url, tmp_path)
    assert fetcher.fetch_now() == 0
    ring.steps(3)
    assert fetcher.fetch_now() == 3
    assert fetcher.fetch_now() == 0
    ring.steps(2)
    assert fetcher.fetch_now() == 2
    summary = fetcher.stop()
    records = read_jsonl(tmp_path / "steps.jsonl")
    assert [r["seq"] for r in records] == [6, 7, 8, 9, 10]
    assert all(r["t"] == r["wall_time"] for r in records)
    assert records[0]["duration_seconds"] == pytest.approx(0.006)
    assert summary.samples_written == 5 and summary.missed == 0
    assert summary.extra["available"] is True and summary.extra["last_seq"] == 10


def test_a_burst_larger_than_one_page_is_fetched_in_one_call(target, tmp_path):
    ring = Ring(page=3)
    target.route("GET", "/admin/steps", ring.handle)
    fetcher = fetcher_for(target.url, tmp_path)
    fetcher.fetch_now()
    ring.steps(10)
    assert fetcher.fetch_now() == 10
    fetcher.stop()
    assert [r["seq"] for r in read_jsonl(tmp_path / "steps.jsonl")] == list(range(1, 11))
    assert len(target.requests) == 1 + 4  # sync, then pages of 3, 3, 3, 1


def test_resent_records_are_not_written_twice(target, tmp_path):
    ring = Ring(honour_after=False)  # a server that ignores `after`
    target.route("GET", "/admin/steps", ring.handle)
    fetcher = fetcher_for(target.url, tmp_path, from_now=False)
    ring.steps(3)
    fetcher.fetch_now()
    ring.steps(2)
    fetcher.fetch_now()
    fetcher.fetch_now()
    fetcher.stop()
    assert [r["seq"] for r in read_jsonl(tmp_path / "steps.jsonl")] == [1, 2, 3, 4, 5]


def test_ring_overflow_between_polls_is_counted_as_missed(target, tmp_path):
    ring = Ring(capacity=4)
    target.route("GET", "/admin/steps", ring.handle)
    fetcher = fetcher_for(target.url, tmp_path)
    ring.steps(2)
    fetcher.fetch_now()  # cursor at 2
    ring.steps(10)  # seq 3..12; the ring keeps 9..12
    assert fetcher.fetch_now() == 4
    summary = fetcher.stop()
    assert summary.missed == 6
    assert [r["seq"] for r in read_jsonl(tmp_path / "steps.jsonl")] == [9, 10, 11, 12]


def test_from_now_false_keeps_what_is_already_buffered(target, tmp_path):
    ring = Ring()
    ring.steps(3)
    target.route("GET", "/admin/steps", ring.handle)
    fetcher = fetcher_for(target.url, tmp_path, from_now=False)
    assert fetcher.fetch_now() == 3
    fetcher.stop()


def test_target_without_endpoint_is_reported_and_polling_ends(target, tmp_path):
    fetcher = fetcher_for(target.url, tmp_path, interval_seconds=0.01)
    fetcher.start()
    assert fetcher.wait(5.0)  # ended by itself after the 404
    summary = fetcher.stop()
    assert fetcher.available is False
    assert "HTTP 404" in fetcher.unavailable_reason
    assert "histogram estimates" in summary.extra["unavailable_reason"]
    assert not (tmp_path / "steps.jsonl").exists()
    assert len(target.requests) == 1


def test_refused_admin_says_to_pass_the_token(target, tmp_path):
    target.route("GET", "/admin/steps", lambda r: (401, {"error": {"message": "no"}}))
    fetcher = fetcher_for(target.url, tmp_path)
    fetcher.fetch_now()
    fetcher.stop()
    assert fetcher.available is False and "admin token" in fetcher.unavailable_reason


def test_admin_token_is_sent(target, tmp_path):
    ring = Ring()
    target.route("GET", "/admin/steps", ring.handle)
    fetcher = fetcher_for(target.url, tmp_path, admin_token="tok")
    fetcher.fetch_now()
    fetcher.stop()
    assert target.requests[0].headers["Authorization"] == "Bearer tok"


def test_endpoint_that_answers_but_has_no_steps_leaves_an_empty_file(target, tmp_path):
    target.route("GET", "/admin/steps", Ring().handle)
    fetcher = fetcher_for(target.url, tmp_path)
    fetcher.fetch_now()
    fetcher.fetch_now()
    fetcher.stop()
    assert (tmp_path / "steps.jsonl").read_text() == ""


def test_malformed_answers_and_records_are_counted(target, tmp_path):
    answers = iter(
        [
            (200, {"latest_seq": 0, "records": []}),
            (200, {"no_records": True}),
            (200, {"records": [{"seq": 1, "wall_time": 5.0}, {"x": 1}, {"seq": 2}]}),
            (500, "boom"),
        ]
    )
    target.route("GET", "/admin/steps", lambda r: next(answers))
    fetcher = fetcher_for(target.url, tmp_path)
    for _ in range(4):
        fetcher.fetch_now()
    summary = fetcher.stop()
    assert summary.errors == 2 and "HTTP 500" in summary.last_error
    assert summary.extra["malformed"] == 2
    assert [r["seq"] for r in read_jsonl(tmp_path / "steps.jsonl")] == [1]


def test_unreachable_target_counts_errors(tmp_path):
    fetcher = fetcher_for(closed_port_url(), tmp_path, timeout_seconds=1.0)
    fetcher.fetch_now()
    summary = fetcher.stop()
    assert summary.errors == 1 and fetcher.available is None


def test_background_polling_collects_new_steps(target, tmp_path):
    ring = Ring()
    target.route("GET", "/admin/steps", ring.handle)
    fetcher = fetcher_for(target.url, tmp_path, interval_seconds=0.01)
    fetcher.start()
    for _ in range(500):  # bounded: wait until the first sync happened
        if target.requests:
            break
        fetcher.wait(0.01)
    ring.steps(7)
    for _ in range(500):
        if fetcher.summary.samples_written >= 7:
            break
        fetcher.wait(0.01)
    fetcher.stop()
    assert [r["seq"] for r in read_jsonl(tmp_path / "steps.jsonl")] == list(range(1, 8))


def test_bad_config_is_refused(tmp_path):
    with pytest.raises(ObserverConfigError):
        StepFetcherConfig(target_url="ftp://x", out_path=tmp_path / "s")
    with pytest.raises(ObserverConfigError):
        StepFetcherConfig(target_url="http://x", out_path=tmp_path / "s", interval_seconds=-1)
