"""What `batchgate tune` maximises or minimises, and the monitor gates it reads it from.

Owns `Objective` (a glossary metric and statistic, and whether higher is better), parsing
`--objective` (default: goodput's rate when the gates file has SLOs, else output tokens/s), and
adding the monitor gates every candidate's run is judged with (the objective, the output tokens/s
and the TTFT p99 of the trade-off figure), validated like any gates file. They never change a
verdict. It does not run anything (`gate.tune.runner`).
"""

from __future__ import annotations

import dataclasses

import yaml

from gate.errors import ExitCode, UsageError
from gate.gates.file import loads
from gate.gates.spec import GatesFile
from gate.glossary import get_metric

__all__ = [
    "LATENCY_GATE",
    "OBJECTIVE_GATE",
    "THROUGHPUT_GATE",
    "Objective",
    "parse_objective",
    "with_monitors",
]

OBJECTIVE_GATE = "tune_objective"
THROUGHPUT_GATE = "tune_output_tokens_per_second"
LATENCY_GATE = "tune_ttft_p99"


@dataclasses.dataclass(frozen=True)
class Objective:
    metric: str
    statistic: str
    higher_is_better: bool

    @property
    def label(self) -> str:
        return f"{self.metric} {self.statistic}"


def parse_objective(text: str | None, gates_file: GatesFile) -> Objective:
    """`METRIC[:STATISTIC]`; default: goodput rate when the gates file has SLOs, else output
    tokens/s. Raises UsageError naming the problem (exit 2)."""
    if text is None:
        text = "goodput:rate" if not gates_file.slos.empty else "output_tokens:rate"
    metric, _, statistic = text.partition(":")
    try:
        info = get_metric(metric.strip())
    except KeyError as exc:
        raise UsageError(f"--objective: {exc}") from None
    statistic = statistic.strip() or ("rate" if "rate" in info.statistics else info.statistics[0])
    if statistic not in info.statistics:
        raise UsageError(
            f"--objective: {info.name} takes {', '.join(info.statistics)}, not {statistic!r}"
        )
    return Objective(info.name, statistic, bool(info.higher_is_better))


def with_monitors(
    gates_text: str, profile: str, objective: Objective, *, path: str
) -> tuple[str, GatesFile]:
    """The gates file plus the monitor gates tune reads; validated like any gates file."""
    data = yaml.safe_load(gates_text) or {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a gates file", ExitCode.INVALID_GATES)
    gates = list(data.get("gates") or [])
    taken = {g.get("name") for g in gates if isinstance(g, dict)}
    if taken & {OBJECTIVE_GATE, THROUGHPUT_GATE, LATENCY_GATE}:
        raise UsageError(f"{path}: gate names starting with tune_ are kept for batchgate tune")
    scope = {"profile": profile}
    gates += [
        {
            "name": OBJECTIVE_GATE,
            "metric": objective.metric,
            "statistic": objective.statistic,
            "scope": scope,
            "monitor": True,
        },
        {
            "name": THROUGHPUT_GATE,
            "metric": "output_tokens",
            "statistic": "rate",
            "scope": scope,
            "monitor": True,
        },
        {
            "name": LATENCY_GATE,
            "metric": "ttft",
            "statistic": "p99",
            "scope": scope,
            "monitor": True,
        },
    ]
    data["gates"] = gates
    text = yaml.safe_dump(data, sort_keys=False)
    try:
        return text, loads(text, path=path)
    except Exception as exc:  # GatesFileError: the objective does not fit its scope
        raise UsageError(f"--objective: {exc}", ExitCode.INVALID_GATES) from None
