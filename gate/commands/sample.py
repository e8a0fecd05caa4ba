"""`batchgate sample`: runs the device-memory sampler alone, e.g. on the host of a remote server.

Owns the command line of the sampler and its stop conditions (duration, the process exiting,
Ctrl-C). The sampling itself is gate.observers.nvml_sampler.
"""

from __future__ import annotations

import argparse
import json
import sys

from gate.commands import _options as options
from gate.errors import ExitCode
from gate.observers.nvml_sampler import NvmlSampler, SamplerConfig
from gate.observers.observer import ObserverConfigError

# How often the foreground checks whether the sampler ended by itself.
POLL_SECONDS = 0.2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = options.add_verb(
        subparsers,
        "sample",
        help="sample GPU memory (NVML) or a process's resident memory into a JSONL file",
        description="Sample device memory, utilization, power and the process's own device "
        "memory with NVML; without a GPU, the process's resident memory. Records follow "
        "docs/records.md (gpu.jsonl). Stops after --duration, when the process exits, or on "
        "Ctrl-C.",
    )
    parser.add_argument("--pid", type=int, required=True, help="PID of the server process")
    options.add(parser, "out_file", required=True, detail="JSONL samples are appended to it")
    parser.add_argument("--hz", type=float, default=50.0, help="samples per second (default 50)")
    parser.add_argument("--duration", type=float, default=None, help="seconds to sample")
    parser.add_argument(
        "--device", type=int, action="append", default=None, help="NVML device index (repeat)"
    )
    parser.add_argument(
        "--no-children", action="store_true", help="do not count the process's children"
    )
    parser.add_argument(
        "--no-nvml", action="store_true", help="sample resident memory even with a GPU"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = SamplerConfig(
            out_path=args.out,
            pid=args.pid,
            hz=args.hz,
            devices=tuple(args.device) if args.device else None,
            duration_seconds=args.duration,
            include_children=not args.no_children,
            use_nvml=not args.no_nvml,
        )
    except ObserverConfigError as exc:
        print(f"batchgate sample: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    sampler = NvmlSampler(config)
    try:
        sampler.start()
        print(
            f"batchgate sample: source {sampler.source}, {config.hz:g} Hz -> {config.out_path}",
            file=sys.stderr,
        )
        while not sampler.wait(POLL_SECONDS):
            pass
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"batchgate sample: cannot write {config.out_path}: {exc}", file=sys.stderr)
        sampler.stop()
        return int(ExitCode.USAGE)
    summary = sampler.stop()
    print(json.dumps(summary.to_dict(), indent=2))
    if sampler.source == "none":
        print(f"batchgate sample: {'; '.join(summary.notes)}", file=sys.stderr)
        return int(ExitCode.NO_DATA)
    return int(ExitCode.PASSED)
