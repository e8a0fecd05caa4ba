"""The run configuration shared by the CLI, the Locust master and every worker.

Owns `RunConfig` (target, model, output directory, profile name, scale and overrides, worker
count) and its JSON round trip, which is how workers receive it (as a Locust custom argument that
Locust forwards from master to workers). The profile itself is re-resolved from these fields in
each process, deterministically. It does not know about Locust or HTTP.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from loadgen.errors import ConfigError
from loadgen.profiles import ProfileSpec, resolve

__all__ = ["RunConfig"]


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    target_url: str
    model: str
    out_dir: str
    profile: str
    scale: str = "full"
    overrides: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = None
    workers: int = 1
    connect_timeout_seconds: float = 10.0

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ConfigError(f"workers must be >= 1, got {self.workers}")

    def spec(self) -> ProfileSpec:
        return resolve(self.profile, self.overrides, self.scale)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"loadgen config is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError("loadgen config must be a JSON object")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"bad loadgen config: {exc}") from exc
