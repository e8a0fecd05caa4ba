"""Fixtures for loadgen tests: fake OpenAI servers started on port 0 and stopped afterwards."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lg_support import FakeServer, start_fake_server, stop_fake_server


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[Callable[..., FakeServer]]:
    started: list[FakeServer] = []

    def start(*args: str) -> FakeServer:
        server = start_fake_server(tmp_path, list(args))
        started.append(server)
        return server

    yield start
    for server in started:
        stop_fake_server(server)
