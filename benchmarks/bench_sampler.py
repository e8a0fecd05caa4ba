"""Sampler CPU overhead at a given rate (target: <= 2% of one core at 50 Hz).

Runs the device-memory sampler for a fixed time against (a) a fake NVML with one device and the
server PID visible (the per-tick work of the NVML path minus the driver calls), (b) the
process-RSS fallback on a real child process, and (c) the real NVML when this machine has one.
CPU is this process's user+system time over the run while the main thread only waits, so it is
the sampler thread's cost (plus the JSONL writes). Prints a table and writes
benchmarks/results/sampler.json.

    .venv/bin/python -m benchmarks.bench_sampler [--hz 50] [--seconds 10]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

from benchmarks.harness import REPO_ROOT, RESULTS_DIR, write_result
from gate.observers.nvml_sampler import NvmlSampler, SamplerConfig

TARGET_CORE_RATIO = 0.02
FAKE_PYNVML = REPO_ROOT / "tests" / "gate" / "observers" / "fake_pynvml.py"


def fake_pynvml() -> ModuleType:
    """The sampler tests' fake NVML, loaded from its file: tests/ is not a package."""
    spec = importlib.util.spec_from_file_location("fake_pynvml", FAKE_PYNVML)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {FAKE_PYNVML}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def measure(name: str, config: SamplerConfig, nvml: object | None) -> dict:
    sampler = NvmlSampler(config, nvml=nvml)
    cpu0, wall0 = time.process_time(), time.monotonic()
    sampler.start()
    sampler.wait(config.duration_seconds + 30)
    summary = sampler.stop()
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    samples = summary.samples_written
    return {
        "case": name,
        "source": sampler.source,
        "hz": config.hz,
        "seconds": round(wall, 3),
        "samples": samples,
        "achieved_hz": round(samples / wall, 2) if wall else None,
        "cpu_seconds": round(cpu, 4),
        "core_ratio": round(cpu / wall, 5) if wall else None,
        "cpu_ms_per_sample": round(1000 * cpu / samples, 4) if samples else None,
        "late_ticks": summary.extra.get("late_ticks"),
        "errors": summary.errors,
        "pass": bool(wall and cpu / wall <= TARGET_CORE_RATIO),
    }


def real_nvml_available() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return count > 0
    except Exception:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hz", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "sampler.json")
    args = parser.parse_args()

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:

            def cfg(tag: str, **kw: object) -> SamplerConfig:
                return SamplerConfig(
                    out_path=Path(tmp) / f"{tag}.jsonl",
                    pid=child.pid,
                    hz=args.hz,
                    duration_seconds=args.seconds,
                    **kw,
                )

            fake = fake_pynvml()
            device = fake.FakeDevice(accounting=True)
            device.set_process_memory(child.pid, 2**30)
            nvml = fake.FakeNVML([device])
            results.append(measure("fake NVML, 1 device, pid + accounting", cfg("fake"), nvml))
            results.append(measure("process RSS fallback", cfg("rss", use_nvml=False), None))
            if real_nvml_available():
                results.append(measure("real NVML, all devices", cfg("real"), None))
    finally:
        child.kill()
        child.wait()

    header = (
        f"{'case':<40} {'source':<12} {'Hz':>5} {'samples':>8} {'got Hz':>7} "
        f"{'CPU %core':>9} {'ms/sample':>9} {'<=2%':>5}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['case']:<40} {r['source']:<12} {r['hz']:>5g} {r['samples']:>8} "
            f"{r['achieved_hz']:>7} {100 * r['core_ratio']:>8.2f}% {r['cpu_ms_per_sample']:>9} "
            f"{'yes' if r['pass'] else 'NO':>5}"
        )
    record = {
        "benchmark": "sampler_overhead",
        "target_core_ratio": TARGET_CORE_RATIO,
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count()},
        "results": results,
    }
    write_result(args.out, record)
    print(f"wrote {args.out}")
    return 0 if all(r["pass"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
