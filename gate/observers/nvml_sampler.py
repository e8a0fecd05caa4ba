"""The device-memory sampler: NVML per device, or the server's resident memory without a GPU.

Owns choosing the source (NVML when it initialises and sees a device, else the server process's
RSS, else a single `source: "none"` record saying why), sampling it at a fixed rate, and writing
`gpu.jsonl` records (docs/records.md). What each source can and cannot see is in
docs/observers.md: NVML memory readings are instantaneous, so between samples only the
accounting-mode `maxMemoryUsage` (per process, lifetime) catches a spike; without a GPU, Linux's
`VmHWM` plays that role for RSS. It does not know about windows, gates or other observers.
The NVML module is injectable (tests pass a fake; production imports `pynvml`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any

from gate.observers.observer import JsonlWriter, ObserverConfigError, PeriodicObserver
from gate.observers.process_memory import ProcessGone, ProcessTree

__all__ = ["NvmlSampler", "SamplerConfig"]

MAX_HZ = 1000.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplerConfig:
    out_path: Path
    pid: int | None = None  # the server process; None samples devices only
    hz: float = 50.0
    devices: tuple[int, ...] | None = None  # NVML indices; None = every device
    duration_seconds: float | None = None  # stop by itself after this long
    include_children: bool = True  # count the server's child processes too
    use_nvml: bool = True  # False forces the process_rss fallback

    def __post_init__(self) -> None:
        if not isinstance(self.out_path, Path):
            object.__setattr__(self, "out_path", Path(self.out_path))
        if isinstance(self.hz, bool) or not (
            isinstance(self.hz, (int, float)) and 0 < self.hz <= MAX_HZ
        ):
            raise ObserverConfigError(f"sampler: hz must be in (0, {MAX_HZ:g}], got {self.hz!r}")
        if self.pid is not None and (
            isinstance(self.pid, bool) or not isinstance(self.pid, int) or self.pid <= 0
        ):
            raise ObserverConfigError(f"sampler: pid must be a positive integer, got {self.pid!r}")
        if self.out_path.is_dir():
            raise ObserverConfigError(f"sampler: {self.out_path} is a directory, not a file")
        if self.duration_seconds is not None and not self.duration_seconds > 0:
            raise ObserverConfigError(
                f"sampler: duration_seconds must be > 0, got {self.duration_seconds!r}"
            )
        if self.devices is not None:
            if not self.devices or any(not isinstance(d, int) or d < 0 for d in self.devices):
                raise ObserverConfigError(
                    f"sampler: devices must be non-negative integers, got {self.devices!r}"
                )
            object.__setattr__(self, "devices", tuple(self.devices))


@dataclasses.dataclass
class _Device:
    index: int
    handle: Any
    accounting: bool
    unsupported: set[str] = dataclasses.field(default_factory=set)
    peak_memory_used_bytes: int | None = None
    peak_process_memory_bytes: int | None = None
    process_memory_max_bytes: int | None = None


class NvmlSampler(PeriodicObserver):
    """Samples device (or process) memory into gpu.jsonl at `config.hz`."""

    name = "gpu_sampler"

    def __init__(self, config: SamplerConfig, *, nvml: Any = None) -> None:
        super().__init__(interval_seconds=1.0 / config.hz)
        self.config = config
        self._nvml_override = nvml
        self._nvml: Any = None
        self._writer = JsonlWriter(config.out_path)
        self._tree: ProcessTree | None = None
        self._devices: list[_Device] = []
        self._source = "none"
        self._rss_note: str | None = None
        self._started_mono = 0.0
        self._peak_rss_bytes: int | None = None
        self._rss_high_water_bytes: int | None = None

    @property
    def source(self) -> str:
        return self._source

    # -- choosing the source --------------------------------------------------------------
    def setup(self) -> None:
        self._started_mono = time.monotonic()
        pid_problem = None
        if self.config.pid is not None:
            try:
                self._tree = ProcessTree(
                    self.config.pid, include_children=self.config.include_children
                )
            except ProcessGone as exc:
                pid_problem = str(exc)
        nvml_problem = self._init_nvml() if self.config.use_nvml else "NVML disabled by config"
        if nvml_problem is None:
            self._source = "nvml"
            if pid_problem:
                self.summary.add_note(f"{pid_problem}; per-process memory not sampled")
        elif self._tree is not None:
            self._source = "process_rss"
            scope = "and its child processes" if self.config.include_children else "only"
            self._rss_note = (
                f"{nvml_problem}; memory_used_bytes is the resident memory of process "
                f"{self.config.pid} {scope}"
            )
            self.summary.add_note(self._rss_note)
        else:
            reason = nvml_problem
            reason += f"; {pid_problem}" if pid_problem else "; no server PID to fall back to"
            self._source = "none"
            self._write(
                {
                    "t": time.time(),
                    "source": "none",
                    "device": None,
                    "memory_used_bytes": None,
                    "memory_total_bytes": None,
                    "utilization_ratio": None,
                    "power_watts": None,
                    "process_memory_bytes": None,
                    "process_memory_max_bytes": None,
                    "note": f"cannot sample: {reason}",
                }
            )
            self.summary.add_note(f"cannot sample: {reason}")
            self.request_stop()
        self.summary.extra["source"] = self._source

    def _init_nvml(self) -> str | None:
        """Initialises NVML and lists devices; returns why not, or None on success."""
        try:
            if self._nvml_override is not None:
                nvml = self._nvml_override
            else:
                import pynvml as nvml
            nvml.nvmlInit()
        except Exception as exc:  # ImportError, NVMLError(LibraryNotFound / DriverNotLoaded)
            return f"NVML unavailable ({type(exc).__name__}: {exc})"
        self._nvml = nvml
        try:
            count = int(nvml.nvmlDeviceGetCount())
            if count == 0:
                raise LookupError("NVML sees no devices")
            wanted = self.config.devices if self.config.devices is not None else range(count)
            missing = [i for i in wanted if i >= count]
            if missing:
                raise LookupError(f"device index {missing} not present (NVML sees {count})")
            enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
            for index in wanted:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                try:
                    accounting = nvml.nvmlDeviceGetAccountingMode(handle) == enabled
                except Exception:
                    accounting = False
                self._devices.append(_Device(index=index, handle=handle, accounting=accounting))
        except Exception as exc:
            self._shutdown_nvml()
            self._devices = []
            return f"NVML unusable ({type(exc).__name__}: {exc})"
        if self._tree is not None and not any(d.accounting for d in self._devices):
            self.summary.add_note(
                "NVML accounting mode is off: process memory peaks between samples are not "
                "visible (enable with `nvidia-smi -am 1` as root)"
            )
        return None

    def _shutdown_nvml(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None

    # -- sampling -------------------------------------------------------------------------
    def tick(self) -> None:
        try:
            self.sample_once()
        finally:  # a sample that failed (counted by the loop) must not outlive --duration
            if (
                self.config.duration_seconds is not None
                and time.monotonic() - self._started_mono >= self.config.duration_seconds
            ):
                self.request_stop()

    def sample_once(self) -> list[dict[str, Any]]:
        """Takes one sample of every source, writes and returns the records."""
        if self._source == "nvml":
            records = self._sample_nvml()
        elif self._source == "process_rss":
            records = self._sample_rss()
        else:
            return []
        for record in records:
            self._write(record)
        return records

    def _sample_rss(self) -> list[dict[str, Any]]:
        if self._tree is None:  # setup() only picks process_rss with a tree
            return []
        try:
            rss, hwm = self._tree.memory_bytes()
        except ProcessGone as exc:
            self._process_gone(str(exc))
            return []
        self._peak_rss_bytes = (
            rss if self._peak_rss_bytes is None else max(self._peak_rss_bytes, rss)
        )
        if hwm is not None:
            self._rss_high_water_bytes = hwm
        return [
            {
                "t": time.time(),
                "source": "process_rss",
                "device": None,
                "memory_used_bytes": rss,
                "memory_total_bytes": None,
                "utilization_ratio": None,
                "power_watts": None,
                "process_memory_bytes": None,
                "process_memory_max_bytes": hwm,
                "note": self._rss_note,
            }
        ]

    def _sample_nvml(self) -> list[dict[str, Any]]:
        pids: set[int] = set()
        if self._tree is not None:
            if not self._tree.alive():
                self._process_gone(f"process {self.config.pid} exited")
                return []
            pids = self._tree.pids()
        records = []
        for dev in self._devices:
            now = time.time()
            notes: list[str] = []
            mem = self._call(dev, "memory", self._nvml.nvmlDeviceGetMemoryInfo, dev.handle)
            util = self._call(
                dev, "utilization", self._nvml.nvmlDeviceGetUtilizationRates, dev.handle
            )
            power_mw = self._call(dev, "power", self._nvml.nvmlDeviceGetPowerUsage, dev.handle)
            proc_bytes = proc_max = None
            if pids:
                proc_bytes = self._process_memory(dev, pids)
                if proc_bytes is None and "processes" not in dev.unsupported:
                    notes.append(
                        f"PID {self.config.pid} not among NVML's compute processes on device "
                        f"{dev.index} (no CUDA context there yet, or a different PID namespace)"
                    )
                if dev.accounting:
                    proc_max = self._accounting_max(dev, pids)
            used = int(mem.used) if mem is not None else None
            if used is not None:
                dev.peak_memory_used_bytes = max(dev.peak_memory_used_bytes or 0, used)
            if proc_bytes is not None:
                dev.peak_process_memory_bytes = max(dev.peak_process_memory_bytes or 0, proc_bytes)
            if proc_max is not None:
                dev.process_memory_max_bytes = max(dev.process_memory_max_bytes or 0, proc_max)
            records.append(
                {
                    "t": now,
                    "source": "nvml",
                    "device": dev.index,
                    "memory_used_bytes": used,
                    "memory_total_bytes": int(mem.total) if mem is not None else None,
                    "utilization_ratio": util.gpu / 100.0 if util is not None else None,
                    "power_watts": power_mw / 1000.0 if power_mw is not None else None,
                    "process_memory_bytes": proc_bytes,
                    "process_memory_max_bytes": proc_max,
                    "note": "; ".join(notes) or None,
                }
            )
        return records

    def _process_memory(self, dev: _Device, pids: set[int]) -> int | None:
        procs = self._call(
            dev, "processes", self._nvml.nvmlDeviceGetComputeRunningProcesses, dev.handle
        )
        if procs is None:
            return None
        found = [p.usedGpuMemory for p in procs if p.pid in pids]
        # usedGpuMemory is None where the driver cannot attribute memory (e.g. some vGPU/WDDM).
        known = [int(b) for b in found if b is not None]
        return sum(known) if known else None

    def _accounting_max(self, dev: _Device, pids: set[int]) -> int | None:
        """Lifetime max memory of the process(es), kept by the driver between our samples."""
        total = None
        for pid in pids:
            try:
                stats = self._nvml.nvmlDeviceGetAccountingStats(dev.handle, pid)
            except self._nvml.NVMLError:
                continue  # NOT_FOUND: this process never had a context on this device
            if stats.maxMemoryUsage is not None:
                total = (total or 0) + int(stats.maxMemoryUsage)
        return total

    def _call(self, dev: _Device, field: str, fn: Any, *args: Any) -> Any:
        if field in dev.unsupported:
            return None
        try:
            return fn(*args)
        except getattr(self._nvml, "NVMLLibraryMismatchError", ()) as exc:
            # nvidia-ml-py raises this, not an NVMLError, when the driver's NVML library lacks
            # the function version it wraps (e.g. the _v3 process list on an older driver): the
            # field can never be read from this driver, so it is left out like an unsupported one
            # instead of ending every sample.
            dev.unsupported.add(field)
            self.summary.add_note(f"device {dev.index}: this driver's NVML lacks {field} ({exc})")
            return None
        except self._nvml.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(self._nvml, "NVML_ERROR_NOT_SUPPORTED", 3):
                dev.unsupported.add(field)
                self.summary.add_note(f"device {dev.index}: NVML does not support {field}")
            else:
                self.summary.errors += 1
                self.summary.last_error = f"device {dev.index} {field}: {exc}"
            return None

    def _process_gone(self, reason: str) -> None:
        self.summary.add_note(f"{reason}; sampling stopped")
        self.request_stop()

    def _write(self, record: dict[str, Any]) -> None:
        self._writer.write(record)
        self.summary.samples_written += 1

    def teardown(self) -> None:
        self._shutdown_nvml()
        self._writer.close()
        extra = self.summary.extra
        extra["hz"] = self.config.hz
        if self._source == "nvml":
            extra["devices"] = {
                str(d.index): {
                    "peak_memory_used_bytes": d.peak_memory_used_bytes,
                    "peak_process_memory_bytes": d.peak_process_memory_bytes,
                    "process_memory_max_bytes": d.process_memory_max_bytes,
                    "accounting_mode": d.accounting,
                    "unsupported": sorted(d.unsupported),
                }
                for d in self._devices
            }
        elif self._source == "process_rss":
            extra["peak_rss_bytes"] = self._peak_rss_bytes
            extra["rss_high_water_bytes"] = self._rss_high_water_bytes
