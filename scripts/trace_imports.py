#!/usr/bin/env python3
"""Which installed distributions a command's Python processes import, beyond a given set:
`python scripts/trace_imports.py [--allow NAME ...] [--out FILE] -- CMD ARGS...`.

Runs CMD with a `sitecustomize` first on PYTHONPATH that, when each Python process of the tree
exits (the command, and every child started with the same environment: the bundled server, the
Locust process, pytest), writes the top-level names in `sys.modules` to a file of its own. The
names are then mapped to the distributions that provide them
(`importlib.metadata.packages_distributions`); the standard library and the project's own
packages are left out. Prints the distributions imported and those not in the allowed set
(default: the set a GPU machine is assumed to have, `GPU_BASE`, docs/testing.md), and exits 1
when the command failed. A process killed by a signal writes nothing: its imports are missed,
so the command must end its children cleanly (gpu_check does).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from importlib.metadata import packages_distributions
from pathlib import Path

__all__ = ["GPU_BASE", "distributions_of", "main"]

REPO = Path(__file__).resolve().parents[1]
# What a GPU machine with no package index is assumed to have (issue 40's list), as
# distribution names (normalized: lower case, "-" for "_").
GPU_BASE = frozenset(
    {
        "torch", "numpy", "pyyaml", "rich", "httpx", "pytest", "pyarrow", "prometheus-client",
        "psutil", "safetensors", "nvidia-ml-py", "uvloop",
    }
)  # fmt: skip
OWN = frozenset({"gate", "loadgen", "reference_server", "batchgate"})

_SITECUSTOMIZE = """
import atexit, os, sys

def _batchgate_trace_imports():
    directory = os.environ.get("BATCHGATE_TRACE_IMPORTS_DIR")
    if not directory:
        return
    names = sorted({name.split(".")[0] for name in list(sys.modules)})
    path = os.path.join(directory, f"{os.getpid()}.txt")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(" ".join(sys.argv[:3]) + "\\n" + "\\n".join(names) + "\\n")

atexit.register(_batchgate_trace_imports)
"""


def _normalize(name: str) -> str:
    return name.lower().replace("_", "-")


def distributions_of(modules: set[str]) -> dict[str, set[str]]:
    """distribution -> the top-level modules of `modules` it provides (stdlib and own left out)."""
    owners = packages_distributions()
    stdlib = set(sys.stdlib_module_names) | set(sys.builtin_module_names)
    found: dict[str, set[str]] = {}
    for module in modules:
        if module in stdlib or module in OWN or (module.startswith("_") and module[1:] in stdlib):
            continue
        for dist in owners.get(module, []):
            if _normalize(dist) in OWN:
                continue
            found.setdefault(_normalize(dist), set()).add(module)
    return found


def closure(names: set[str], extras: dict[str, set[str]] | None = None) -> set[str]:
    """`names` and every installed distribution they require on this platform, transitively
    (with the extras named in `extras`, else none): what pip installs with them."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import InvalidRequirement, Requirement

    extras = extras or {}
    seen: set[str] = set()
    todo = [_normalize(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:
            continue
        for text in reqs:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            wanted = extras.get(name, set()) | {""}
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(_normalize(req.name))
    return seen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allow", action="append", default=None, help="allowed distribution")
    parser.add_argument("--out", type=Path, help="write the result as JSON here")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    base = {_normalize(a) for a in args.allow} if args.allow else set(GPU_BASE)
    # What pip installs with them comes with them (torch brings sympy, httpx idna, ...).
    allowed = closure(base)
    with tempfile.TemporaryDirectory(prefix="trace-imports-") as tmp:
        site, records = Path(tmp) / "site", Path(tmp) / "records"
        site.mkdir()
        records.mkdir()
        (site / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
        path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "BATCHGATE_TRACE_IMPORTS_DIR": str(records)}
        code = subprocess.call(command, cwd=REPO, env=env)
        modules: set[str] = set()
        processes = []
        for record in sorted(records.glob("*.txt")):
            head, *names = record.read_text(encoding="utf-8").splitlines()
            processes.append(head)
            modules.update(n for n in names if n)
    found = distributions_of(modules)
    extra = sorted(d for d in found if d not in allowed)
    result = {
        "command": command,
        "exit_code": code,
        "processes": processes,
        "imported": {d: sorted(m) for d, m in sorted(found.items())},
        "allowed": sorted(base),
        "beyond_allowed": extra,
        "beyond_allowed_with_their_dependencies": sorted(closure(set(extra)) - allowed),
    }
    print(f"trace_imports: {len(processes)} Python processes; command exit {code}")
    for dist in sorted(found):
        mark = "" if dist in allowed else "   <- beyond the allowed set"
        print(f"  {dist}: {', '.join(sorted(found[dist]))}{mark}")
    print(f"beyond {', '.join(sorted(base))} and their dependencies: {', '.join(extra) or 'none'}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 1 if code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
