"""No run-directory file, however damaged, gives a traceback; a damaged one never passes.

A property test: hypothesis mutates one JSON file of a small run (a synthetic burst + steady run
with a real smoke run's manifest.json, calibration.json and load.json sections) — a value of
another JSON kind, a key removed, a key added, the file cut short, one line of steps.jsonl or
scrapes.jsonl changed — and runs a command that reads it, in process. Every outcome is an exit
code of docs/exit-codes.md without a traceback. A damaged file (a value of the wrong kind where
the reader's shape is fixed, a key a judgement needs removed, a cut file) never exits 0 or 1;
an unknown key added to an object changes nothing.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rundir_builder import make_run

from gate import json_shapes
from gate.calibration.content import CALIBRATION
from gate.cli import main
from gate.rundir import shapes
from gate.rundir.consistency import REQUIRED_LOAD_KEYS

FIXTURES = Path(__file__).parent / "fixtures"
DOCUMENTED_CODES = {0, 1, 2, 3, 4, 5}
REPLACEMENTS = {
    "text": "x",
    "int": 7,
    "bool": True,
    "list": [1],
    "object": {"k": 1},
}

# Per file: its shape (None: a JSONL file, below), the keys a judgement needs, and the commands
# that read it ("report --saved" and "compare" read verdicts.json; `check` rewrites it).
FILES: dict[str, dict[str, Any]] = {
    "manifest.json": {"shape": shapes.MANIFEST, "required": ("ended", "profiles")},
    "burst/load.json": {"shape": shapes.LOAD, "required": REQUIRED_LOAD_KEYS},
    "steady/load.json": {"shape": shapes.LOAD, "required": REQUIRED_LOAD_KEYS},
    "calibration.json": {"shape": CALIBRATION, "required": ()},
    "verdicts.json": {
        "shape": shapes.VERDICTS,
        "required": ("schema_version", "exit_code", "verdicts", *shapes.VERDICT_KEYS),
        "commands": ("report --saved", "compare"),
    },
}
# One line of an observer file; its fields the gate reads (others are the server's own).
STEP_SHAPE = json_shapes.obj(
    seq=json_shapes.NUMBER,
    **{name: json_shapes.NUMBER for name in ("t", "duration_seconds", "num_prefill_tokens",
                                        "num_recomputed_tokens", "num_preemptions",
                                        "num_kv_blocks_used", "num_kv_blocks_total")},
    num_waiting=json_shapes.mapping(json_shapes.NUMBER),
    num_running=json_shapes.mapping(json_shapes.NUMBER),
)  # fmt: skip
LINES: dict[str, Any] = {"burst/steps.jsonl": STEP_SHAPE, "burst/scrapes.jsonl": shapes.SCRAPE}
COMMANDS = ("check", "report --saved", "compare", "baseline save")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """The clean run, judged once (verdicts.json, the Parquet copies): it passes."""
    root = make_run(tmp_path_factory.mktemp("damaged") / "run")
    (root / "manifest.json").write_text((FIXTURES / "smoke_manifest.json").read_text())
    shutil.copy(FIXTURES / "smoke_calibration.json", root / "calibration.json")
    shutil.copy(FIXTURES / "damage_gates.yaml", root / "gates.yaml")
    load = json.loads((root / "steady" / "load.json").read_text())
    load.update(json.loads((FIXTURES / "smoke_load_sections.json").read_text()))
    (root / "steady" / "load.json").write_text(json.dumps(load))
    code, out, err = _run(["check", str(root)])
    assert code == 0, out + err
    return root


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)  # an exception here is the traceback the property forbids
    return code, out.getvalue(), err.getvalue()


def _command(name: str, run: Path, pristine: Path, scratch: Path) -> list[str]:
    return {
        "check": ["check", "--no-write", str(run)],
        "report --saved": ["report", "--saved", str(run), "--out", str(scratch / "r.html")],
        "compare": ["compare", str(pristine), str(run), "--json"],
        "baseline save": [
            "baseline",
            "--baseline-dir",
            str(scratch / "b"),
            "save",
            str(run),
            "--name",
            "b",
        ],
    }[name]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):  # a few items of each list
            found += _paths(item, (*prefix, index))
    return found


def _shape_at(shape: json_shapes.Shape | None, path: tuple[Any, ...]) -> json_shapes.Shape | None:
    """The declared shape of the value at `path`; None where the file's shape leaves it free
    (a settings object, params, a field the reader does not name, a value of several kinds)."""
    for step in path:
        if shape is None or shape.kind in ("any", "oneof"):
            return None
        if shape.kind == "object":
            shape = shape.fields.get(step)
        elif shape.kind in ("map", "list"):
            shape = shape.item
        else:
            return None
    return None if shape is None or shape.kind in ("any", "oneof") else shape


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "int"  # a number of another kind (7 for 2.5) may be right: never offered
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "list"
    return "object" if isinstance(value, dict) else "null"


def _mutate(
    doc: Any, shape: json_shapes.Shape, required: tuple[str, ...], data
) -> tuple[Any, bool | None]:
    """(mutated document, damaged?): True must not pass, False must not change the verdict,
    None may go either way (a free part of the file)."""
    op = data.draw(st.sampled_from(("type", "delete", "extra")), label="op")
    paths = [p for p in _paths(doc) if op != "extra" or isinstance(_get(doc, p), dict)]
    if op == "extra":
        paths.append(())
    path = data.draw(st.sampled_from(paths), label="path")
    *parent_path, last = path or (None,)
    declared = _shape_at(shape, path)
    if op == "type":
        original = _get(doc, path)
        if original is None:
            return doc, None  # null where the field may be text or a number: no wrong kind known
        kind = data.draw(st.sampled_from(sorted(set(REPLACEMENTS) - {_kind(original)})))
        _get(doc, tuple(parent_path))[last] = REPLACEMENTS[kind]
        return doc, declared is not None or None
    if op == "delete":
        container = _get(doc, tuple(parent_path))
        if not isinstance(container, dict):
            return doc, None
        del container[last]
        parent_shape = _shape_at(shape, tuple(parent_path)) if parent_path else shape
        is_object = parent_shape is not None and parent_shape.kind == "object"
        return doc, True if last in required and is_object else None
    target = _get(doc, path)
    value = data.draw(st.sampled_from(list(REPLACEMENTS.values())), label="value")
    target["zz_unknown"] = value
    declared_object = (declared if path else shape) is not None and (
        (declared if path else shape).kind == "object"
    )
    return doc, False if declared_object else None


def _check(code: int, out: str, err: str, damaged: bool | None) -> None:
    assert code in DOCUMENTED_CODES, (code, err)
    assert "Traceback" not in out + err
    if damaged is True:
        assert code not in (0, 1), (code, out[-2000:], err)
    if damaged is False:
        assert code == 0, (code, out[-2000:], err)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_damaged_json_file_never_passes_and_never_crashes(pristine, data):
    name = data.draw(st.sampled_from(sorted(FILES)), label="file")
    spec = FILES[name]
    command = data.draw(st.sampled_from(spec.get("commands", COMMANDS)), label="command")
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / "run"
        shutil.copytree(pristine, run)
        path = run / name
        text = path.read_text()
        if data.draw(st.booleans(), label="cut"):
            cut = data.draw(st.integers(1, len(text) - 2), label="at")
            path.write_text(text[:cut])
            damaged: bool | None = True
        else:
            doc, damaged = _mutate(json.loads(text), spec["shape"], spec["required"], data)
            path.write_text(json.dumps(doc))
        _check(*_run(_command(command, run, pristine, Path(scratch))), damaged)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_a_damaged_observer_line_never_passes_and_never_crashes(pristine, data):
    name = data.draw(st.sampled_from(sorted(LINES)), label="file")
    command = data.draw(st.sampled_from(COMMANDS), label="command")
    with tempfile.TemporaryDirectory() as scratch:
        run = Path(scratch) / "run"
        shutil.copytree(pristine, run)
        path = run / name
        lines = path.read_text().splitlines()
        index = data.draw(st.integers(0, len(lines) - 2), label="line")  # not the last line
        if data.draw(st.booleans(), label="cut"):
            lines[index] = lines[index][: data.draw(st.integers(1, len(lines[index]) - 1))]
            damaged: bool | None = True
        else:
            doc, damaged = _mutate(json.loads(lines[index]), LINES[name], (), data)
            lines[index] = json.dumps(doc)
        path.write_text("\n".join(lines) + "\n")
        _check(*_run(_command(command, run, pristine, Path(scratch))), damaged)


@pytest.mark.parametrize(
    ("name", "edit", "message"),
    [
        ("manifest.json", {"profiles": "oops"}, "manifest.json: profiles: expected an object"),
        ("manifest.json", {"target": "x"}, "manifest.json: target: expected an object"),
        ("burst/load.json", {"window": "x"}, "load.json: window: expected an object"),
    ],
)
@pytest.mark.parametrize("command", COMMANDS)
def test_the_issues_cases_name_file_and_field_with_exit_5(pristine, tmp_path, name, edit,
                                                          message, command):  # fmt: skip
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    doc = json.loads((run / name).read_text())
    doc.update(edit)
    (run / name).write_text(json.dumps(doc))
    code, _out, err = _run(_command(command, run, pristine, tmp_path))
    assert code == 5 and message in err and "Traceback" not in err
