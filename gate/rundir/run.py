"""Reading a run directory (docs/records.md) into `RunData`.

Owns locating profiles (a run directory with `manifest.json` and one sub-directory per profile,
or a single `batchgate load --out DIR` directory), reading `manifest.json`, `load.json`, and the
observer files (`steps.jsonl` as columns, `scrapes.jsonl`, `gpu.jsonl` and the offline job's
`batch_job.jsonl` as records), and noting
what was odd (partial last lines, missed step records, missing files) so verdicts can say so.
Every JSON file is checked against its shape (`gate.rundir.shapes`) as it is read: a field of
the wrong type is a RunDirError `file: field: what is wrong` (calibration.json is parsed by
`gate.calibration`; a damaged one is kept as its problem, judged no data), so no reader past
this one meets it.
It does not judge anything: a missing file is recorded, not treated as a failure, here.
"""

from __future__ import annotations

import gc
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from batchgate_records.schema import parquet_path
from gate.calibration.content import (
    CALIBRATION_FILE,
    Calibration,
    CalibrationError,
    parse_calibration,
)
from gate.json_shapes import Shape, problem
from gate.rundir.abort import (
    SNAPSHOT_FILES,
    AbortRecord,
    AbortRecordError,
    read_abort,
)
from gate.rundir.observer_records import RunDirError, read_jsonl
from gate.rundir.parquet_stamp import cut_since_stamp
from gate.rundir.requests import RecordsError, RequestColumns, read_requests
from gate.rundir.sample_records import SampleRecords, read_samples
from gate.rundir.shapes import LOAD, MANIFEST, SCRAPE
from gate.rundir.step_records import StepColumns, read_steps

__all__ = [
    "ProfileData",
    "RunData",
    "RunDirError",
    "StepColumns",
    "complete_lines",
    "load_run",
    "profile_prefix",
    "provenance",
]

# A profile's request records: the JSONL log, or the Parquet file of them (a run shared as that).
_REQUEST_FILES = ("requests.jsonl", "requests.parquet")


@dataclass(frozen=True, kw_only=True)
class ProfileData:
    name: str
    directory: str
    load: dict[str, Any] | None
    requests: RequestColumns | None
    steps: StepColumns | None
    scrapes: list[dict[str, Any]] | None
    gpu: SampleRecords | None  # a sequence of dicts, and columns
    # batch_job.jsonl (the offline_job profile's Batch API job timeline), None without one.
    job_events: list[dict[str, Any]] | None = None
    notes: tuple[str, ...] = ()
    # Records lost or changed since requests.parquet was made (its stamp): never judged.
    damage: tuple[str, ...] = ()
    # An `abort_on_fail` gate stopped this profile (abort.json), and the profile's files as the
    # deciding check read them (its line counts, its stand-in for load.json).
    abort: AbortRecord | None = None
    abort_view: ProfileData | None = None
    # manifest.json's hardware.gpu: the machine the run was measured from has this GPU, so
    # host memory cannot stand in for device memory (gate.metrics.sampler).
    hardware_gpu: str | None = None
    # trace.jsonl: the trace window a `trace` profile replayed (docs/records.md), which the
    # prefix-cache gate's ideal hit ratio is computed from; None for other profiles.
    trace_window: list[dict[str, Any]] | None = None

    def to_wall(self, monotonic_seconds: float) -> float | None:
        """Convert a request-record time to the observers' wall clock (None without anchor)."""
        clock = (self.load or {}).get("clock") or {}
        mono, wall = clock.get("monotonic_at_start"), clock.get("wall_at_start")
        if not isinstance(mono, (int, float)) or not isinstance(wall, (int, float)):
            return None
        return float(monotonic_seconds) - float(mono) + float(wall)


@dataclass(frozen=True, kw_only=True)
class RunData:
    path: str
    manifest: dict[str, Any] | None
    profiles: dict[str, ProfileData]
    notes: tuple[str, ...] = field(default=())
    # calibration.json (docs/calibration.md): what relative thresholds ("4x unloaded") resolve
    # against; None when the run was not calibrated. One with a field of the wrong type has
    # `problem` (`calibration.json: field: what is wrong`): every gate of the run is no data.
    calibration: Calibration | None = None


def _read_json(path: Path, shape: Shape | None = None) -> dict[str, Any] | None:
    """The file's object (None without the file); a field of the wrong type (`shape`) is a
    RunDirError naming the file and the field, so no reader past this one meets it."""
    if not path.exists():
        return None
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise RunDirError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path}: expected a JSON object")
    wrong = problem(data, shape) if shape is not None else None
    if wrong is not None:
        raise RunDirError(f"{path}: {wrong}")
    return data


def _profile(name: str, directory: Path, hardware_gpu: str | None) -> ProfileData:
    notes: list[str] = []
    load = _read_json(directory / "load.json", LOAD)
    requests_path = directory / "requests.jsonl"
    has_requests = requests_path.exists() or parquet_path(requests_path).exists()
    # The request records are read on a thread of their own while the observer files are
    # read here: reading requests.parquet waits on its decoding about half the time.
    # The stamp of a requests.parquet made before the JSONL was cut is the evidence of the cut:
    # the JSONL is then read without replacing that file (as a prefix view reads).
    damage = cut_since_stamp(requests_path)
    whole = None if damage is None else sys.maxsize
    with ThreadPoolExecutor(1, thread_name_prefix="requests") as pool:
        pending = (
            pool.submit(read_requests, requests_path, max_records=whole) if has_requests else None
        )
        observer_notes: list[str] = []
        try:
            observers: tuple[Any, ...] | Exception = _observer_files(directory, observer_notes)
        except Exception as exc:  # raised after the requests' own error, as when read after them
            observers = exc
        requests = None
        if pending is not None:
            try:
                requests = pending.result()
            except RecordsError as exc:
                raise RunDirError(str(exc)) from None
    if requests is not None:
        if requests.partial_last_line:
            notes.append("requests.jsonl: skipped a partial last line")
        notes.extend(requests.notes)
    else:
        notes.append("requests.jsonl missing")
    if load is None:
        notes.append("load.json missing")
    if isinstance(observers, Exception):
        raise observers
    steps, scrapes, gpu, job_events, trace_window = observers
    notes.extend(observer_notes)
    try:
        abort = read_abort(directory)
    except AbortRecordError as exc:
        raise RunDirError(str(exc)) from None
    view = None
    if abort is not None:
        view = profile_prefix(name, directory, lines=abort.lines, load=abort.load_standin())
        view = replace(view, hardware_gpu=hardware_gpu)
    return ProfileData(
        name=name,
        directory=str(directory),
        load=load,
        requests=requests,
        steps=steps,
        scrapes=scrapes,
        gpu=gpu,
        job_events=job_events,
        trace_window=trace_window,
        notes=tuple(notes),
        damage=() if damage is None else (damage,),
        abort=abort,
        abort_view=view,
        hardware_gpu=hardware_gpu,
    )


def _observer_files(directory: Path, notes: list[str]) -> tuple[Any, ...]:
    """steps.jsonl's columns, then scrapes.jsonl's, gpu.jsonl's, batch_job.jsonl's and
    trace.jsonl's records."""
    steps = read_steps(directory / "steps.jsonl", notes)
    scrapes = read_jsonl(directory / "scrapes.jsonl", notes)
    for number, scrape in enumerate(scrapes or (), start=1):
        wrong = problem(scrape, SCRAPE)
        if wrong is not None:
            raise RunDirError(f"{directory / 'scrapes.jsonl'}: record {number}: {wrong}")
    gpu = read_samples(directory / "gpu.jsonl", notes)
    job_events = read_jsonl(directory / "batch_job.jsonl", notes)
    return steps, scrapes, gpu, job_events, read_jsonl(directory / "trace.jsonl", notes)


def complete_lines(directory: Path) -> dict[str, int]:
    """Complete (newline-ended) lines of each file a profile's gates read, now."""
    counts = {}
    for name in SNAPSHOT_FILES:
        try:
            counts[name] = (directory / name).read_bytes().count(b"\n")
        except OSError:
            counts[name] = 0  # not written yet
    return counts


def profile_prefix(
    name: str, directory: Path, *, lines: dict[str, int], load: dict[str, Any] | None
) -> ProfileData:
    """The profile as a reader saw it when its files had `lines` complete lines (files are only
    appended to, so this is the same view however much was written since); `load` stands in
    for a load.json that was not written yet."""
    directory = Path(directory)
    notes: list[str] = []
    requests = None
    requests_path = directory / "requests.jsonl"
    if requests_path.exists():
        try:
            requests = read_requests(requests_path, max_records=lines["requests.jsonl"])
        except RecordsError as exc:
            raise RunDirError(str(exc)) from None
    return ProfileData(
        name=name,
        directory=str(directory),
        load=load,
        requests=requests,
        steps=read_steps(directory / "steps.jsonl", notes, lines["steps.jsonl"]),
        scrapes=read_jsonl(directory / "scrapes.jsonl", notes, lines["scrapes.jsonl"]),
        gpu=read_samples(directory / "gpu.jsonl", notes, lines["gpu.jsonl"]),
        notes=tuple(notes),
    )


def _is_profile_dir(path: Path) -> bool:
    return any((path / name).exists() for name in ("load.json", *_REQUEST_FILES))


def load_run(path: str | Path) -> RunData:
    """Read a run directory; raises RunDirError when it is not one or a file is corrupt."""
    root = Path(path)
    if not root.is_dir():
        raise RunDirError(f"{root}: not a directory")
    manifest = _read_json(root / "manifest.json", MANIFEST)
    notes: list[str] = []
    if _is_profile_dir(root):
        load = _read_json(root / "load.json", LOAD) or {}
        name = str(load.get("profile") or root.name)
        directories = {name: root}
    else:
        listed = list(((manifest or {}).get("profiles") or {}).keys())
        found = sorted(p.name for p in root.iterdir() if p.is_dir() and _is_profile_dir(p))
        for missing in (n for n in listed if n not in found):
            notes.append(f"profile {missing!r} is in manifest.json but has no records")
        directories = {n: root / n for n in [*found, *(n for n in listed if n not in found)]}
        if not directories:
            raise RunDirError(f"{root}: no profile directories (no load.json or requests.jsonl)")
    if manifest is None:
        notes.append("manifest.json missing: provenance unknown")
    # What the start-of-run look found the target cannot measure (left out of the packaged
    # default suite; a user's own such gates stay and are judged no data): said in every output.
    unmeasurable = (manifest or {}).get("gates_not_measurable") or {}
    if isinstance(unmeasurable, dict):
        notes.extend(f"gate {name}: {why}" for name, why in sorted(unmeasurable.items()))
    hardware = (manifest or {}).get("hardware")
    gpu_name = hardware.get("gpu") if isinstance(hardware, dict) else None
    gpu_name = str(gpu_name) if gpu_name else None
    was_enabled = gc.isenabled()
    gc.disable()  # parsing the observer files builds many acyclic containers to rescan
    try:
        profiles = {name: _profile(name, d, gpu_name) for name, d in directories.items()}
    finally:
        if was_enabled:
            gc.enable()
    return RunData(
        path=str(root),
        manifest=manifest,
        profiles=profiles,
        notes=tuple(notes),
        calibration=_calibration(root),
    )


def _calibration(root: Path) -> Calibration | None:
    """The run's calibration.json; a field of the wrong type is kept as the calibration's
    problem (every gate no data), not refused: the run's records are still readable."""
    data = _read_json(root / CALIBRATION_FILE)
    if data is None:
        return None
    try:
        return parse_calibration(data)
    except CalibrationError as exc:
        return Calibration.damaged(str(exc))


def provenance(run: RunData, profile: str) -> dict[str, str | None]:
    """What a baseline must share with a run to be comparable (see gates.yaml baseline_match)."""
    manifest = run.manifest or {}
    target = manifest.get("target") or {}
    hardware = manifest.get("hardware") or {}
    load = (run.profiles.get(profile).load if profile in run.profiles else None) or {}
    profile_entry = (manifest.get("profiles") or {}).get(profile) or {}

    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    hardware_text = None
    if hardware:
        hardware_text = (
            f"{hardware.get('cpu')} x{hardware.get('cpu_count')} / gpu {hardware.get('gpu')}"
        )
    return {
        "server_kind": text(target.get("server_kind")),
        # records.md has no target version yet; read one if the runner writes it.
        "server_version": text(target.get("version") or target.get("server_version")),
        "model": text(target.get("model")),
        "batching_hash": text(target.get("batching_hash")),
        "profile_hash": text(profile_entry.get("params_hash") or load.get("params_hash")),
        "hardware": hardware_text,
    }
