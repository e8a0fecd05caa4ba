"""Answer consistency: probes answered under a profile's load against the same probes alone.

Owns reading the probe records (records marked `probe`, with their `probe_answer`) of a profile
and of the alone answers (`calibration/probes/consistency_probes/requests.jsonl` in the run
directory, written by the calibration phase's probe step, `gate.orchestrator.consistency_probes`),
comparing each probe's answer text with its answer alone, and the two metrics of the glossary:
`answer_mismatch_rate` (a Scalar: the share that differ, with what differed in the note) and
`answer_divergence_position` (Samples: where each differing answer left the alone one). Only
probe lines are parsed (a fast byte test skips the rest); a run without JSONL is read from its
requests.parquet. It does not judge (a foreign target's warn-only rule is the judge's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import orjson

from gate.metrics.measurements import Measurement, NoData, Samples, Scalar

if TYPE_CHECKING:
    from gate.gates.spec import Scope
    from gate.rundir.run import ProfileData

__all__ = [
    "ALONE_RECORDS",
    "CONSISTENCY_METRICS",
    "ProbeAnswer",
    "compare",
    "consistency",
    "read_probe_answers",
]

CONSISTENCY_METRICS = ("answer_mismatch_rate", "answer_divergence_position")
# Relative to the run directory.
ALONE_RECORDS = Path("calibration") / "probes" / "consistency_probes" / "requests.jsonl"
_NOT_A_PROBE = b'"probe":null'
_SHOWN_CHARS = 24


@dataclass(frozen=True, kw_only=True)
class ProbeAnswer:
    probe: int
    stage: str
    status: str
    answer: str | None


def read_probe_answers(jsonl: Path) -> list[ProbeAnswer] | None:
    """The probe records of a requests.jsonl (or of its requests.parquet when the JSONL is
    gone); None when neither can be read."""
    try:
        with jsonl.open("rb") as handle:
            return [
                answer
                for line in handle
                if b'"probe":' in line and _NOT_A_PROBE not in line
                if (answer := _from_line(line)) is not None
            ]
    except OSError:
        return _from_parquet(jsonl.with_name(f"{jsonl.stem}.parquet"))


def _from_line(line: bytes) -> ProbeAnswer | None:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None  # the records reader names a corrupt line; here it is no probe
    if not isinstance(obj, dict):
        return None
    probe, answer = obj.get("probe"), obj.get("probe_answer")
    if not isinstance(probe, int) or isinstance(probe, bool):
        return None
    return ProbeAnswer(
        probe=probe,
        stage=str(obj.get("stage")),
        status=str(obj.get("status")),
        answer=answer if isinstance(answer, str) else None,
    )


def _from_parquet(path: Path) -> list[ProbeAnswer] | None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=["probe", "probe_answer", "stage", "status"])
    except (OSError, pa.ArrowException, KeyError):
        return None
    return [
        ProbeAnswer(probe=row["probe"], stage=row["stage"], status=row["status"],
                    answer=row["probe_answer"])
        for row in table.to_pylist()
        if row["probe"] is not None
    ]  # fmt: skip


def compare(alone: str, loaded: str) -> int | None:
    """The first character where `loaded` leaves `alone` (the shorter one's length when one is
    a prefix of the other); None when they are the same."""
    if alone == loaded:
        return None
    for position, (a, b) in enumerate(zip(alone, loaded, strict=False)):
        if a != b:
            return position
    return min(len(alone), len(loaded))


def _alone_answers(run_dir: Path) -> tuple[dict[int, str], str | None]:
    records = read_probe_answers(run_dir / ALONE_RECORDS)
    if records is None:
        return {}, f"no probes answered alone ({ALONE_RECORDS} missing: calibration off?)"
    answers: dict[int, str] = {}
    unstable = set()
    for rec in records:
        if rec.status != "ok" or rec.answer is None:
            continue
        if rec.probe in answers and answers[rec.probe] != rec.answer:
            unstable.add(rec.probe)
        answers.setdefault(rec.probe, rec.answer)
    note = None
    if unstable:
        note = f"alone answers of probes {sorted(unstable)} differ between rounds (first kept)"
    return answers, note


def consistency(profile: ProfileData, metric: str, scope: Scope) -> Measurement:
    """`answer_mismatch_rate` or `answer_divergence_position` of a profile's probes (`scope`'s
    stages only, when it names some)."""
    directory = Path(profile.directory)
    loaded = read_probe_answers(directory / "requests.jsonl")
    if loaded is None:
        return NoData(reason=f"profile {profile.name!r} has no readable requests.jsonl")
    loaded = [p for p in loaded if scope.stage is None or p.stage in scope.stage]
    answered = [p for p in loaded if p.status == "ok" and p.answer is not None]
    if not loaded:
        return NoData(reason="no consistency probes were sent (the profile's `probes` is 0)")
    if not answered:
        return NoData(reason=f"none of the {len(loaded)} probes was answered")
    alone, alone_note = _alone_answers(directory.parent)
    pairs = [(p, alone[p.probe]) for p in answered if p.probe in alone]
    if not pairs:
        return NoData(reason=alone_note or "no probe was answered alone to compare with")
    diverged = [
        (p, reference, position)
        for p, reference in pairs
        if (position := compare(reference, p.answer or "")) is not None
    ]
    if metric == "answer_divergence_position":
        if not diverged:
            return NoData(reason=f"all {len(pairs)} probes answered as alone")
        return Samples(values=np.array([pos for *_, pos in diverged], dtype=np.float64))
    notes = [f"{len(diverged)} of {len(pairs)} probes differ from their answer alone"]
    if diverged:
        first, reference, position = min(diverged, key=lambda d: d[2])
        lo = max(position - 4, 0)
        notes.append(
            f"first divergence at character {position} (probe {first.probe}, stage "
            f"{first.stage}): alone {reference[lo : lo + _SHOWN_CHARS]!r}, under load "
            f"{(first.answer or '')[lo : lo + _SHOWN_CHARS]!r}"
        )
    if len(pairs) < len(answered):
        notes.append(f"{len(answered) - len(pairs)} probes had no answer alone to compare with")
    if alone_note:
        notes.append(alone_note)
    return Scalar(value=len(diverged) / len(pairs), n=len(pairs), note="; ".join(notes))
