"""One command for the GPU: the gpu-marked tests, decode tokens/s of the 100m and 1b presets
against the HBM roofline, continuous vs static on the mixed workload, a `batchgate run --scale
smoke` with the NVML sampler, and peak device memory vs the KV budget, in one table, in at most
8 minutes. Without CUDA it says so and exits 0.

    .venv/bin/python -m benchmarks.gpu_check [--device auto|cuda|cpu] [--quick] [--out FILE]

Exit 1 when a section failed (its row says why), else 0. Writes benchmarks/results/gpu_check.json.
`--device cpu --quick` runs the CPU-runnable sections on the tiny model: the test hook.

This module owns the check as a whole: the sections' budgets and the runner that keeps to them,
the row and the table, the JSON, and the arithmetic the table reports (the HBM roofline). What
each section measures is in gpu_sections.py, which runs as a child process per section (its
peak memory its own; killed at its budget); this process never imports torch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "PEAK_BANDWIDTH",
    "SECTIONS",
    "Deadline",
    "Launched",
    "SectionSpec",
    "decode_bytes_per_step",
    "exit_code_for",
    "format_table",
    "main",
    "make_row",
    "peak_bandwidth",
    "roofline_values",
    "run_command",
    "run_sections",
]

BENCHMARKS = Path(__file__).resolve().parent
REPO_ROOT = BENCHMARKS.parent
RESULTS = BENCHMARKS / "results" / "gpu_check.json"
STATUSES = ("ok", "failed", "not run", "skipped")

# Peak HBM/GDDR bandwidth in bytes/s from the vendors' spec sheets, matched on the tokens of
# torch.cuda.get_device_name() (upper-cased, split on anything not a letter or digit), first
# match wins, so a variant is listed before its family. A name no row matches gets no roofline:
# a guessed number would make the ratio look measured.
PEAK_BANDWIDTH: tuple[tuple[frozenset[str], float, str], ...] = (
    (frozenset({"H200"}), 4.8e12, "H200 (SXM and NVL): 4.8 TB/s"),
    (frozenset({"H100", "NVL"}), 3.9e12, "H100 NVL: 3.9 TB/s"),
    (frozenset({"H100", "PCIE"}), 2.0e12, "H100 PCIe: 2.0 TB/s"),
    (frozenset({"H100", "HBM3"}), 3.35e12, "H100 SXM: 3.35 TB/s"),  # "NVIDIA H100 80GB HBM3"
    (frozenset({"H100", "SXM5"}), 3.35e12, "H100 SXM: 3.35 TB/s"),
    (frozenset({"A100", "80GB", "PCIE"}), 1.935e12, "A100 80GB PCIe: 1.935 TB/s"),
    (frozenset({"A100", "80GB"}), 2.039e12, "A100 80GB SXM: 2.039 TB/s"),  # "A100-SXM4-80GB"
    (frozenset({"A100", "40GB"}), 1.555e12, "A100 40GB (SXM4 and PCIe): 1.555 TB/s"),
    (frozenset({"L40S"}), 0.864e12, "L40S: 864 GB/s"),
    (frozenset({"L40"}), 0.864e12, "L40: 864 GB/s"),
    (frozenset({"L4"}), 0.3e12, "L4: 300 GB/s"),
    (frozenset({"A10G"}), 0.6e12, "A10G: 600 GB/s"),
    (frozenset({"A10"}), 0.6e12, "A10: 600 GB/s"),
    (frozenset({"RTX", "4090"}), 1.008e12, "RTX 4090: 1.008 TB/s"),
)


def peak_bandwidth(device_name: str) -> tuple[float | None, str]:
    """(bytes per second, which spec row) or (None, why there is no figure)."""
    tokens = set(re.split(r"[^A-Z0-9]+", device_name.upper()))
    if "MIG" in tokens:  # e.g. "NVIDIA H200 MIG 3g.71gb": the whole GPU's figure would flatter it
        return None, f"{device_name!r} is a MIG slice: no spec sheet gives its share of bandwidth"
    for required, bytes_per_second, label in PEAK_BANDWIDTH:
        if required <= tokens:
            return bytes_per_second, label
    return None, f"{device_name!r} is not in the spec table (benchmarks/gpu_check.py)"


def decode_bytes_per_step(config: Any, *, dtype_bytes: int, context_lens: list[int]) -> int:
    """The least a decode step must read from device memory: every weight once, plus the K and V
    of every context token of every sequence (activations are small next to either)."""
    weights = config.num_parameters() * dtype_bytes
    return weights + sum(context_lens) * config.kv_bytes_per_token(dtype_bytes=dtype_bytes)


def roofline_values(
    *, batch: int, tokens_per_second: float, bytes_per_step: int, bandwidth: float | None
) -> dict[str, float | None]:
    """The bandwidth-bound ceiling for this batch and how close the measurement came to it."""
    achieved = bytes_per_step * tokens_per_second / batch  # bytes read per second
    if bandwidth is None:
        return {
            "achieved_bytes_per_second": achieved,
            "roofline_tokens_per_second": None,
            "roofline_ratio": None,
        }
    ceiling = batch * bandwidth / bytes_per_step
    return {
        "achieved_bytes_per_second": achieved,
        "roofline_tokens_per_second": ceiling,
        "roofline_ratio": tokens_per_second / ceiling,
    }


def make_row(
    section: str,
    case: str,
    status: str,
    *,
    measured: str = "",
    reference: str = "",
    ratio: float | None = None,
    note: str = "",
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    if status not in STATUSES:
        raise ValueError(f"row status must be one of {STATUSES}, got {status!r}")
    return {
        "section": section,
        "case": case,
        "status": status,
        "measured": measured,
        "reference": reference,
        "ratio": ratio,
        "note": note,
        "data": data or {},
    }


@dataclasses.dataclass(frozen=True)
class Deadline:
    end_seconds: float  # on `clock`
    clock: Callable[[], float] = time.monotonic

    def remaining(self) -> float:
        return self.end_seconds - self.clock()


def run_command(
    argv: list[str],
    *,
    timeout_seconds: float,
    grace_seconds: float,
    cwd: Path | None = None,
    own_group: bool = False,
) -> tuple[int | None, bool, str]:
    """(exit code, timed out, the output's last 4000 characters); the code is None when it had
    to be killed. SIGTERM at timeout - grace so the command can clean up (batchgate run stops
    its server), SIGKILL at the timeout: the call does not outlive timeout_seconds by much.
    own_group: the command gets its own process group and the signals go to the whole group
    (a section child and whatever it started); otherwise to the command alone, which stays in
    the caller's group so that killing the caller's group reaches it too."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=own_group,
    ) as proc:

        def send(sig: int) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig) if own_group else proc.send_signal(sig)

        try:
            out, _ = proc.communicate(timeout=max(0.1, timeout_seconds - grace_seconds))
            return proc.returncode, False, out[-4000:]
        except subprocess.TimeoutExpired:
            send(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=max(0.1, grace_seconds))
            return proc.returncode, True, out[-4000:]
        except subprocess.TimeoutExpired:
            send(signal.SIGKILL)
        try:  # a grandchild of its own session may still hold the pipe: do not wait for it
            out, _ = proc.communicate(timeout=5.0)
        except subprocess.TimeoutExpired:
            out = ""
        return None, True, out[-4000:]


# -- sections and their budgets --------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class SectionSpec:
    name: str  # a key of gpu_sections.SECTION_FUNCTIONS
    budget_seconds: float  # the child is killed here; its rows so far are kept
    quick_budget_seconds: float


# In the order they run. The budgets add up to 460 s, under TOTAL_BUDGET_SECONDS; the smoke run
# gets the most because it starts a server and calibrates it (79-89 s on a 2-core CPU box).
SECTIONS: tuple[SectionSpec, ...] = (
    SectionSpec(name="gpu_tests", budget_seconds=60, quick_budget_seconds=30),
    SectionSpec(name="decode", budget_seconds=110, quick_budget_seconds=90),
    SectionSpec(name="mixed", budget_seconds=75, quick_budget_seconds=90),
    SectionSpec(name="smoke", budget_seconds=170, quick_budget_seconds=30),
    SectionSpec(name="memory", budget_seconds=45, quick_budget_seconds=30),
)
TOTAL_BUDGET_SECONDS = 470.0  # 8 minutes less the device probe and the table
QUICK_TOTAL_BUDGET_SECONDS = 300.0
MIN_SECTION_SECONDS = 15.0  # less than this left: the section is reported "not run"
# The child's own deadline is this much before its kill, so it reports its remaining cases as
# "not run" (and stops what it started) instead of being killed mid-row.
CHILD_GRACE_SECONDS = 10.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class Launched:
    rows: list[dict[str, Any]]
    exit_code: int | None  # None: killed
    timed_out: bool
    output_tail: str


Launch = Callable[[SectionSpec, float], Launched]


def run_sections(
    specs: tuple[SectionSpec, ...] | list[SectionSpec],
    *,
    total_seconds: float,
    quick: bool,
    launch: Launch,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run each section under min(its budget, what is left of the total); (rows, timings).
    A section that crashed, was killed or said nothing gets a failed row saying so; one that
    no longer fits gets a "not run" row, so the whole never overruns."""
    deadline = Deadline(clock() + total_seconds, clock)
    rows: list[dict[str, Any]] = []
    timings: list[dict[str, Any]] = []
    for spec in specs:
        left = deadline.remaining()
        if left < MIN_SECTION_SECONDS:
            note = f"out of time: {max(left, 0):.0f} s of the total left"
            rows.append(make_row(spec.name, "(section)", "not run", note=note))
            timings.append({"section": spec.name, "budget_seconds": 0.0, "elapsed_seconds": 0.0})
            continue
        budget = min(spec.quick_budget_seconds if quick else spec.budget_seconds, left)
        started = clock()
        try:
            result = launch(spec, budget)
        except Exception as exc:  # the launcher itself broke: report it, go on with the rest
            result = Launched(rows=[], exit_code=None, timed_out=False, output_tail=repr(exc))
        elapsed = clock() - started
        section_rows = list(result.rows)
        problem = None
        if result.timed_out:
            problem = f"killed at its {budget:.0f} s budget"
        elif result.exit_code != 0:
            tail = result.output_tail.strip().splitlines()[-3:]
            problem = f"exit {result.exit_code}: " + " | ".join(tail)
        elif not section_rows:
            problem = "no rows"
        if problem:
            section_rows.append(make_row(spec.name, "(section)", "failed", note=problem))
        rows.extend(section_rows)
        timings.append({"section": spec.name, "budget_seconds": budget, "elapsed_seconds": elapsed})
    return rows, timings


def launch_child(
    spec: SectionSpec,
    budget_seconds: float,
    *,
    device: str,
    quick: bool,
    work_dir: Path,
    runs_dir: Path,
) -> Launched:
    rows_path = work_dir / f"{spec.name}.rows.jsonl"
    seconds = budget_seconds - CHILD_GRACE_SECONDS
    argv = [
        sys.executable,
        "-m",
        "benchmarks.gpu_sections",
        f"--section={spec.name}",
        f"--rows-out={rows_path}",
        f"--seconds={seconds:.1f}",
        f"--device={device}",
        f"--work-dir={work_dir}",
        f"--runs-dir={runs_dir}",
        *(["--quick"] if quick else []),
    ]
    # SIGTERM halfway through the grace: the child's own deadline has passed by then.
    code, timed_out, tail = run_command(
        argv,
        timeout_seconds=budget_seconds,
        cwd=REPO_ROOT,
        grace_seconds=CHILD_GRACE_SECONDS / 2,
        own_group=True,
    )
    rows = []
    if rows_path.exists():
        rows = [json.loads(line) for line in rows_path.read_text().splitlines() if line.strip()]
    return Launched(rows=rows, exit_code=code, timed_out=timed_out, output_tail=tail)


# -- the table -------------------------------------------------------------------------------

_COLUMNS = {"section": 9, "case": 30, "status": 7, "measured": 34, "reference": 27, "ratio": 7}


def format_table(rows: list[dict[str, Any]]) -> str:
    """Fixed-width columns, the note last (it is as long as it needs to be)."""

    def cell(row: dict[str, Any], key: str) -> str:
        if key == "ratio":
            return "" if row.get("ratio") is None else f"{row['ratio']:.3g}"
        return str(row.get(key, ""))

    header = " ".join(f"{name:<{width}}" for name, width in _COLUMNS.items()) + " note"
    lines = [header, "-" * len(header)]
    for row in rows:
        lines.append(
            " ".join(f"{cell(row, name):<{width}}" for name, width in _COLUMNS.items())
            + " "
            + str(row.get("note", ""))
        )
    return "\n".join(line.rstrip() for line in lines)


def exit_code_for(rows: list[dict[str, Any]]) -> int:
    return 1 if any(row["status"] == "failed" for row in rows) else 0


# -- the command -----------------------------------------------------------------------------


def probe_device(device: str) -> dict[str, Any]:
    """What the device is, asked of a child process (this one never initialises CUDA)."""
    argv = [sys.executable, "-m", "benchmarks.gpu_sections", "--probe", "--device", device]
    code, timed_out, tail = run_command(argv, timeout_seconds=120, grace_seconds=5, cwd=REPO_ROOT)
    lines = [line for line in tail.splitlines() if line.startswith("{")]
    if code != 0 or timed_out or not lines:
        return {"cuda": False, "reason": f"device probe failed (exit {code}): {tail[-300:]}"}
    return json.loads(lines[-1])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="auto and cuda: stop with exit 0 when there is no CUDA; cpu: run anyway",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny model, small sizes, no pytest or batchgate run (the test hook)",
    )
    p.add_argument(
        "--sections",
        default=",".join(s.name for s in SECTIONS),
        help="comma-separated subset, in the table's order",
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="the JSON file")
    p.add_argument("--runs-dir", type=Path, default=REPO_ROOT / "runs", help="smoke run dirs")
    args = p.parse_args(argv)
    names = args.sections.split(",")
    unknown = [n for n in names if n not in {s.name for s in SECTIONS}]
    if unknown:
        p.error(f"unknown sections {unknown}")
    args.specs = tuple(s for s in SECTIONS if s.name in names)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    info = probe_device(args.device)
    if args.device != "cpu" and not info.get("cuda"):
        print(
            f"gpu_check: no CUDA device ({info.get('reason')}); nothing run, exit 0. "
            "Use --device cpu to run the CPU-runnable parts here."
        )
        return 0
    device = "cpu" if args.device == "cpu" else "cuda"
    print(
        f"gpu_check: {info.get('name', device)}, torch {info.get('torch')}, "
        f"peak bandwidth {info.get('bandwidth_source', 'n/a')}",
        flush=True,
    )
    total = QUICK_TOTAL_BUDGET_SECONDS if args.quick else TOTAL_BUDGET_SECONDS
    total -= time.monotonic() - started
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:

        def launch(spec: SectionSpec, budget: float) -> Launched:
            print(f"  {spec.name}: up to {budget:.0f} s ...", flush=True)
            return launch_child(
                spec,
                budget,
                device=device,
                quick=args.quick,
                work_dir=Path(tmp),
                runs_dir=args.runs_dir,
            )

        rows, timings = run_sections(
            args.specs, total_seconds=total, quick=args.quick, launch=launch
        )
    code = exit_code_for(rows)
    print()
    print(format_table(rows))
    not_run = sum(row["status"] == "not run" for row in rows)
    elapsed = time.monotonic() - started
    print(
        f"\n{elapsed:.0f} s; {sum(r['status'] == 'failed' for r in rows)} failed, "
        f"{not_run} not run (out of time); exit {code}"
    )
    report = {
        "tool": "gpu_check",
        "device": device,
        "device_info": info,
        "quick": args.quick,
        "total_budget_seconds": total,
        "elapsed_seconds": elapsed,
        "sections": timings,
        "rows": rows,
        "exit_code": code,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
