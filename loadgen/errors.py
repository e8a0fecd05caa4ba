"""The load generator's exception tree.

Owns the error types raised at loadgen's edges (bad configuration, unreachable target). It does
not know how errors are shown: only the CLI turns them into messages and exit codes.
"""

from __future__ import annotations

__all__ = ["ConfigError", "LoadgenError", "TargetUnreachableError"]


class LoadgenError(Exception):
    """Base class of every error loadgen raises on purpose."""


class ConfigError(LoadgenError, ValueError):
    """A profile, override or command-line value is invalid (usage error, exit code 2)."""


class TargetUnreachableError(LoadgenError):
    """The target did not answer at start (exit code 5)."""
