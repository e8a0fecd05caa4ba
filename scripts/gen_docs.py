#!/usr/bin/env python3
"""Rewrite the generated regions of the docs from the code: `python scripts/gen_docs.py`.

A region is the text between `<!-- generated: NAME -->` and `<!-- end generated -->` in README.md
or docs/*.md; only those lines change, the rest of each page is left as written. The regions:

- `server-flags` (docs/server.md): every flag of `batchgate serve` / `python -m reference_server`,
  from its argparse parser (reference_server/api/cli.py);
- `preset-keys` (docs/gates.md): every key a gates file's preset may set, from
  gate/gates/preset_schema.py, with the bundled server flag a rollback turns it into and its
  meaning;
- `manifest-fields`, `load-fields` (docs/records.md): the fields of manifest.json and load.json
  as their writers produce them, with the type their readers check (gate/rundir/shapes.py).
  Their `meaning` column is prose kept from the page: a field new in the code gets an empty
  meaning, and this script exits 1 naming it until someone writes one.

`--check` writes nothing and exits 1 when a page differs from what it would write (what
tests/test_docs_generated.py asserts). Exit 0: pages match the code; 1: a page changed or
drifted, or a field lacks its meaning; 2: a region is malformed or names no known table,
or the code cannot be tabled (e.g. a preset key the server has no flag for).
This module owns the regions; the tables come from scripts/doc_tables.py.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
START = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->$")
END = "<!-- end generated -->"
HINT = "run scripts/gen_docs.py"

__all__ = ["HINT", "Page", "RegionError", "main", "pages", "regenerate"]


class RegionError(Exception):
    """A marker without its end, a nested or unknown region."""


class Page:
    """One doc page's text as it is and as the code would have it."""

    def __init__(self, path: Path, current: str, wanted: str, undescribed: list[str]) -> None:
        self.path, self.current, self.wanted, self.undescribed = path, current, wanted, undescribed

    @property
    def name(self) -> str:
        return str(self.path.relative_to(REPO))

    @property
    def drifted(self) -> bool:
        return self.current != self.wanted


def _meanings(lines: list[str]) -> dict[str, str]:
    """`field` -> meaning cell, from the rows of a field table already on the page."""
    found = {}
    for line in lines:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 3 and cells[0].startswith("`") and cells[0].endswith("`"):
            found[cells[0].strip("`")] = cells[2]
    return found


def _field_table(rows_of: Callable[[], list], what: str) -> Callable[[list[str]], tuple]:
    def render(old: list[str]) -> tuple[list[str], list[str]]:
        from scripts.doc_tables import cell

        meanings = _meanings(old)
        lines = ["| field | type (as readers check it) | meaning |", "|---|---|---|"]
        missing = []
        for field in rows_of():
            meaning = meanings.get(field.name, "")
            if not meaning:
                missing.append(f"{what} field {field.name}")
            # The meaning is the page's own Markdown: kept as written, not re-escaped.
            lines.append(f"| `{field.name}` | {cell(field.type_text)} | {meaning} |")
        return lines, missing

    return render


def _tables() -> dict[str, Callable[[list[str]], tuple[list[str], list[str]]]]:
    from scripts import doc_tables

    def fixed(rows_of: Callable[[], list[str]]) -> Callable[[list[str]], tuple]:
        return lambda old: (rows_of(), [])

    return {
        "server-flags": fixed(doc_tables.server_flags),
        "preset-keys": fixed(doc_tables.preset_keys),
        "manifest-fields": _field_table(doc_tables.manifest_fields, "manifest.json"),
        "load-fields": _field_table(doc_tables.load_fields, "load.json"),
    }


def regenerate(text: str, where: str, tables: dict | None = None) -> tuple[str, list[str]]:
    """The page with each generated region rewritten, and the fields left without a meaning."""
    tables = _tables() if tables is None else tables
    out: list[str] = []
    missing: list[str] = []
    lines = text.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        out.append(line)
        index += 1
        match = START.match(line.strip())
        if not match:
            if line.strip() == END:
                raise RegionError(f"{where}:{index}: {END} without a region start")
            continue
        name = match.group(1)
        if name not in tables:
            raise RegionError(f"{where}:{index}: unknown generated region {name!r}")
        body: list[str] = []
        while index < len(lines) and lines[index].strip() != END:
            if START.match(lines[index].strip()):
                raise RegionError(f"{where}:{index + 1}: region {name!r} has no {END}")
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise RegionError(f"{where}: region {name!r} has no {END}")
        rows, undescribed = tables[name](body)
        out += [*rows, lines[index]]
        index += 1
        missing += [f"{where}: {m}: write its meaning in the table" for m in undescribed]
    return "\n".join(out), missing


def pages() -> list[Page]:
    """Every page with a generated region, as it is and as the code would have it."""
    tables = _tables()
    found = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        if "<!-- generated: " not in text:
            continue
        wanted, missing = regenerate(text, str(path.relative_to(REPO)), tables)
        found.append(Page(path, text, wanted, missing))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gen_docs.py", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 on drift")
    args = parser.parse_args(argv)
    # This checkout's code, whatever batchgate an environment has installed.
    sys.path.insert(0, str(REPO))
    from scripts.doc_tables import DocTableError

    try:
        found = pages()
    except (RegionError, DocTableError) as exc:
        print(f"gen_docs: {exc}", file=sys.stderr)
        return 2
    status = 0
    for page in found:
        for problem in page.undescribed:
            print(f"gen_docs: {problem}", file=sys.stderr)
            status = 1
        if not page.drifted:
            continue
        status = 1 if args.check else status
        if args.check:
            print(f"gen_docs: {page.name} differs from the code: {HINT}", file=sys.stderr)
        else:
            page.path.write_text(page.wanted, encoding="utf-8")
            print(f"gen_docs: rewrote the generated regions of {page.name}")
    return status


if __name__ == "__main__":
    sys.exit(main())
