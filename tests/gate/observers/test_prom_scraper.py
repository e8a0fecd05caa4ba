"""The Prometheus scraper against a fake /metrics: records, phases, failures, threads."""

from __future__ import annotations

import json

import pytest
from fake_target import closed_port_url, running_target
from test_namemaps import VLLM_CURRENT, batchgate_exposition

from gate.observers.observer import ObserverConfigError
from gate.observers.prom_scraper import PromScraper, ScraperConfig

RECORD_KEYS = {"t", "phase", "ok", "error", "server_kind", "metrics", "unavailable"}


@pytest.fixture
def target():
    with running_target() as t:
        yield t


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def scraper_for(url, tmp_path, **kw):
    return PromScraper(ScraperConfig(target_url=url, out_path=tmp_path / "scrapes.jsonl", **kw))


def test_scrape_now_writes_a_mapped_record(target, tmp_path):
    target.route("GET", "/metrics", lambda r: (200, batchgate_exposition()))
    scraper = scraper_for(target.url, tmp_path)
    record = scraper.scrape_now("start")
    scraper.stop()
    assert set(record) == RECORD_KEYS
    assert record["ok"] and record["error"] is None
    assert record["phase"] == "start" and record["server_kind"] == "batchgate"
    assert record["metrics"]["num_requests_waiting"] == {"batch": 7, "interactive": 1}
    assert read_jsonl(tmp_path / "scrapes.jsonl") == [record]


def test_phase_scrapes_give_exact_counter_deltas(target, tmp_path):
    value = {"n": 100}
    body = "# TYPE vllm:num_preemptions_total counter\nvllm:num_preemptions_total {n}\n"
    target.route("GET", "/metrics", lambda r: (200, body.format(n=value["n"])))
    scraper = scraper_for(target.url, tmp_path)
    start = scraper.scrape_now("start")
    value["n"] = 117
    end = scraper.scrape_now("end")
    scraper.stop()
    delta = end["metrics"]["preemptions_total"] - start["metrics"]["preemptions_total"]
    assert delta == 17
    assert [r["phase"] for r in read_jsonl(tmp_path / "scrapes.jsonl")] == ["start", "end"]


def test_missing_metrics_are_listed_unavailable(target, tmp_path):
    target.route("GET", "/metrics", lambda r: (200, VLLM_CURRENT))
    scraper = scraper_for(target.url, tmp_path)
    record = scraper.scrape_now("poll")
    scraper.stop()
    assert record["server_kind"] == "vllm"
    assert "kv_blocks_total" in record["unavailable"]
    assert "kv_blocks_total" not in record["metrics"]


def test_http_error_is_recorded_not_raised(target, tmp_path):
    target.route("GET", "/metrics", lambda r: (503, "draining"))
    scraper = scraper_for(target.url, tmp_path)
    record = scraper.scrape_now("drain")
    summary = scraper.stop()
    assert record["ok"] is False and "HTTP 503" in record["error"]
    assert record["metrics"] == {}
    assert summary.errors == 1 and summary.samples_written == 1


def test_unreachable_target_is_recorded_not_raised(tmp_path):
    scraper = scraper_for(closed_port_url(), tmp_path, timeout_seconds=1.0)
    record = scraper.scrape_now("start")
    scraper.stop()
    assert record["ok"] is False and "ConnectError" in record["error"]


def test_unparseable_body_is_recorded(target, tmp_path):
    target.route("GET", "/metrics", lambda r: (200, "this is { not prometheus\n"))
    scraper = scraper_for(target.url, tmp_path)
    record = scraper.scrape_now("poll")
    scraper.stop()
    assert record["ok"] is False and "unparseable" in record["error"]


def test_api_key_is_sent(target, tmp_path):
    target.route("GET", "/metrics", lambda r: (200, "process_resident_memory_bytes 1\n"))
    scraper = scraper_for(target.url, tmp_path, api_key="sekrit")
    scraper.scrape_now("poll")
    scraper.stop()
    assert target.requests[0].headers["Authorization"] == "Bearer sekrit"


def test_forced_server_kind_is_used(target, tmp_path):
    target.route("GET", "/metrics", lambda r: (200, VLLM_CURRENT))
    scraper = scraper_for(target.url, tmp_path, server_kind="unknown")
    record = scraper.scrape_now("poll")
    scraper.stop()
    assert record["server_kind"] == "unknown"
    assert list(record["metrics"]) == ["process_resident_memory_bytes"]


def test_background_polling_writes_poll_records_until_stopped(target, tmp_path):
    target.route("GET", "/metrics", lambda r: (200, batchgate_exposition()))
    scraper = scraper_for(target.url, tmp_path, interval_seconds=0.02)
    scraper.start()
    scraper.scrape_now("start")
    # Bounded wait for a few background polls, without a fixed sleep.
    for _ in range(500):
        if sum(1 for r in target.requests if r.path == "/metrics") >= 4:
            break
        scraper.wait(0.01)
    scraper.scrape_now("end")
    summary = scraper.stop()
    records = read_jsonl(tmp_path / "scrapes.jsonl")
    phases = [r["phase"] for r in records]
    assert phases.count("poll") >= 2
    assert phases.count("start") == 1 and phases.count("end") == 1
    assert summary.samples_written == len(records)
    assert not scraper.running
    with pytest.raises(RuntimeError, match="closed"):
        scraper.scrape_now("drain")


def test_bad_phase_and_bad_config_are_refused(tmp_path):
    with pytest.raises(ObserverConfigError):
        ScraperConfig(target_url="localhost:8000", out_path=tmp_path / "x")
    with pytest.raises(ObserverConfigError):
        ScraperConfig(target_url="http://x", out_path=tmp_path / "x", interval_seconds=0)
    with pytest.raises(ObserverConfigError):
        ScraperConfig(target_url="http://x", out_path=tmp_path / "x", server_kind="triton")
    scraper = scraper_for("http://127.0.0.1:9", tmp_path)
    with pytest.raises(ValueError, match="phase"):
        scraper.scrape_now("middle")
    scraper.stop()
