"""The docs' generated tables match the code they come from (scripts/gen_docs.py).

docs/server.md's flag table, docs/gates.md's preset keys and docs/records.md's manifest.json and
load.json fields are regenerated in memory here; a page that differs means the code moved and
the page did not: run scripts/gen_docs.py (and write a meaning for any new field it names).
The region mechanism itself is checked on small pages, so these tests can fail.
"""

from __future__ import annotations

import difflib
import subprocess
import sys

import pytest

from scripts import gen_docs
from scripts.doc_tables import manifest_fields, preset_keys, server_flags


def test_every_generated_region_matches_the_code() -> None:
    found = gen_docs.pages()
    assert {p.name for p in found} >= {"docs/server.md", "docs/gates.md", "docs/records.md"}
    drifted = [
        f"{page.name} drifted from the code: {gen_docs.HINT}\n"
        + "\n".join(
            difflib.unified_diff(
                page.current.splitlines(),
                page.wanted.splitlines(),
                page.name,
                "code",
                lineterm="",
                n=0,
            )
        )[:3000]
        for page in found
        if page.drifted
    ]
    assert not drifted, "\n\n".join(drifted)


def test_every_run_file_field_has_a_meaning() -> None:
    missing = [m for page in gen_docs.pages() for m in page.undescribed]
    assert not missing, "\n".join(missing)


def test_the_flag_table_names_every_flag_of_serve_help() -> None:
    from reference_server.api.cli import build_parser

    parser, _ = build_parser()
    table = "\n".join(server_flags())
    for action in parser._actions:
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert f"`{option}" in table, option
    assert "`--engine-core {process,thread}`" in table


def test_the_preset_table_lists_every_key_the_gates_file_accepts() -> None:
    from gate.gates import preset_schema as presets

    table = "\n".join(preset_keys())
    for key, kind in presets._PRESET_KEYS.items():
        if kind != "class":
            assert f"| `{key}` |" in table, key
    for inner in presets._CLASS_KEYS:
        assert f"`interactive.{inner}`, `batch.{inner}`" in table, inner
    assert "`slo`" in table and "start only" in table


def test_manifest_fields_include_what_the_run_adds() -> None:
    names = [f.name for f in manifest_fields()]
    for name in ("observers", "server_args", "gates_source", "calibration", "profiles_not_run",
                 "profiles.<name>.aborted_by_gate", "target.has_metrics"):  # fmt: skip
        assert name in names, name


def _tables(rows: list[str]) -> dict:
    return {"t": lambda old: (rows, [])}


def test_a_region_is_rewritten_and_the_rest_of_the_page_kept() -> None:
    page = "intro\n<!-- generated: t -->\nstale row\n<!-- end generated -->\noutro"
    text, missing = gen_docs.regenerate(page, "p.md", _tables(["| a |", "| b |"]))
    assert text == "intro\n<!-- generated: t -->\n| a |\n| b |\n<!-- end generated -->\noutro"
    assert missing == []
    again, _ = gen_docs.regenerate(text, "p.md", _tables(["| a |", "| b |"]))
    assert again == text


@pytest.mark.parametrize(
    ("page", "message"),
    [
        ("<!-- generated: t -->\nrow", "has no <!-- end generated -->"),
        ("row\n<!-- end generated -->", "without a region start"),
        ("<!-- generated: nope -->\n<!-- end generated -->", "unknown generated region"),
        ("<!-- generated: t -->\n<!-- generated: t -->\n<!-- end generated -->", "has no"),
    ],
)
def test_a_malformed_region_is_refused_by_line(page: str, message: str) -> None:
    with pytest.raises(gen_docs.RegionError, match=message):
        gen_docs.regenerate(page, "p.md", _tables([]))


def test_a_field_table_keeps_meanings_and_names_a_field_without_one() -> None:
    class Field:
        def __init__(self, name: str) -> None:
            self.name, self.type_text = name, "text"

    render = gen_docs._field_table(lambda: [Field("a"), Field("b")], "x.json")
    page = "<!-- generated: f -->\n| `a` | old type | kept \\| as written |\n<!-- end generated -->"
    text, missing = gen_docs.regenerate(page, "p.md", {"f": render})
    assert "| `a` | text | kept \\| as written |" in text
    assert "| `b` | text |  |" in text
    assert missing == ["p.md: x.json field b: write its meaning in the table"]


def test_check_mode_writes_nothing_and_exits_0_on_this_checkout() -> None:
    result = subprocess.run(
        [sys.executable, str(gen_docs.REPO / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
