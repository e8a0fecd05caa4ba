"""gate/runtime/heap_policy.py: `batchgate` keeps freed memory in glibc's heap for its own process,
unless glibc's own settings are in the environment; checked in child processes (mallopt is
process-wide) by what it is for: an array freed and made again is not faulted in again."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"), reason="glibc only"
)

# Page faults of nine rounds of arrays of 8, 12 and 16 MiB (1M-2M-row float columns) made and
# freed in turn, as a check makes and drops columns, after a first round that takes the memory.
_PROBE = (
    "import resource, numpy as np\n"
    "{call}\n"
    "def round():\n"
    "    a = np.ones(1 << 20); b = np.ones(3 << 19); del a; c = np.ones(1 << 21); del b, c\n"
    "round()\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(9):\n"
    "    round()\n"
    "print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)\n"
)
_CALL = "from gate.runtime.heap_policy import keep_freed_memory; print(keep_freed_memory())"
_GLIBC_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def _run(call: str, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in _GLIBC_ENV}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(call=call)],
        capture_output=True,
        text=True,
        check=True,
        env={**clean, **env},
    )
    return out.stdout.split()


def test_freed_arrays_are_reused_instead_of_faulted_in_again() -> None:
    (default,) = _run("")
    applied, kept = _run(_CALL)
    assert applied == "True"
    # By default glibc maps the larger arrays afresh and trims the heap's top as they go: here
    # 1,500 faults a round; with the memory kept, none.
    assert int(kept) * 4 < int(default)


def test_the_command_sets_it_before_parsing() -> None:
    (default,) = _run("")
    cli = "from gate.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert int(_run(cli)[-1]) * 4 < int(default)


@pytest.mark.parametrize(
    "env",
    [
        {"MALLOC_TRIM_THRESHOLD_": "131072"},
        {"MALLOC_MMAP_THRESHOLD_": "131072"},
        {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"},
    ],
)
def test_glibcs_own_settings_in_the_environment_win(env) -> None:
    applied, _ = _run(_CALL, **env)
    assert applied == "False"
