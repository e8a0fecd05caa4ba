"""The process table as the tests see it: which live processes mention a text.

Shared by the end-to-end tests (nothing a run started outlives it) and the orchestrator's
child-process tests (stopping a child ends its whole group).
"""

from __future__ import annotations

import psutil


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line contains `text` (a run directory path, a marker)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(text in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
