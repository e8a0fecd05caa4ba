"""`python -m loadgen` / `batchgate load`: the load generator's command line.

Owns argument parsing, turning flags into profile overrides and a `RunConfig`, the start-of-run
probes of the target (reachable, which model, whether `continuous_usage: auto` may ask for
per-chunk usage), and the exit code (0 run completed, even with request errors; 2 usage error;
5 target unreachable, run interrupted or crashed). Locust is imported only once a run really
starts (it monkey-patches the standard library), so `--help` and usage errors never import it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadgen.config import RunConfig
from loadgen.errors import ConfigError, TargetUnreachableError
from loadgen.prefix_text import candidate_words
from loadgen.probe import (
    probe_context_tokens,
    probe_continuous_usage,
    probe_is_bundled,
    probe_target,
    probe_token_units,
)
from loadgen.profiles import CONTINUOUS_USAGE, PROFILES, SCALES, check_plans_requests, resolve

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_USAGE, EXIT_NO_DATA = 0, 2, 5


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        # `batchgate load` execs this module with its own name (gate/commands/load.py).
        prog=os.environ.get("BATCHGATE_PROG") or "python -m loadgen",
        description="Open-loop load generator for OpenAI-compatible LLM servers (runs Locust). "
        "Writes OUT/requests.jsonl and OUT/load.json (docs/records.md).",
        epilog="Profiles: "
        + "; ".join(f"{n}: {d}" for n, (_, _, d) in PROFILES.items())
        + ". Exit codes: 0 completed (even with request errors), 2 usage error, 5 target "
        "unreachable / run interrupted.",
    )
    # The options `batchgate` verbs share keep the words of gate/commands/_options.py (checked
    # by tests/gate/commands/test_option_table.py; loadgen may not import gate).
    p.add_argument(
        "--target",
        metavar="URL",
        help="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000",
    )
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        metavar="NAME",
        help="traffic profile; one of those listed below",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="output directory: requests.jsonl and load.json are written straight into it",
    )
    p.add_argument(
        "--scale",
        choices=list(SCALES),
        default="quick",
        help="length of one measurement of a profile: smoke (CI, 1/20 of full), quick (1/4) or "
        "full; default %(default)s (quick where each profile is measured once: run, load; "
        "smoke where it is measured again and again: sweep points, tune candidates); "
        "--duration replaces it",
    )
    p.add_argument("--duration", type=float, help="total duration in seconds (stages keep ratios)")
    p.add_argument("--rate", type=float, help="mean offered rate in req/s (stages keep ratios)")
    p.add_argument("--seed", type=int, help="seed of arrivals and request contents")
    p.add_argument("--workers", type=int, default=1, help="Locust worker processes (default 1)")
    p.add_argument(
        "--remote-workers",
        action="store_true",
        help="do not start local workers: wait for --workers remote ones to join",
    )
    p.add_argument(
        "--master-bind-host",
        default="127.0.0.1",
        help="address the master listens on (0.0.0.0 for remote workers)",
    )
    p.add_argument("--master-port", type=int, default=0, help="master port (default: free port)")
    p.add_argument(
        "--api-key",
        metavar="KEY",
        default=os.environ.get("BATCHGATE_API_KEY"),
        help="API key for the target, sent as a Bearer token (default $BATCHGATE_API_KEY)",
    )
    p.add_argument("--model", help="model name (default: first model listed by /v1/models)")
    p.add_argument("--endpoint", choices=["chat", "completions"], help="API endpoint")
    p.add_argument("--no-stream", action="store_true", help="send non-streaming requests")
    p.add_argument(
        "--continuous-usage",
        choices=list(CONTINUOUS_USAGE),
        help="ask for cumulative usage on every chunk (stream_options.continuous_usage_stats: "
        "real per-chunk token counts, per-token ITL); auto (the default): on when the target's "
        "/metrics shows the bundled server, vLLM or SGLang",
    )
    p.add_argument(
        "--drop-fields",
        metavar="FIELD[,FIELD]",
        help="leave these request-body fields out of every request (those a strict target "
        "refuses, e.g. min_tokens,ignore_eos,top_k; `batchgate run` finds them itself); "
        "load.json's dropped_fields lists them",
    )
    p.add_argument(
        "--closed-loop", action="store_true", help="closed loop: --users with think time"
    )
    p.add_argument("--users", type=int, help="closed-loop users")
    p.add_argument("--think-time", type=float, help="closed-loop think time in seconds")
    p.add_argument("--max-concurrency", type=int, help="open-loop cap on requests in flight")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="[PROFILE.]KEY=VALUE",
        help="override one profile parameter (repeat; VALUE is JSON when it parses; dotted KEYs "
        "reach into mappings); without PROFILE. it applies to every profile the command runs",
    )
    p.add_argument(
        "--profile-overrides-json",
        metavar="FILE",
        help="JSON object of profile parameter overrides (the gates.yaml profiles: "
        "section); --set and the flags above apply on top",
    )
    p.add_argument(
        "--show-profile",
        action="store_true",
        help="print the resolved profile parameters as JSON and exit",
    )
    return p


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.profile_overrides_json:
        try:
            loaded = json.loads(Path(args.profile_overrides_json).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read {args.profile_overrides_json}: {exc.strerror}") from exc
        except ValueError as exc:
            raise ConfigError(f"{args.profile_overrides_json} is not valid JSON: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{args.profile_overrides_json} must hold a JSON object")
        out.update(loaded)
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set needs KEY=VALUE, got {item!r}")
        first, dot, rest = key.partition(".")
        if dot and first in PROFILES:  # `batchgate run`'s PROFILE.KEY=VALUE: this load's?
            if first != args.profile:
                raise ConfigError(
                    f"--set {item}: names profile {first}, this load runs {args.profile}"
                )
            key = rest
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    flags = {
        "duration_seconds": args.duration,
        "rate_rps": args.rate,
        "seed": args.seed,
        "endpoint": args.endpoint,
        "users": args.users,
        "think_time_seconds": args.think_time,
        "max_concurrency": args.max_concurrency,
        "continuous_usage": args.continuous_usage,
    }
    out.update({k: v for k, v in flags.items() if v is not None})
    if args.drop_fields is not None:
        out["drop_fields"] = [f.strip() for f in args.drop_fields.split(",") if f.strip()]
    if args.closed_loop:
        out["mode"] = "closed"
    if args.no_stream:
        out["stream"] = False
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        overrides = _overrides(args)
        if args.show_profile:
            if not args.profile:
                raise ConfigError("--show-profile needs --profile")
            print(json.dumps(resolve(args.profile, overrides, args.scale).params, indent=2))
            return EXIT_OK
        missing = [f"--{n}" for n in ("target", "profile", "out") if not getattr(args, n)]
        if missing:
            raise ConfigError(f"missing required option(s): {', '.join(missing)}")
        if args.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {args.workers}")
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise ConfigError(f"--out {args.out}: not a directory")
        spec = resolve(args.profile, overrides, args.scale)
        check_plans_requests(spec)
        if spec.params.get("dataset"):
            from loadgen.dataset import load_dataset

            load_dataset(spec.params["dataset"])  # fail early, with a clear message
    except ConfigError as exc:
        print(f"loadgen: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        model = args.model or probe_target(args.target, api_key=args.api_key, timeout_seconds=10.0)
    except TargetUnreachableError as exc:
        print(f"loadgen: target unreachable: {exc}", file=sys.stderr)
        return EXIT_NO_DATA
    if spec.params["continuous_usage"] == "auto":
        # Resolved here, once, so every worker sends the same body and load.json's params
        # say what was sent.
        overrides["continuous_usage"] = _resolve_continuous_usage(args, spec.params)
    if spec.driver == "trace":
        # The default clamp is the target's context, the default vocabulary exact bytes on the
        # bundled server (docs/traces.md); resolved once here, so every worker plans the same.
        probe = {"api_key": args.api_key, "timeout_seconds": 10.0}
        if spec.params["context_tokens"] is None:
            overrides["context_tokens"] = probe_context_tokens(args.target, **probe)
        if spec.params["tokenizer"] == "auto":
            overrides["tokenizer"] = _resolve_tokenizer(args, model or "default", overrides)
        try:
            resolve(args.profile, overrides, args.scale)
        except ConfigError as exc:
            print(f"loadgen: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    config = RunConfig(
        target_url=args.target,
        model=model or "default",
        out_dir=args.out,
        profile=args.profile,
        scale=args.scale,
        overrides=overrides,
        api_key=args.api_key,
        workers=args.workers,
    )
    from loadgen.locust.runner import run_load

    try:
        load = run_load(
            config,
            master_bind_host=args.master_bind_host,
            master_port=args.master_port,
            remote_workers=args.remote_workers,
        )
    except RuntimeError as exc:
        with contextlib.suppress(OSError):  # stderr may sit on the disk that filled up
            print(f"loadgen: error: {exc}", file=sys.stderr)
        return EXIT_NO_DATA
    return EXIT_OK if load.get("ended") == "completed" else EXIT_NO_DATA


def _resolve_tokenizer(args: argparse.Namespace, model: str, overrides: dict[str, Any]) -> str:
    """`tokenizer: auto`: exact bytes on the bundled server; elsewhere the common words the
    target's own `/tokenize` counts as one token each (vLLM, llama.cpp), put in `token_units`
    so every worker uses the same; else the unverified approximate words."""
    probe = {"api_key": args.api_key, "timeout_seconds": 10.0}
    if probe_is_bundled(args.target, **probe):
        return "bytes"
    units = probe_token_units(args.target, candidate_words(), model=model, api_key=args.api_key)
    if units is None:
        return "words"
    overrides["token_units"] = units
    return "target"


def _resolve_continuous_usage(args: argparse.Namespace, params: dict[str, Any]) -> str:
    if not params["stream"]:
        return "off"  # stream_options belongs to streamed requests only
    known = probe_continuous_usage(args.target, api_key=args.api_key, timeout_seconds=10.0)
    return "on" if known else "off"
