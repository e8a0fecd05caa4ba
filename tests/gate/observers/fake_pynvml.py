"""A fake `pynvml` for sampler tests: the same function names and error type, driven by data.

Each device has a current memory reading the test sets, a list of compute processes, and an
accounting-mode lifetime maximum per PID that, like the driver's, keeps spikes the instantaneous
reading no longer shows. Any function can be made to raise an NVMLError code, or to be missing
from the driver's library (nvidia-ml-py then raises NVMLLibraryMismatchError, not an NVMLError).
"""

from __future__ import annotations

import dataclasses
from typing import Any

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_LIBRARY_NOT_FOUND = 12


class NVMLLibraryMismatchError(Exception):  # like nvidia-ml-py's: not an NVMLError
    pass


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclasses.dataclass
class Memory:
    total: int
    used: int
    free: int


@dataclasses.dataclass
class Utilization:
    gpu: int
    memory: int


@dataclasses.dataclass
class ProcessInfo:
    pid: int
    usedGpuMemory: int | None


@dataclasses.dataclass
class AccountingStats:
    maxMemoryUsage: int | None


@dataclasses.dataclass
class FakeDevice:
    total_bytes: int = 80 * 2**30
    used_bytes: int = 2**30
    utilization_percent: int = 50
    power_milliwatts: int = 300_000
    processes: dict[int, int | None] = dataclasses.field(default_factory=dict)
    accounting: bool = False
    # pid -> lifetime max, updated by set_process_memory like the driver's accounting buffer.
    max_by_pid: dict[int, int] = dataclasses.field(default_factory=dict)
    errors: dict[str, int] = dataclasses.field(default_factory=dict)  # function -> error code
    missing: set[str] = dataclasses.field(default_factory=set)  # not in the driver's library

    def set_process_memory(self, pid: int, used: int) -> None:
        self.processes[pid] = used
        self.max_by_pid[pid] = max(self.max_by_pid.get(pid, 0), used)


class FakeNVML:
    """Module-like object: pass as `nvml=` to the sampler."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED

    def __init__(self, devices: list[FakeDevice] | None = None, init_error: int | None = None):
        self.devices = devices if devices is not None else [FakeDevice()]
        self.init_error = init_error
        self.initialized = False
        self.calls: dict[str, int] = {}

    def _dev(self, name: str, handle: int) -> FakeDevice:
        self.calls[name] = self.calls.get(name, 0) + 1
        dev = self.devices[handle]
        if name in dev.errors:
            raise NVMLError(dev.errors[name])
        if name in dev.missing:  # the wording of nvidia-ml-py's throwOnVersionMismatch
            raise NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib "
                f"version. Either use matching pyNVML and NVML lib versions or use a versioned "
                f"function such as {name}_v2"
            )
        return dev

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Memory:
        d = self._dev("nvmlDeviceGetMemoryInfo", handle)
        return Memory(total=d.total_bytes, used=d.used_bytes, free=d.total_bytes - d.used_bytes)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Utilization:
        d = self._dev("nvmlDeviceGetUtilizationRates", handle)
        return Utilization(gpu=d.utilization_percent, memory=0)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._dev("nvmlDeviceGetPowerUsage", handle).power_milliwatts

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[ProcessInfo]:
        d = self._dev("nvmlDeviceGetComputeRunningProcesses", handle)
        return [ProcessInfo(pid=p, usedGpuMemory=b) for p, b in d.processes.items()]

    def nvmlDeviceGetAccountingMode(self, handle: int) -> int:
        d = self._dev("nvmlDeviceGetAccountingMode", handle)
        return NVML_FEATURE_ENABLED if d.accounting else NVML_FEATURE_DISABLED

    def nvmlDeviceGetAccountingStats(self, handle: int, pid: int) -> Any:
        d = self._dev("nvmlDeviceGetAccountingStats", handle)
        if not d.accounting:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if pid not in d.max_by_pid:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return AccountingStats(maxMemoryUsage=d.max_by_pid[pid])
