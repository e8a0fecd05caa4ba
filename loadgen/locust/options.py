"""Locust command-line options of loadgen, and the run config they describe.

Owns the `--loadgen-*` custom arguments (forwarded by Locust from master to workers), turning a
Locust environment's parsed options into a `RunConfig`, and the parsed options of a programmatic
master or local runner. It does not parse the loadgen command line (`loadgen.cli`), run anything
or know about records. It imports locust only inside `build_parsed_options`, so importing it
patches nothing, but it is meant for the load process like the rest of `loadgen.locust`.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from loadgen.config import RunConfig

if TYPE_CHECKING:
    from locust.env import Environment

__all__ = ["add_arguments", "build_parsed_options", "config_from_options"]


def add_arguments(parser: Any) -> None:
    """Locust custom arguments (forwarded by Locust from master to workers)."""
    group = parser  # Locust's own add_argument (groups lack include_in_web_ui)
    group.add_argument(
        "--loadgen-config",
        default="",
        help="full run config JSON (set by the loadgen CLI; overrides the options below)",
        include_in_web_ui=False,
    )
    group.add_argument(
        "--loadgen-profile",
        default="steady",
        env_var="LOADGEN_PROFILE",
        help=(
            "profile name: steady, ramp, night_trickle, burst, mixed_lengths, priority_mix, "
            "offline_job (its Batch API job is sent only by python -m loadgen)"
        ),
    )
    group.add_argument(
        "--loadgen-scale", default="smoke", env_var="LOADGEN_SCALE", help="smoke | quick | full"
    )
    group.add_argument(
        "--loadgen-overrides-json",
        default="{}",
        env_var="LOADGEN_OVERRIDES_JSON",
        help="profile parameter overrides as a JSON object",
    )
    group.add_argument(
        "--loadgen-out",
        default="runs/locust",
        env_var="LOADGEN_OUT",
        help="output directory (requests.jsonl, load.json)",
    )
    group.add_argument(
        "--loadgen-model",
        default="",
        env_var="LOADGEN_MODEL",
        help="model name sent in requests (default: first of /v1/models)",
    )
    group.add_argument(
        "--loadgen-api-key",
        default="",
        env_var="LOADGEN_API_KEY",
        include_in_web_ui=False,
        help="API key (Bearer)",
    )
    group.add_argument(
        "--loadgen-worker-count",
        type=int,
        default=0,
        include_in_web_ui=False,
        help="set by the master at test start",
    )
    group.add_argument(
        "--loadgen-users-per-worker",
        type=int,
        default=0,
        include_in_web_ui=False,
        help="set by the master at test start (0: the run was refused)",
    )
    group.add_argument(
        "--loadgen-worker-ranks",
        default="",
        include_in_web_ui=False,
        help="set by the master at test start (JSON: worker client id -> rank)",
    )
    group.add_argument(
        "--loadgen-start-monotonic",
        type=float,
        default=0.0,
        include_in_web_ui=False,
        help="set by the master at test start",
    )
    group.add_argument(
        "--loadgen-start-wall",
        type=float,
        default=0.0,
        include_in_web_ui=False,
        help="set by the master at test start",
    )


def config_from_options(env: Environment) -> RunConfig:
    opts = env.parsed_options
    if opts is not None and getattr(opts, "loadgen_config", ""):
        return RunConfig.from_json(opts.loadgen_config)
    host = env.host or (getattr(opts, "host", None) if opts else None)
    if not host:
        raise ValueError("set the target with --host URL")
    model = getattr(opts, "loadgen_model", "") or _first_model(host)
    return RunConfig(
        target_url=host,
        model=model,
        out_dir=getattr(opts, "loadgen_out", "runs/locust"),
        profile=getattr(opts, "loadgen_profile", "steady"),
        scale=getattr(opts, "loadgen_scale", "smoke"),
        overrides=json.loads(getattr(opts, "loadgen_overrides_json", "{}") or "{}"),
        api_key=getattr(opts, "loadgen_api_key", "") or None,
    )


def _first_model(url: str) -> str:
    from loadgen.probe import probe_target

    return probe_target(url, api_key=None, timeout_seconds=5.0) or "default"


def build_parsed_options(config: RunConfig) -> argparse.Namespace:
    """Locust's default options plus ours, for a programmatic master or local runner."""
    from locust.argument_parser import default_args_dict

    opts = argparse.Namespace(**default_args_dict())
    opts.headless = True
    opts.host = config.target_url
    opts.loadgen_config = config.to_json()
    opts.loadgen_worker_count = config.workers
    opts.loadgen_users_per_worker = 0
    opts.loadgen_worker_ranks = ""
    opts.loadgen_start_wall = 0.0
    opts.loadgen_start_monotonic = 0.0
    return opts
