"""Observers that run beside a load: the device-memory sampler, the Prometheus scraper and the
step-record fetcher. Each is a thread with start()/stop(), writes its JSONL file as it goes
(formats in docs/records.md) and returns an `ObserverSummary` for the run manifest."""

from gate.observers.namemaps import GLOSSARY_NAMES, NAME_MAPS, detect_server_kind, map_metrics
from gate.observers.nvml_sampler import NvmlSampler, SamplerConfig
from gate.observers.observer import ObserverConfigError, ObserverSummary, config_from_mapping
from gate.observers.prom_scraper import PromScraper, ScraperConfig, parse_exposition
from gate.observers.step_fetcher import StepFetcher, StepFetcherConfig

__all__ = [
    "GLOSSARY_NAMES",
    "NAME_MAPS",
    "NvmlSampler",
    "ObserverConfigError",
    "ObserverSummary",
    "PromScraper",
    "SamplerConfig",
    "ScraperConfig",
    "StepFetcher",
    "StepFetcherConfig",
    "config_from_mapping",
    "detect_server_kind",
    "map_metrics",
    "parse_exposition",
]
