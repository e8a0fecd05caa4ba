#!/usr/bin/env python3
"""Report import cycles inside Python packages: `python scripts/import_cycles.py PACKAGE_DIR...`.

Parses every module of each package with `ast` (nothing is imported or run), resolves its imports
to modules of the packages given, and reports each strongly connected component of more than one
module. Every import counts: module level, inside functions and classes, under
`if TYPE_CHECKING:` (unless --runtime-only), relative (`from . import x`, `from ..a import b`)
and absolute; dynamic imports (`importlib.import_module`) are not seen. A module's name is its
path relative to the repository root (the git top level; --root overrides), so `gate/__init__.py`
is `gate` and `gate/report/html.py` is `gate.report.html`.

`from pkg import name` counts as an import of `pkg.name` when that is a module, else of `pkg`;
importing `a.b.c` also runs `a/__init__` and `a/b/__init__`, and those edges count too (except
the packages containing the importer: an `__init__` importing its own submodules is fine). Exit
status: 0 no cycle, 1 cycles found (listed on stdout), 2 usage error. Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["find_cycles", "import_graph", "main", "module_files"]


def repo_root(start: Path) -> Path:
    """The git top level containing `start`; without git, the directory above its packages."""
    try:
        out = subprocess.run(
            ["git", "-C", str(start), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return Path(out).resolve()
    except (OSError, subprocess.CalledProcessError):
        root = start.resolve()
        while (root / "__init__.py").is_file():
            root = root.parent
        return root


def module_files(package_dir: Path, root: Path) -> dict[str, Path]:
    """Module name -> file for every `.py` file under `package_dir`, named relative to `root`."""
    out: dict[str, Path] = {}
    for path in sorted(package_dir.resolve().rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if not parts or any(not p.isidentifier() for p in parts):
            continue  # not importable under this name (a script directory, `foo-bar.py`)
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST, runtime_only: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement anywhere in `node` (functions, classes, try/if blocks)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
        return
    if runtime_only and isinstance(node, ast.If) and _is_type_checking(node.test):
        children: Iterable[ast.AST] = node.orelse
    else:
        children = ast.iter_child_nodes(node)
    for child in children:
        yield from _import_nodes(child, runtime_only)


def _imported_names(
    tree: ast.AST, module: str, is_package: bool, runtime_only: bool
) -> Iterator[tuple[str, str]]:
    """(base, name) pairs: `import a.b` -> ("a.b", ""), `from a import b` -> ("a", "b")."""
    for node in _import_nodes(tree, runtime_only):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ""
            continue
        base = node.module or ""
        if node.level:  # relative: anchored at the module's package
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            up = node.level - 1
            if up >= len(anchor):
                continue  # beyond the top-level package: an error Python reports, not ours
            anchor = anchor[: len(anchor) - up]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            yield base, "" if alias.name == "*" else alias.name


def import_graph(modules: dict[str, Path], *, runtime_only: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of `modules` it imports, with the package inits that run first.

    Importing `a.b.c` runs `a`, `a.b` and `a.b.c`: all three are edges, except the packages that
    contain the importing module (they are already being imported; an `__init__` importing its
    own submodules is fine). Importing a containing package by name (`from a import x`, x not a
    module) is an edge. Self-imports are ignored.
    """
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for base, name in _imported_names(tree, module, is_package, runtime_only):
            target = f"{base}.{name}" if name and f"{base}.{name}" in modules else base
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                dep = ".".join(parts[:i])
                if dep not in modules or dep == module:
                    continue
                if module.startswith(dep + ".") and dep != target:
                    continue  # a containing package, reached only on the way to a submodule
                graph[module].add(dep)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        # iterative Tarjan: (node, iterator over its successors)
        work: list[tuple[str, Iterator[str]]] = []
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        work.append((start, iter(sorted(graph[start]))))
        while work:
            node, succ = work[-1]
            advanced = False
            for nxt in succ:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return sorted(out)


def _cycle_path(comp: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle through the component's first module, for the report."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt_frontier: list[str] = []
        for node in frontier:
            for dep in sorted(graph[node] & members):
                if dep == start:
                    path = [start]
                    cur = node
                    while cur != start:
                        path.append(cur)
                        cur = prev[cur]
                    return [start, *reversed(path[1:]), start]
                if dep not in prev:
                    prev[dep] = node
                    nxt_frontier.append(dep)
        frontier = nxt_frontier
    return comp


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="import_cycles.py", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("packages", nargs="+", type=Path, metavar="PACKAGE_DIR")
    parser.add_argument(
        "--root", type=Path, help="directory module names are relative to (default: git top level)"
    )
    parser.add_argument(
        "--runtime-only",
        action="store_true",
        help="ignore imports under `if TYPE_CHECKING:` (they never run)",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    modules: dict[str, Path] = {}
    for package in args.packages:
        if not package.is_dir():
            print(f"import_cycles.py: {package} is not a directory", file=sys.stderr)
            return 2
        root = (args.root or repo_root(package)).resolve()
        try:
            modules.update(module_files(package, root))
        except ValueError:
            print(f"import_cycles.py: {package} is not under {root}", file=sys.stderr)
            return 2
    try:
        graph = import_graph(modules, runtime_only=args.runtime_only)
    except SyntaxError as exc:
        print(f"import_cycles.py: cannot parse {exc.filename}: {exc.msg}", file=sys.stderr)
        return 2
    cycles = find_cycles(graph)
    names = ", ".join(str(p) for p in args.packages)
    if not cycles:
        print(f"no import cycle in {names} ({len(modules)} modules)")
        return 0
    print(f"{len(cycles)} import cycle(s) in {names}:")
    for comp in cycles:
        print(f"  {len(comp)} modules: {', '.join(comp)}")
        print(f"    e.g. {' -> '.join(_cycle_path(comp, graph))}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
