"""The device-memory sampler against a fake NVML, its CPU fallback, and a real NVML (gpu)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED, FakeDevice, FakeNVML

from gate.cli import main
from gate.observers.nvml_sampler import NvmlSampler, SamplerConfig
from gate.observers.observer import ObserverConfigError, config_from_mapping

RECORD_KEYS = {
    "t",
    "source",
    "device",
    "memory_used_bytes",
    "memory_total_bytes",
    "utilization_ratio",
    "power_watts",
    "process_memory_bytes",
    "process_memory_max_bytes",
    "note",
}
MiB = 2**20


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def make_sampler(tmp_path, nvml, **kw):
    config = SamplerConfig(out_path=tmp_path / "gpu.jsonl", **kw)
    return NvmlSampler(config, nvml=nvml)


def test_nvml_record_has_every_field_in_record_units(tmp_path):
    me = os.getpid()
    dev = FakeDevice(total_bytes=1000 * MiB, used_bytes=400 * MiB, utilization_percent=75)
    dev.power_milliwatts = 123_500
    dev.set_process_memory(me, 300 * MiB)
    sampler = make_sampler(tmp_path, FakeNVML([dev]), pid=me)
    sampler.setup()
    (record,) = sampler.sample_once()
    sampler.stop()
    assert set(record) == RECORD_KEYS
    assert record["source"] == "nvml" and record["device"] == 0
    assert record["memory_used_bytes"] == 400 * MiB
    assert record["memory_total_bytes"] == 1000 * MiB
    assert record["utilization_ratio"] == pytest.approx(0.75)
    assert record["power_watts"] == pytest.approx(123.5)
    assert record["process_memory_bytes"] == 300 * MiB
    assert read_jsonl(tmp_path / "gpu.jsonl") == [record]


def test_accounting_max_catches_a_spike_between_samples(tmp_path):
    me = os.getpid()
    dev = FakeDevice(accounting=True)
    dev.set_process_memory(me, 100 * MiB)
    sampler = make_sampler(tmp_path, FakeNVML([dev]), pid=me)
    sampler.setup()
    first = sampler.sample_once()[0]
    dev.set_process_memory(me, 900 * MiB)  # spike and release, both between two samples
    dev.set_process_memory(me, 120 * MiB)
    second = sampler.sample_once()[0]
    summary = sampler.stop()
    assert first["process_memory_max_bytes"] == 100 * MiB
    assert second["process_memory_bytes"] == 120 * MiB  # the instantaneous reading missed it
    assert second["process_memory_max_bytes"] == 900 * MiB  # the driver's lifetime max did not
    device = summary.to_dict()["devices"]["0"]
    assert device["process_memory_max_bytes"] == 900 * MiB
    assert device["peak_process_memory_bytes"] == 120 * MiB


def test_accounting_off_leaves_max_null_and_says_so(tmp_path):
    me = os.getpid()
    dev = FakeDevice(accounting=False)
    dev.set_process_memory(me, 100 * MiB)
    sampler = make_sampler(tmp_path, FakeNVML([dev]), pid=me)
    sampler.setup()
    record = sampler.sample_once()[0]
    summary = sampler.stop()
    assert record["process_memory_max_bytes"] is None
    assert any("accounting mode is off" in n for n in summary.notes)


def test_pid_not_visible_to_nvml_gives_null_process_memory_with_note(tmp_path):
    dev = FakeDevice()
    dev.set_process_memory(999_999_999, 5 * MiB)  # someone else's process
    sampler = make_sampler(tmp_path, FakeNVML([dev]), pid=os.getpid())
    sampler.setup()
    record = sampler.sample_once()[0]
    sampler.stop()
    assert record["process_memory_bytes"] is None
    assert "not among NVML's compute processes" in record["note"]
    assert record["memory_used_bytes"] is not None


def test_unsupported_field_is_null_noted_and_not_asked_again(tmp_path):
    dev = FakeDevice(errors={"nvmlDeviceGetPowerUsage": NVML_ERROR_NOT_SUPPORTED})
    nvml = FakeNVML([dev])
    sampler = make_sampler(tmp_path, nvml)
    sampler.setup()
    records = [sampler.sample_once()[0] for _ in range(3)]
    summary = sampler.stop()
    assert all(r["power_watts"] is None for r in records)
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 1
    assert summary.errors == 0
    assert any("does not support power" in n for n in summary.notes)


def test_a_function_missing_from_the_drivers_library_is_left_out_and_noted(tmp_path):
    # nvidia-ml-py wraps the process list in throwOnVersionMismatch: on a driver without the
    # function it raises NVMLLibraryMismatchError, which is not an NVMLError.
    dev = FakeDevice(missing={"nvmlDeviceGetComputeRunningProcesses"})
    dev.set_process_memory(os.getpid(), 256 * MiB)
    nvml = FakeNVML([dev])
    sampler = make_sampler(tmp_path, nvml, pid=os.getpid())
    sampler.setup()
    records = [sampler.sample_once()[0] for _ in range(3)]
    summary = sampler.stop()
    assert all(r["memory_used_bytes"] == dev.used_bytes for r in records)
    assert all(r["process_memory_bytes"] is None for r in records)
    assert nvml.calls["nvmlDeviceGetComputeRunningProcesses"] == 1
    assert summary.errors == 0
    assert any("NVML lacks processes" in n for n in summary.notes)


def test_other_nvml_errors_are_counted_not_raised(tmp_path):
    dev = FakeDevice(errors={"nvmlDeviceGetMemoryInfo": 999})
    sampler = make_sampler(tmp_path, FakeNVML([dev]))
    sampler.setup()
    record = sampler.sample_once()[0]
    summary = sampler.stop()
    assert record["memory_used_bytes"] is None and record["memory_total_bytes"] is None
    assert summary.errors == 1 and "memory" in summary.last_error


def test_every_selected_device_is_sampled(tmp_path):
    nvml = FakeNVML([FakeDevice(used_bytes=1), FakeDevice(used_bytes=2), FakeDevice(used_bytes=3)])
    sampler = make_sampler(tmp_path, nvml, devices=(0, 2))
    sampler.setup()
    records = sampler.sample_once()
    sampler.stop()
    assert [(r["device"], r["memory_used_bytes"]) for r in records] == [(0, 1), (2, 3)]


def test_without_nvml_falls_back_to_process_rss_and_says_so_in_each_record(tmp_path):
    nvml = FakeNVML(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    sampler = make_sampler(tmp_path, nvml, pid=os.getpid())
    sampler.setup()
    records = [sampler.sample_once()[0] for _ in range(2)]
    summary = sampler.stop()
    assert sampler.source == "process_rss"
    for r in records:
        assert set(r) == RECORD_KEYS
        assert r["source"] == "process_rss"
        assert r["memory_used_bytes"] > 10 * MiB  # this Python process is resident
        assert "NVML unavailable" in r["note"] and str(os.getpid()) in r["note"]
        for key in ("memory_total_bytes", "utilization_ratio", "power_watts"):
            assert r[key] is None
    if sys.platform.startswith("linux"):
        assert records[-1]["process_memory_max_bytes"] >= records[-1]["memory_used_bytes"]
    assert summary.extra["source"] == "process_rss"


def test_device_index_missing_falls_back_with_reason(tmp_path):
    sampler = make_sampler(tmp_path, FakeNVML([FakeDevice()]), pid=os.getpid(), devices=(3,))
    sampler.setup()
    record = sampler.sample_once()[0]
    sampler.stop()
    assert record["source"] == "process_rss"
    assert "device index [3] not present" in record["note"]


def test_cannot_sample_writes_one_record_saying_why(tmp_path):
    nvml = FakeNVML(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)
    sampler = make_sampler(tmp_path, nvml, pid=dead_pid())
    sampler.start()
    assert sampler.wait(5.0)
    sampler.stop()
    (record,) = read_jsonl(tmp_path / "gpu.jsonl")
    assert record["source"] == "none"
    assert "NVML unavailable" in record["note"] and "no process with PID" in record["note"]


def test_no_nvml_and_no_pid_says_there_is_nothing_to_fall_back_to(tmp_path):
    sampler = make_sampler(tmp_path, FakeNVML(init_error=NVML_ERROR_LIBRARY_NOT_FOUND))
    sampler.setup()
    sampler.stop()
    (record,) = read_jsonl(tmp_path / "gpu.jsonl")
    assert record["source"] == "none" and "no server PID" in record["note"]


def test_thread_samples_at_rate_and_stops_after_duration(tmp_path):
    sampler = make_sampler(tmp_path, FakeNVML([FakeDevice()]), hz=100.0, duration_seconds=0.3)
    sampler.start()
    assert sampler.wait(10.0)
    summary = sampler.stop()
    records = read_jsonl(tmp_path / "gpu.jsonl")
    assert len(records) == summary.samples_written
    assert 5 <= len(records) <= 40  # ~30 at 100 Hz; loose for a busy 2-core machine
    times = [r["t"] for r in records]
    assert times == sorted(times)


def test_sampling_stops_when_the_process_exits(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sampler = make_sampler(tmp_path, None, pid=proc.pid, hz=50.0, use_nvml=False)
        sampler.start()
        proc.kill()
        proc.wait()
        assert sampler.wait(10.0)
        summary = sampler.stop()
    finally:
        proc.kill()
        proc.wait()
    assert any("exited" in n for n in summary.notes)


@pytest.mark.parametrize(
    "kw",
    [
        {"hz": 0},
        {"hz": 5000},
        {"hz": True},
        {"pid": -3},
        {"duration_seconds": 0},
        {"devices": (-1,)},
        {"devices": ()},
    ],
)
def test_bad_config_is_refused(tmp_path, kw):
    with pytest.raises(ObserverConfigError):
        SamplerConfig(out_path=tmp_path / "x.jsonl", **kw)


def test_unknown_config_key_is_an_error_naming_it(tmp_path):
    with pytest.raises(ObserverConfigError, match="hertz"):
        config_from_mapping(SamplerConfig, {"out_path": tmp_path / "x", "hertz": 5})


def test_sample_command_writes_fallback_records(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    argv = ["sample", "--pid", str(os.getpid()), "--out", str(out), "--hz", "100"]
    code = main([*argv, "--duration", "0.2", "--no-nvml"])
    assert code == 0
    records = read_jsonl(out)
    assert records and {r["source"] for r in records} == {"process_rss"}
    assert json.loads(capsys.readouterr().out)["samples_written"] == len(records)


def test_sample_command_without_anything_to_sample_exits_5(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    code = main(["sample", "--pid", str(dead_pid()), "--out", str(out), "--no-nvml"])
    assert code == 5
    assert [r["source"] for r in read_jsonl(out)] == ["none"]
    assert "no process with PID" in capsys.readouterr().err


def test_sample_command_refuses_bad_rate(tmp_path, capsys):
    code = main(["sample", "--pid", "1", "--out", str(tmp_path / "g"), "--hz", "0"])
    assert code == 2
    assert "hz must be" in capsys.readouterr().err


def test_observers_and_rollback_import_no_heavy_packages():
    code = (
        "import sys, gate.observers, gate.rollback, gate.commands.rollback, gate.commands.sample\n"
        "heavy = ('torch', 'locust', 'reference_server', 'loadgen')\n"
        "bad = [m for m in heavy if m in sys.modules]\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def _real_nvml_or_skip():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        pytest.skip(f"no NVML here: {exc}")
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    if count == 0:
        pytest.skip("NVML sees no GPU")


@pytest.mark.gpu
def test_real_nvml_samples_every_device(tmp_path):
    _real_nvml_or_skip()
    sampler = NvmlSampler(
        SamplerConfig(out_path=tmp_path / "gpu.jsonl", pid=os.getpid(), hz=50, duration_seconds=0.3)
    )
    sampler.start()
    assert sampler.wait(10.0)
    summary = sampler.stop()
    records = read_jsonl(tmp_path / "gpu.jsonl")
    assert sampler.source == "nvml", summary.notes
    assert records and all(r["source"] == "nvml" for r in records)
    for r in records:
        assert 0 < r["memory_used_bytes"] <= r["memory_total_bytes"]
