"""Loadgen profiles under the plain `locust` command (headless, web UI, master/worker).

    locust -f loadgen/locustfile.py --headless -u 1 -r 1 --host http://127.0.0.1:8000 \
        --loadgen-profile burst --loadgen-scale smoke --loadgen-out runs/burst

The profile sets the offered rate; `-u N` only splits its schedule over N users (each sends every
N-th request, once), in one process or over workers (`-u` a multiple of the worker count). A
split that cannot be exact (e.g. `-u 3` over 2 workers, a load shape) is refused with exit code
2. Options also come from env vars (LOADGEN_PROFILE, LOADGEN_SCALE, LOADGEN_OVERRIDES_JSON,
LOADGEN_OUT, LOADGEN_MODEL, LOADGEN_API_KEY). Owns only the hooks; everything else is in the
`loadgen.locust` package. It stays at this path for `locust -f` users.
"""

from __future__ import annotations

import sys
from typing import Any

from locust import events

from loadgen.errors import LoadgenError
from loadgen.locust.install import install
from loadgen.locust.options import add_arguments
from loadgen.locust.user import DriverUser

__all__ = ["DriverUser"]


@events.init_command_line_parser.add_listener
def _add_arguments(parser: Any, **_: Any) -> None:
    add_arguments(parser)


@events.init.add_listener
def _install(environment: Any, **_: Any) -> None:
    try:
        install(environment)
    except (LoadgenError, ValueError) as exc:  # bad profile/overrides: a usage error, no trace
        print(f"loadgen: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
