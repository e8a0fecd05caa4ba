"""The tables the docs take from the code: server flags, gate preset keys, run-file fields.

Owns turning the code's own definitions into Markdown table rows: the `batchgate serve` /
`python -m reference_server` argparse parser (docs/server.md), the preset key table of
`gate/gates/preset_schema.py` with the server flag each key becomes (docs/gates.md), and the
fields of `manifest.json` and `load.json` as their writers produce them and their readers check them
(docs/records.md). It does not know where the tables go in the docs (`scripts/gen_docs.py`) and
writes nothing. Project packages are imported inside the functions, once gen_docs has put this
checkout first on `sys.path`.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DocTableError", "FieldRow", "load_fields", "manifest_fields", "preset_keys",
           "server_flags"]  # fmt: skip

REPO = Path(__file__).resolve().parents[1]


class DocTableError(Exception):
    """The code cannot be turned into a table (a name moved, a key without a flag)."""


def cell(text: object) -> str:
    """One Markdown table cell: `|` escaped, line breaks folded."""
    return " ".join(str(text).split()).replace("|", "\\|")


def row(*cells: object) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


# --- server flags (docs/server.md) -----------------------------------------------------------


def _group_titles(parser: argparse.ArgumentParser) -> dict[int, str]:
    titles = {}
    for group in parser._action_groups:  # argparse keeps no public map from action to group
        for action in group._group_actions:
            titles[id(action)] = (group.title or "").split(" (")[0]
    return titles


def _usage(action: argparse.Action) -> str:
    if isinstance(action, argparse.BooleanOptionalAction):
        return " / ".join(f"`{o}`" for o in action.option_strings)
    option = action.option_strings[-1]
    if action.nargs == 0:
        return f"`{option}`"
    if action.choices is not None:
        return f"`{option} {{{','.join(str(c) for c in action.choices)}}}`"
    return f"`{option} {action.metavar or action.dest.upper()}`"


def server_flags() -> list[str]:
    """Rows of the server flag table, in `--help` order, from the parser itself."""
    from reference_server.api.cli import build_parser

    parser, flags = build_parser()
    by_dest = {f.dest: f for f in flags}
    titles = _group_titles(parser)
    rows = [
        "| flag | group | config field | meaning (unit) | default |",
        "|---|---|---|---|---|",
    ]
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        flag = by_dest.get(action.dest)
        if flag is None:  # a flag that sets no config field (e.g. --print-tokenizer-dir)
            rows.append(row(_usage(action), "—", "—", action.help or "", "—"))
            continue
        group = titles.get(id(action), "")
        if flag.path[0] == "batching":
            group += " (live)"
        default = "none" if flag.default is None else flag.default
        rows.append(
            row(_usage(action), group, f"`{'.'.join(flag.path)}`", flag.help, f"`{default}`")
        )
    return rows


# --- gate preset keys (docs/gates.md) ---------------------------------------------------------


def _preset_tables() -> tuple[dict[str, str], dict[str, str], dict[str, tuple[str, ...]]]:
    """The preset key table and the value sets of gate/gates/preset_schema.py (private names: the
    module has no public view of them, and the docs must say exactly what it accepts)."""
    from gate.gates import preset_schema as presets

    try:
        keys, class_keys = presets._PRESET_KEYS, presets._CLASS_KEYS
        choices = {
            "policy": presets._POLICIES,
            "priority": presets._PRIORITIES,
            "alignment": presets._ALIGNMENTS,
        }
    except AttributeError as exc:
        raise DocTableError(
            f"gate/gates/preset_schema.py: {exc}; update scripts/doc_tables.py"
        ) from exc
    return dict(keys), dict(class_keys), choices


def _value_text(kind: str, choices: dict[str, tuple[str, ...]], key: str) -> str:
    if kind in choices:
        names = [f"`{c}`" for c in choices[kind]]
        return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
    texts = {
        "int0": "integer ≥ 0",
        "int1": "integer ≥ 1",
        "opt_int1": "integer ≥ 1, or `null`",
        "num0": "number ≥ 0",
        "bool": "`true` / `false`",
        "bytes": "size > 0 (`2GiB`, `1500MB` or bytes)",
    }
    if kind not in texts:
        raise DocTableError(f"preset key {key!r} has kind {kind!r}: describe it in doc_tables.py")
    return texts[kind]


def _server_flag(preset: dict[str, Any]) -> str:
    from gate.orchestrator.preset_flags import server_flags as preset_flags

    return preset_flags(preset)[0]


def preset_keys() -> list[str]:
    """Rows of the preset key table: what the gates file accepts, how a rollback applies it,
    the bundled server flag it becomes and that flag's meaning."""
    from gate.orchestrator.preset_flags import START_ONLY_KEYS
    from reference_server.api.cli import engine_flags

    keys, class_keys, choices = _preset_tables()
    helps = {f.option: f.help for f in engine_flags()}

    def described(option: str, key: str) -> str:
        if option not in helps:
            raise DocTableError(
                f"preset key {key!r} becomes {option}, which python -m reference_server lacks"
            )
        return helps[option]

    rows = [
        "| key | value | applied | server flag | meaning |",
        "|---|---|---|---|---|",
    ]
    classes = [k for k, kind in keys.items() if kind == "class"]
    for key, kind in keys.items():
        if kind == "class":
            continue
        sample: Any = True if kind == "bool" else 1
        option = _server_flag({key: sample})
        usage = f"`{option}` / `--no-{option[2:]}`" if kind == "bool" else f"`{option}`"
        applied = "start only" if key in START_ONLY_KEYS else "live"
        rows.append(row(f"`{key}`", _value_text(kind, choices, key), applied, usage,
                        described(option, key)))  # fmt: skip
    for inner, kind in class_keys.items():
        options = [_server_flag({cls: {inner: 1}}) for cls in classes]
        meaning = described(options[0], f"{classes[0]}.{inner}")
        for option in options[1:]:
            described(option, option)
        # Every class's help starts "<class> class: "; the row is for all classes.
        meaning = meaning.split(" class: ", 1)[-1]
        rows.append(
            row(
                ", ".join(f"`{cls}.{inner}`" for cls in classes),
                _value_text(kind, choices, inner),
                "live",
                ", ".join(f"`{o}`" for o in options),
                meaning,
            )
        )
    return rows


# --- run-file fields (docs/records.md) --------------------------------------------------------


class FieldRow:
    """One field of a run file: dotted name, the type its readers check, whether written."""

    def __init__(self, name: str, checked: str | None, written_kind: str | None) -> None:
        self.name, self.checked, self.written_kind = name, checked, written_kind

    @property
    def type_text(self) -> str:
        if self.checked is not None:
            return self.checked
        if self.written_kind is None:
            return "not checked"
        return f"{self.written_kind} (not checked)"


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    return "a list" if isinstance(value, list) else "an object"


def _shape_text(shape: Any) -> str:
    kind = shape.kind
    if kind == "object":
        text = "an object"
    elif kind == "map":
        text = "an object"
        if shape.item is not None and shape.item.kind not in ("any", "object"):
            text = f"an object: name → {_shape_text(shape.item)}"
    elif kind == "list":
        assert shape.item is not None
        item = "objects" if shape.item.kind == "object" else _shape_text(shape.item)
        text = f"a list of {item}"
    else:
        return str(shape.describe())
    return f"{text} or null" if shape.nullable else text


def _walk(written: Any, shape: Any, prefix: str, keep_whole: frozenset[str]) -> Iterator[FieldRow]:
    """Fields of a written object merged with its reader shape, writer's order first."""
    fields = dict(shape.fields) if shape is not None and shape.kind == "object" else {}
    names = list(written) if isinstance(written, dict) else []
    names += [n for n in fields if n not in names]
    for name in names:
        path = f"{prefix}{name}"
        value = written.get(name) if isinstance(written, dict) else None
        inner = fields.get(name)
        yield FieldRow(
            path,
            _shape_text(inner) if inner is not None else None,
            _json_kind(value) if isinstance(written, dict) and name in written else None,
        )
        if path in keep_whole:
            continue
        if inner is not None and inner.kind == "map" and inner.item.kind == "object":
            # Keyed by data (profile names): one entry's fields, as `path.<name>.field`.
            entry: Any = next(iter(value.values()), {}) if isinstance(value, dict) else {}
            yield from _walk(entry, inner.item, f"{path}.<name>.", keep_whole)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            item = inner.item if inner is not None and inner.kind == "list" else None
            yield from _walk(value[0], item, f"{path}[].", keep_whole)
        elif isinstance(value, dict) and inner is not None and inner.kind == "map":
            # Fixed keys the writer always gives (p50, p99, ...): each checked as the map's item.
            each = type(inner)("object", fields={key: inner.item for key in value})
            yield from _walk(value, each, f"{path}.", keep_whole)
        elif isinstance(value, dict) or (inner is not None and inner.kind == "object"):
            yield from _walk(value if isinstance(value, dict) else {}, inner, f"{path}.",
                             keep_whole)  # fmt: skip


def _extra_keys(package: Path) -> list[str]:
    """Keys the run adds to the manifest as `<manifest>.extra["KEY"] = ...` (gate/orchestrator):
    the writer has no single literal for them."""
    keys: list[str] = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "extra"
                and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, str)
                and node.slice.value not in keys
            ):
                keys.append(node.slice.value)
    return keys


def manifest_fields() -> list[FieldRow]:
    """manifest.json as `gate.orchestrator.manifest.Manifest` writes it (with the target entry,
    a profile entry and the run's extra keys) merged with `gate.rundir.shapes.MANIFEST`."""
    from gate.orchestrator.manifest import Manifest, hardware, tool_info
    from gate.orchestrator.target import TargetInfo
    from gate.rundir.shapes import MANIFEST

    manifest = Manifest(
        path=Path("manifest.json"), gates_file="", gates_hash="", scale="", preset=None,
        tool=tool_info(), hardware=hardware(),
    )  # fmt: skip
    manifest.target = TargetInfo(url="", server_kind="", model=None, batching=None).to_manifest()
    manifest.add_profile("NAME", None, {})
    extras = _extra_keys(REPO / "gate" / "orchestrator")
    for key in extras:
        manifest.extra.setdefault(key, None)
    written = manifest.to_dict()
    # Objects keyed by data (profile or gate names, settings): listed whole, not key by key.
    keep_whole = frozenset(
        {
            "target.batching",
            "observers",
            "calibration",
            "relative_profiles",
            "profiles.<name>.params",
            "profiles.<name>.overrides",
            "replaced_settings",
            "gates_not_measurable",
            "profiles_left_out",
        }
    )
    rows = list(_walk(written, MANIFEST, "", keep_whole))
    for r in rows:
        if r.name in extras:
            r.written_kind = None  # the value is only known where the run sets it
    return rows


def load_fields() -> list[FieldRow]:
    """load.json as `loadgen.load_json.build_load_json` writes it (for a small steady profile,
    with the trace and batch_job sections) merged with `gate.rundir.shapes.LOAD`."""
    from gate.rundir.shapes import LOAD
    from loadgen.load_json import build_load_json
    from loadgen.profiles import resolve

    summary = {"lags": [0.0], "cpu": {"mean": 0.0, "max": 0.0}, "sent": 1, "planned": 1,
               "cap_reached": 0}  # fmt: skip
    written = build_load_json(
        spec=resolve("steady", scale="smoke"), workers=1, summaries=[summary],
        counts_by_status={"ok": 1}, t0=0.0, wall_at_t0=0.0, ended_at=1.0, ended="completed",
        batch_job={}, trace={},
    )  # fmt: skip
    # batch_job repeats batch_job.jsonl's summary line, documented there.
    # Keyed by data (parameter names, statuses); batch_job repeats batch_job.jsonl's summary
    # line, documented there.
    keep_whole = frozenset({"params", "counts_by_status", "chunk_tokens_sources", "batch_job"})
    return list(_walk(written, LOAD, "", keep_whole))
