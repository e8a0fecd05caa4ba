"""The engine core's read of commands between steps (engine_core/core.py `_Core._read_commands`):
every waiting command is applied, none waiting returns at once, and an API process that hung up
ends the core's loop with EOFError, busy or idle. A real socket pair; the engine is a stand-in
that records aborts (the only engine call ABORT makes)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection

import pytest

from reference_server.engine_core import wire
from reference_server.engine_core.core import _Core


class _AbortRecorder:
    def __init__(self) -> None:
        self.aborted: list[str] = []

    def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)


@pytest.fixture
def pair() -> Iterator[tuple[_Core, _AbortRecorder, Connection]]:
    core_sock, api_sock = socket.socketpair()
    engine = _AbortRecorder()
    core_conn, api_conn = Connection(core_sock.detach()), Connection(api_sock.detach())
    yield _Core(engine, core_conn), engine, api_conn  # type: ignore[arg-type]
    core_conn.close()
    if not api_conn.closed:
        api_conn.close()


def test_between_steps_nothing_waiting_returns_false_without_waiting(pair):
    core, engine, _ = pair
    started = time.monotonic()
    assert core._read_commands(0.0) is False
    assert time.monotonic() - started < 1.0
    assert engine.aborted == []


def test_between_steps_every_waiting_command_is_applied_in_order(pair):
    core, engine, api = pair
    for request_id in ("a", "b", "c"):
        api.send_bytes(wire.encode((wire.ABORT, request_id)))
    assert core._read_commands(0.0) is True
    assert engine.aborted == ["a", "b", "c"]
    assert core._read_commands(0.0) is False  # all were read the first time


def test_a_blocking_wait_returns_when_a_command_arrives_or_times_out(pair):
    core, engine, api = pair
    assert core._read_commands(0.05) is False
    api.send_bytes(wire.encode((wire.ABORT, "late")))
    assert core._read_commands(5.0) is True
    assert engine.aborted == ["late"]


@pytest.mark.parametrize("timeout", [0.0, 5.0], ids=["stepping", "idle"])
def test_an_api_process_that_hung_up_ends_the_loop(pair, timeout):
    core, engine, api = pair
    api.send_bytes(wire.encode((wire.ABORT, "last")))
    api.close()
    # What was sent before the hang-up is still applied; then end-of-file, which the core's
    # entry point takes as "the API process went away".
    with pytest.raises(EOFError):
        core._read_commands(timeout)
    assert engine.aborted == ["last"]
    with pytest.raises(EOFError):
        core._read_commands(timeout)
