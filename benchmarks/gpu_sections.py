"""What each section of benchmarks/gpu_check.py measures, and the child-process entry point
that runs one section (or probes the device) and writes its rows as JSON lines.

    python -m benchmarks.gpu_sections --section=decode --rows-out=F --seconds=100 --device=cuda
    python -m benchmarks.gpu_sections --probe --device=auto

A section is a generator of table rows; its cases check the section's deadline before they
start and report "not run" once it is spent. Rows are written as they come, so a section killed
at its budget keeps what it measured. Torch and the reused benchmarks (bench_model_step,
bench_engine) are imported inside the functions. It knows nothing of the total budget or the JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.gpu_check import (
    REPO_ROOT,
    Deadline,
    decode_bytes_per_step,
    make_row,
    peak_bandwidth,
    roofline_values,
    run_command,
)

__all__ = ["SECTION_FUNCTIONS", "Context", "main", "summarize_junit", "summarize_smoke_run"]

MIN_CASE_SECONDS = 5.0  # a case started with less left would be killed mid-way, not reported
_GIB = 1024**3


@dataclasses.dataclass(frozen=True, kw_only=True)
class Context:
    device: str  # "cuda" or "cpu"
    quick: bool  # small models and sizes: the CPU test hook
    deadline: Deadline
    work_dir: Path  # scratch files (junit XML)
    runs_dir: Path  # where the smoke run's run directory is kept
    repo_root: Path = REPO_ROOT


def _free_device_memory() -> None:
    # The next section case builds a new runner; the caching allocator would otherwise keep the
    # last one's blocks and shrink the next KV budget, which is sized from free memory.
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _out_of_time(section: str, case: str, deadline: Deadline) -> dict[str, Any]:
    left = max(0.0, deadline.remaining())
    return make_row(section, case, "not run", note=f"out of time ({left:.0f} s of the budget left)")


def _error(section: str, case: str, exc: BaseException) -> dict[str, Any]:
    return make_row(section, case, "failed", note=f"{type(exc).__name__}: {exc}"[:300])


# -- gpu-marked tests -----------------------------------------------------------------------


def summarize_junit(path: Path) -> dict[str, Any]:
    """Counts and skip reasons from pytest's JUnit XML."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors")}
    counts["skipped"] = sum(int(s.get("skipped", 0)) for s in suites)
    skips = sorted({e.get("message", "") for e in root.iter("skipped")})
    failed = [
        f"{case.get('classname', '')}::{case.get('name', '')}"
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    return {**counts, "skip_reasons": skips, "failed_tests": failed}


def run_gpu_tests(ctx: Context) -> Iterator[dict[str, Any]]:
    if ctx.quick:
        note = "--quick: collecting the tests alone takes ~8 s"
        yield make_row("gpu_tests", "pytest -m gpu", "skipped", note=note)
        return
    junit = ctx.work_dir / "gpu_tests.xml"
    pytest = ["-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "tests"]
    argv = [sys.executable, *pytest, f"--junitxml={junit}"]
    code, timed_out, tail = run_command(
        argv, timeout_seconds=ctx.deadline.remaining(), grace_seconds=5.0, cwd=ctx.repo_root
    )
    if not junit.exists():
        why = "timed out" if timed_out else f"exit {code}"
        yield make_row("gpu_tests", "pytest -m gpu", "failed", note=f"{why}: {tail[-300:]}")
        return
    s = summarize_junit(junit)
    passed = s["tests"] - s["failures"] - s["errors"] - s["skipped"]
    ok = code == 0 and passed > 0 and not timed_out
    notes = [f"FAILED {t}" for t in s["failed_tests"][:5]]
    notes += [f"skipped: {r}" for r in s["skip_reasons"]]
    yield make_row(
        "gpu_tests",
        "pytest -m gpu",
        "ok" if ok else "failed",
        measured=f"{passed} passed, {s['failures'] + s['errors']} failed, {s['skipped']} skipped",
        note="; ".join(["timed out"] * timed_out + notes),
        data={**s, "exit_code": code},
    )


# -- decode throughput vs the HBM roofline ---------------------------------------------------


def run_decode(ctx: Context) -> Iterator[dict[str, Any]]:
    import torch

    from benchmarks.bench_model_step import bench_decode
    from reference_server.model_runner import ModelRunner

    presets, batches = (("tiny",), (1, 8)) if ctx.quick else (("100m", "1b"), (1, 8, 64))
    context, steps = (32, 6) if ctx.quick else (200, 40)
    if ctx.device == "cuda":
        bandwidth, source = peak_bandwidth(torch.cuda.get_device_name())
    else:
        bandwidth, source = None, "cpu: no HBM spec to compare with"
    for preset in presets:
        cases = [f"{preset} batch {b}" for b in batches]
        if ctx.deadline.remaining() < MIN_CASE_SECONDS:
            yield from (_out_of_time("decode", c, ctx.deadline) for c in cases)
            continue
        try:
            # bench_model_step gives each sequence its prompt plus 64 tokens of blocks.
            blocks_each = (context + 64 + 15) // 16
            runner = ModelRunner(
                model=preset,
                device=ctx.device,
                max_model_len=1024,
                num_kv_blocks_override=max(batches) * blocks_each,
            )
        except Exception as exc:
            yield from (_error("decode", c, exc) for c in cases)
            continue
        for batch, case in zip(batches, cases, strict=True):
            if ctx.deadline.remaining() < MIN_CASE_SECONDS:
                yield _out_of_time("decode", case, ctx.deadline)
                continue
            try:
                result = bench_decode(runner, batch, context, steps)
            except Exception as exc:
                yield _error("decode", case, exc)
                continue
            # Contexts at the middle decode step: the prompt, its first token, half the steps.
            per_step = decode_bytes_per_step(
                runner.model_config,
                dtype_bytes=runner.kv_cache.kv.element_size(),
                context_lens=[context + 1 + steps // 2] * batch,
            )
            tps = result["tokens_per_second"]
            roof = roofline_values(
                batch=batch, tokens_per_second=tps, bytes_per_step=per_step, bandwidth=bandwidth
            )
            ceiling = roof["roofline_tokens_per_second"]
            yield make_row(
                "decode",
                case,
                "ok",
                measured=f"{tps:,.0f} tok/s",
                reference="n/a" if ceiling is None else f"roofline {ceiling:,.0f} tok/s",
                ratio=roof["roofline_ratio"],
                note=f"{per_step / 1e6:,.1f} MB/step read at "
                f"{roof['achieved_bytes_per_second'] / 1e9:,.1f} GB/s; "
                + (source if ceiling is not None else f"roofline n/a: {source}"),
                data={
                    **result,
                    **roof,
                    "bytes_per_step": per_step,
                    "peak_bandwidth": bandwidth,
                    "bandwidth_source": source,
                    "dtype": str(runner.dtype),
                },
            )
        del runner
        _free_device_memory()


# -- continuous vs static on the mixed workload ----------------------------------------------


def run_mixed(ctx: Context) -> Iterator[dict[str, Any]]:
    from benchmarks import bench_engine
    from reference_server import Engine

    argv = ["--no-hf", "--arrival-rate", "0", "--model", "tiny" if ctx.quick else "100m"]
    if ctx.quick:
        argv += ["--requests=8", "--short-tokens=4", "--long-tokens=16", "--max-num-seqs=4"]
    args = bench_engine.parse_args(argv)
    workload = bench_engine.make_workload(args, 0.0)
    tokens_per_second: dict[str, float] = {}
    for policy in ("continuous", "static"):
        case = f"{args.model} {policy}, {len(workload)} requests"
        if ctx.deadline.remaining() < MIN_CASE_SECONDS:
            yield _out_of_time("mixed", case, ctx.deadline)
            continue
        try:
            config = dataclasses.replace(
                bench_engine._engine_config(args, policy), device=ctx.device
            )
            engine = Engine(config)
            try:
                bench_engine._warm_up(engine)
                result = bench_engine._drive(engine, policy, workload)
            finally:
                engine.close()
                del engine
                _free_device_memory()
        except Exception as exc:
            yield _error("mixed", case, exc)
            continue
        tps = tokens_per_second[policy] = result["output_tokens_per_second"]
        made, expected = result["output_tokens"], result["expected_output_tokens"]
        short = "" if made == expected else f"; only {made} of {expected} tokens"
        yield make_row(
            "mixed",
            case,
            "ok" if made == expected else "failed",
            measured=f"{tps:,.0f} tok/s",
            note=f"{result['wall_seconds']:.1f} s, {result['num_steps']} steps, "
            f"max running {result['max_running']}, KV peak {result['kv_peak_usage_pct']:.1f}%"
            + short,
            data=result,
        )
    if len(tokens_per_second) == 2:
        ratio = tokens_per_second["continuous"] / tokens_per_second["static"]
        note = "bench_engine's capacity target is >= 2x"
        yield make_row("mixed", "continuous / static", "ok", ratio=ratio, note=note)


# -- batchgate run --scale smoke with the NVML sampler ---------------------------------------


def summarize_smoke_run(
    run_dir: Path, *, exit_code: int | None, timed_out: bool, output_tail: str, expect_nvml: bool
) -> dict[str, Any]:
    """One row from a finished (or cut short) smoke run directory."""
    from gate.rundir.run import load_run

    case = "batchgate run --scale smoke"
    head = "timed out" if timed_out else f"exit {exit_code}"
    if not (run_dir / "manifest.json").exists():
        return make_row("smoke", case, "failed", measured=head, note=output_tail[-300:])
    run = load_run(run_dir)
    samples = [r for p in run.profiles.values() for r in (p.gpu or [])]
    sources = sorted({str(r.get("source")) for r in samples})
    used = [r for r in samples if isinstance(r.get("memory_used_bytes"), int)]
    peak = max(used, key=lambda r: r["memory_used_bytes"], default=None)
    verdicts_path = run_dir / "verdicts.json"
    verdicts = json.loads(verdicts_path.read_text()) if verdicts_path.exists() else {}
    counts = verdicts.get("counts", {})
    failed = [v["gate"] for v in verdicts.get("verdicts", []) if v.get("status") == "fail"]
    reference, ratio = "no memory samples", None
    if peak is not None:
        total = peak.get("memory_total_bytes")
        ratio = peak["memory_used_bytes"] / total if total else None
        reference = f"peak {peak['memory_used_bytes'] / _GIB:.2f} GiB" + (
            f" of {total / _GIB:.0f} GiB" if total else ""
        )
    problems = [] if exit_code == 0 and not timed_out else [head]
    if expect_nvml and sources != ["nvml"]:
        problems.append(f"sampler sources {sources}, expected nvml only")
    notes = [f"sources {','.join(sources) or 'none'}", f"run dir {run_dir}"]
    if failed:
        notes.insert(0, "failed gates: " + ", ".join(failed[:6]))
    return make_row(
        "smoke",
        case,
        "failed" if problems else "ok",
        measured=f"{head}: {counts.get('pass', 0)} pass, {counts.get('fail', 0)} fail, "
        f"{counts.get('no_data', 0)} no data",
        reference=reference,
        ratio=ratio,
        note="; ".join(problems + notes),
        data={
            "exit_code": exit_code,
            "timed_out": timed_out,
            "counts": counts,
            "failed_gates": failed,
            "sampler_sources": sources,
            "run_dir": str(run_dir),
            "peak_sample": peak,
            "ended": (run.manifest or {}).get("ended"),
        },
    )


def run_smoke(ctx: Context) -> Iterator[dict[str, Any]]:
    if ctx.quick:
        return (yield make_row("smoke", "batchgate run --scale smoke", "skipped",
                               note="--quick: a smoke run takes minutes"))  # fmt: skip
    run_id = f"gpu-check-{time.strftime('%Y%m%d-%H%M%S')}"
    profiles = "--profile=night_trickle,burst,mixed_lengths"  # the suite: 4 min on 2 CPUs
    run = ["run", "--scale=smoke", profiles, f"--out={ctx.runs_dir}", f"--run-id={run_id}"]
    argv = [sys.executable, "-m", "gate.cli", *run, f"--server-arg=--device={ctx.device}"]
    # batchgate run needs up to ~20 s after SIGTERM: it drains, then kills, its server.
    code, timed_out, tail = run_command(
        argv, timeout_seconds=ctx.deadline.remaining(), grace_seconds=25.0, cwd=ctx.repo_root
    )
    nvml = ctx.device == "cuda"
    run_dir = ctx.runs_dir / run_id
    yield summarize_smoke_run(
        run_dir, exit_code=code, timed_out=timed_out, output_tail=tail, expect_nvml=nvml
    )


# -- peak device memory vs the KV budget -----------------------------------------------------


def run_memory(ctx: Context) -> Iterator[dict[str, Any]]:
    case = "peak allocated vs budget"
    if ctx.device != "cuda":
        yield make_row("memory", case, "skipped", note="the CUDA allocator's peak; none on cpu")
        return
    import random

    import torch

    from benchmarks import bench_engine
    from reference_server import Engine, EngineConfig

    utilization = EngineConfig().gpu_memory_utilization  # the server's default share
    free_bytes, total_bytes = torch.cuda.mem_get_info()
    torch.cuda.reset_peak_memory_stats()
    # Long prompts in full 2048-token prefill chunks, then 64 decodes over ~1.9k-token contexts:
    # the largest activations the runner's reserve (model_runner._kv_budget_bytes) must cover.
    rng = random.Random(0)
    workload = [
        bench_engine.Request(f"m{i}", [rng.randrange(256) for _ in range(1800)], 64, 0.0, True)
        for i in range(64)
    ]
    try:
        engine = Engine(EngineConfig(model="100m", device="cuda", max_model_len=2048))
        try:
            result = bench_engine._drive(engine, "continuous", workload)
            stats = engine.runner.memory_stats()
        finally:
            engine.close()
    except Exception as exc:
        yield _error("memory", case, exc)
        return
    peak_reserved = torch.cuda.max_memory_reserved()
    weights, kv = stats["model_weights_bytes"], stats["kv_cache_bytes"]
    # The runner's promise: beyond the weights, KV pool + activations stay within `utilization`
    # of the memory that was free once the weights were loaded.
    limit = weights + utilization * (free_bytes - weights)
    other = stats["device_memory_peak_bytes"] - weights - kv
    yield make_row(
        "memory",
        case,
        "ok" if peak_reserved <= limit else "failed",
        measured=f"{stats['device_memory_peak_bytes'] / _GIB:.2f} GiB "
        f"(reserved {peak_reserved / _GIB:.2f})",
        reference=f"limit {limit / _GIB:.2f} GiB",
        ratio=peak_reserved / limit,
        note=f"KV pool {kv / _GIB:.2f} GiB, weights {weights / _GIB:.2f}, activations and "
        f"other {other / _GIB:.2f}; {utilization:g} of {free_bytes / _GIB:.1f} GiB free of "
        f"{total_bytes / _GIB:.0f}; KV peak use {result['kv_peak_usage_pct']:.1f}%",
        data={
            **stats,
            "device_memory_peak_reserved_bytes": peak_reserved,
            "limit_bytes": limit,
            "free_bytes_before": free_bytes,
            "total_bytes": total_bytes,
            "gpu_memory_utilization": utilization,
            "workload": result,
        },
    )


SECTION_FUNCTIONS: dict[str, Callable[[Context], Iterator[dict[str, Any]]]] = {
    "gpu_tests": run_gpu_tests,
    "decode": run_decode,
    "mixed": run_mixed,
    "smoke": run_smoke,
    "memory": run_memory,
}


def probe(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "cuda_build": torch.version.cuda}
    if device == "cpu" or not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        why = (
            "--device cpu" if device == "cpu" else f"torch {torch.__version__}, {build}, sees none"
        )
        return {**info, "cuda": False, "reason": why, "name": "cpu"}
    props = torch.cuda.get_device_properties(0)
    bandwidth, source = peak_bandwidth(props.name)
    return {
        **info,
        "cuda": True,
        "name": props.name,
        "total_memory_bytes": props.total_memory,
        "capability": f"{props.major}.{props.minor}",
        "peak_bandwidth": bandwidth,
        "bandwidth_source": source,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--probe", action="store_true", help="print the device as one JSON line")
    p.add_argument("--section", choices=sorted(SECTION_FUNCTIONS))
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--seconds", type=float, default=60.0, help="this section's deadline")
    p.add_argument("--rows-out", type=Path)
    p.add_argument("--work-dir", type=Path, default=Path("."))
    p.add_argument("--runs-dir", type=Path, default=REPO_ROOT / "runs")
    args = p.parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.device)), flush=True)
        return 0
    if args.section is None or args.rows_out is None or args.device == "auto":
        p.error("--section, --rows-out and --device cuda|cpu are needed (or --probe)")
    ctx = Context(
        device=args.device,
        quick=args.quick,
        deadline=Deadline(time.monotonic() + args.seconds),
        work_dir=args.work_dir,
        runs_dir=args.runs_dir,
    )
    with args.rows_out.open("a", encoding="utf-8") as out:
        for row in SECTION_FUNCTIONS[args.section](ctx):
            out.write(json.dumps(row, default=str) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
