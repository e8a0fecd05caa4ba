"""Default test selection for scripts/mutation: which test files exercise a module.

Owns: finding, for a module path such as ``reference_server/api/connections.py``, the test files
under ``tests/`` that import it (wherever they live), and saying why each was chosen.
Does not own: running mutmut, scoring, or the equivalent-mutant list (scripts/mutation).

A test file is selected for a module when
- it imports the module: ``import a.b.m``, ``from a.b import m``, ``from a.b.m import x``, or a
  name that a package's ``__init__`` re-exports from the module (``from loadgen.traces import
  read_trace`` selects ``loadgen/traces/formats.py``);
- a helper it imports (a non-test ``.py`` under ``tests/``, e.g. ``lg_support``, ``fakes``) or a
  ``conftest.py`` on its path imports the module (one level: a helper's own imports count);
- or its name is ``test_<module name>.py`` / ``test_<module name>_*.py`` (the old rule);
- when none of these finds a test: the tests (by the rules above) of the modules of the same
  package that import the module, then of their importers, up to four steps, and the reason
  names the module it went through (``loadgen/replay.py`` is tested through ``loadgen.profiles``).
Tests that only reach a module through a subprocess (a server started with ``python -m``) cannot
kill its mutants in-process anyway: mutmut's coverage and mutant switch live in the test process.

Usage: python scripts/mutation_tests.py [--why] MODULE.py...   (prints one test path a line;
with --why, "path<TAB>reason").
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_name(path: str) -> str:
    """reference_server/api/connections.py -> reference_server.api.connections."""
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class Repo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.tests = root / "tests"
        helpers = [p for p in self.tests.rglob("*.py") if not p.name.startswith("test_")]
        self._reexport_cache: dict[str, dict[str, str]] = {}
        self._import_cache: dict[Path, frozenset[str]] = {}
        self._helpers_by_stem: dict[str, list[Path]] = {}
        for p in helpers:
            self._helpers_by_stem.setdefault(p.stem, []).append(p)

    def _is_module(self, dotted: str) -> Path | None:
        base = self.root.joinpath(*dotted.split("."))
        if base.with_suffix(".py").is_file():
            return base.with_suffix(".py")
        if (base / "__init__.py").is_file():
            return base / "__init__.py"
        return None

    def _reexports(self, package: str) -> dict[str, str]:
        """name -> submodule (dotted) for `from .sub import name` in package/__init__.py."""
        if package not in self._reexport_cache:
            self._reexport_cache[package] = self._read_reexports(package)
        return self._reexport_cache[package]

    def _read_reexports(self, package: str) -> dict[str, str]:
        init = self.root.joinpath(*package.split("."), "__init__.py")
        out: dict[str, str] = {}
        if not init.is_file():
            return out
        try:
            tree = ast.parse(init.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            return out
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(node, package, is_package=True)
                if source is None:
                    continue
                for alias in node.names:
                    out[alias.asname or alias.name] = source
        return out

    def direct_imports(self, path: Path) -> frozenset[str]:
        """Dotted names of the modules a file imports (package re-exports resolved)."""
        if path not in self._import_cache:
            self._import_cache[path] = self._read_imports(path)
        return self._import_cache[path]

    def _read_imports(self, path: Path) -> frozenset[str]:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            return frozenset()
        found: set[str] = set()
        package = module_name(str(path.relative_to(self.root)))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    found.add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(node, package, is_package=is_package)
                if source is None:
                    continue
                found.add(source)
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    if self._is_module(sub):
                        found.add(sub)
                    else:
                        self._follow_reexport(source, alias.name, found, depth=0)
        return frozenset(found)

    def _follow_reexport(self, package: str, name: str, found: set[str], depth: int) -> None:
        origin = self._reexports(package).get(name)
        if origin is None or depth > 4:
            return
        found.add(origin)
        if self._is_module(f"{origin}.{name}"):
            found.add(f"{origin}.{name}")
        elif origin != package:
            self._follow_reexport(origin, name, found, depth + 1)

    def helper_files(self, test: Path, imports: frozenset[str]) -> list[Path]:
        """Helpers under tests/ a test imports by bare or dotted name, plus conftest.py files."""
        out: list[Path] = []
        for dotted in imports:
            stem = dotted.rsplit(".", 1)[-1]
            candidates = self._helpers_by_stem.get(stem, [])
            if dotted.startswith("tests."):
                candidates = [
                    c for c in candidates if module_name(str(c.relative_to(self.root))) == dotted
                ]
            local = [c for c in candidates if c.parent == test.parent]
            out.extend(local or candidates)
        directory = test.parent
        while directory == self.tests or self.tests in directory.parents:
            conftest = directory / "conftest.py"
            if conftest.is_file():
                out.append(conftest)
            directory = directory.parent
        return out

    def test_files(self) -> list[Path]:
        return sorted(p for p in self.tests.rglob("test_*.py") if p.is_file())


def _absolute(node: ast.ImportFrom, package: str, *, is_package: bool) -> str | None:
    if node.level == 0:
        return node.module
    parts = package.split(".")
    if not is_package:
        parts = parts[:-1]
    if node.level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else [])) or None


def select(root: Path, modules: list[str]) -> list[tuple[str, str]]:
    """[(test path relative to root, reason)] for the modules, in path order, no duplicates."""
    repo = Repo(root)
    chosen: dict[str, list[str]] = {}
    for module in modules:
        found = _select_one(repo, module)
        if not found:
            found = _select_through_importers(repo, module)
        for path, reason in found.items():
            chosen.setdefault(path, []).append(reason)
    return sorted((path, "; ".join(reasons)) for path, reasons in chosen.items())


def _importers_of(repo: Repo, dotted: set[str], top: str) -> dict[str, str]:
    """module name -> file of the package `top`'s modules that import one of `dotted`."""
    out: dict[str, str] = {}
    for path in sorted((repo.root / top).rglob("*.py")):
        name = module_name(str(path.relative_to(repo.root)))
        if name not in dotted and repo.direct_imports(path) & dotted:
            out[name] = str(path.relative_to(repo.root))
    return out


def _select_through_importers(repo: Repo, module: str) -> dict[str, str]:
    """No test imports `module`: the tests of the nearest modules of its package that import
    it (its importers, then theirs, ...), so a module used only through another is still
    tested by what exercises it. The reason names the chain of imports."""
    seen = {module_name(module)}
    chains = {module_name(module): module}  # module name -> "b.py, which imports a.py"
    top = Path(module).parts[0]
    for _ in range(4):
        nxt: dict[str, str] = {}
        for name, path in _importers_of(repo, set(chains), top).items():
            imported = repo.direct_imports(repo.root / path) & set(chains)
            nxt[name] = f"{path}, which imports {chains[sorted(imported)[0]]}"
        if not nxt:
            return {}
        found: dict[str, str] = {}
        for _name, chain in sorted(nxt.items()):
            path = chain.split(",", 1)[0]
            for test in _select_one(repo, path, by_name=False):
                found.setdefault(test, f"imports {chain}")
        if found:
            return found
        chains = {k: v for k, v in nxt.items() if k not in seen}
        seen |= set(chains)
    return {}


def _select_one(repo: Repo, module: str, *, by_name: bool = True) -> dict[str, str]:
    wanted = module_name(module)
    stem = Path(module).stem
    found: dict[str, str] = {}
    for test in repo.test_files():
        rel = str(test.relative_to(repo.root))
        reasons: list[str] = []
        own = repo.direct_imports(test)
        if wanted in own:
            reasons.append(f"imports {module}")
        else:
            for helper in repo.helper_files(test, own):
                if wanted in repo.direct_imports(helper):
                    reasons.append(f"imports {module} (via {helper.relative_to(repo.root)})")
                    break
        if by_name and (test.stem == f"test_{stem}" or test.stem.startswith(f"test_{stem}_")):
            reasons.append(f"named test_{stem}*")
        if reasons:
            found[rel] = "; ".join(reasons)
    return found


def main(argv: list[str]) -> int:
    why = "--why" in argv
    modules = [a for a in argv if a != "--why"]
    root = Path(__file__).resolve().parent.parent
    for path, reason in select(root, modules):
        print(f"{path}\t{reason}" if why else path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
