"""Gates that only warn on a foreign target: the glossary's `warn_only_on_foreign` metrics.

Owns turning such a gate's `fail` threshold into a `warn` when the run's target is not the
bundled server (manifest.json's `target.server_kind` is anything but `batchgate`), with the note
that says why. Answer consistency is the case: a vLLM without batch-invariant kernels answers a
greedy probe differently under load, which is information about that server, not an error of
the run; on the bundled server the same gate fails. It does not judge.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from gate import glossary
from gate.gates.spec import Gate

__all__ = ["BUNDLED_KIND", "warn_only_on_foreign"]

BUNDLED_KIND = "batchgate"


def warn_only_on_foreign(manifest: dict[str, Any] | None, gate: Gate) -> tuple[Gate, str | None]:
    """`gate` as judged on this run's target, and the note when its fail became a warning."""
    if gate.fail is None or not glossary.get_metric(gate.metric).warn_only_on_foreign:
        return gate, None
    target = (manifest or {}).get("target")
    kind = target.get("server_kind") if isinstance(target, dict) else None
    if kind == BUNDLED_KIND or kind is None:
        # No manifest (a hand-made run directory) judges as written: fail closed.
        return gate, None
    note = (
        f"warn-only on a foreign target ({kind}): {gate.metric} is information about that "
        "server (answers that change with their batch), not a failure of the run"
    )
    return dataclasses.replace(gate, fail=None, warn=gate.fail), note
