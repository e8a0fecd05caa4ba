"""Observers that run beside a load: the device-memory sampler, the Prometheus scraper and the
step-record fetcher. Each is a thread with start()/stop(), writes its JSONL file as it goes
(formats in docs/records.md) and returns an `ObserverSummary` for the run manifest."""
