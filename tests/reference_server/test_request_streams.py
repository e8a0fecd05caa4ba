"""RequestStreams' sinks: outputs handled where they arrive, in order with those that go through
the consumer's queue, never an error, and never a sink's failure lost."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from reference_server.errors import EngineFailure
from reference_server.outputs import RequestOutput
from reference_server.request_streams import RequestStreams


def _output(index: int, *, finished: bool = False, request_id: str = "r") -> RequestOutput:
    return RequestOutput(
        request_id=request_id, new_token_ids=[index], new_text=str(index), finished=finished,
        finish_reason="length" if finished else None, num_prompt_tokens=1,
        num_output_tokens=index + 1, arrival_time=0.0, first_scheduled_time=None,
        first_token_time=None,
    )  # fmt: skip


class _Recorder:
    """A sink that takes outputs until told to refuse, and says on which thread it ran."""

    def __init__(self) -> None:
        self.taken: list[int] = []
        self.refuse = False
        self.threads: set[int] = set()

    def __call__(self, output: RequestOutput) -> bool:
        self.threads.add(threading.get_ident())
        if self.refuse or output.finished:
            return False
        self.taken.append(output.new_token_ids[0])
        return True


def _consumer(streams: RequestStreams, request_id: str = "r") -> AsyncIterator[RequestOutput]:
    return streams.consume(
        request_id, stream=True, submit=lambda: None, abort=lambda: None, is_dead=lambda: False
    )


async def _next_soon(stream: AsyncIterator[RequestOutput]) -> asyncio.Future[RequestOutput]:
    """The stream's next output as a task, once the consumer is registered and waiting."""
    task = asyncio.ensure_future(stream.__anext__())
    for _ in range(3):
        await asyncio.sleep(0)
    return task


async def _armed() -> tuple[
    RequestStreams, AsyncIterator[RequestOutput], asyncio.Future[RequestOutput], _Recorder
]:
    """Streams with request "r" waiting for its next output and a `_Recorder` as its sink."""
    streams = RequestStreams()
    stream = _consumer(streams)
    waiting = await _next_soon(stream)
    sink = _Recorder()
    streams.set_sink("r", sink)
    return streams, stream, waiting, sink


def _run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_sink_takes_outputs_and_the_consumer_gets_only_what_it_declines():
    async def scenario() -> None:
        streams, _stream, waiting, sink = await _armed()
        streams.publish([_output(0), _output(1)])
        streams.publish([_output(2)])
        assert sink.taken == [0, 1, 2]
        assert not waiting.done()  # the consumer was not woken for them
        streams.publish([_output(3, finished=True)])
        last = await waiting
        assert (last.new_token_ids, last.finished) == ([3], True)
        assert sink.threads == {threading.get_ident()}

    _run(scenario)


def test_a_refusal_drops_the_sink_and_later_outputs_keep_their_order_through_the_queue():
    async def scenario() -> None:
        streams, stream, waiting, sink = await _armed()
        streams.publish([_output(0)])
        sink.refuse = True
        streams.publish([_output(1)])  # refused: the sink is dropped
        sink.refuse = False
        streams.publish([_output(2), _output(3)])  # would be taken, but 1 waits ahead of them
        assert sink.taken == [0]
        assert (await waiting).new_token_ids == [1]
        # Set again while 2 and 3 still wait in the queue: they stay ahead of what comes next.
        streams.set_sink("r", sink)
        streams.publish([_output(4)])
        assert sink.taken == [0]
        assert (await stream.__anext__()).new_token_ids == [2]
        assert (await stream.__anext__()).new_token_ids == [3]
        assert (await stream.__anext__()).new_token_ids == [4]
        # The queue is empty again: a sink set now takes the next output.
        waiting = await _next_soon(stream)
        streams.set_sink("r", sink)
        streams.publish([_output(5)])
        assert sink.taken == [0, 5]
        waiting.cancel()

    _run(scenario)


def test_errors_never_go_to_a_sink():
    async def scenario() -> None:
        streams, _stream, waiting, sink = await _armed()
        streams.deliver("r", EngineFailure("the forward pass failed"))
        with pytest.raises(EngineFailure):
            await waiting
        assert sink.taken == []

    _run(scenario)


def test_a_failing_sink_is_logged_and_its_output_reaches_the_consumer(caplog):
    def broken(output: RequestOutput) -> bool:
        raise RuntimeError("sink bug")

    async def scenario() -> None:
        streams = RequestStreams()
        stream = _consumer(streams)
        waiting = await _next_soon(stream)
        streams.set_sink("r", broken)
        streams.publish([_output(0)])
        assert (await waiting).new_token_ids == [0]
        waiting = await _next_soon(stream)
        streams.publish([_output(1)])  # the broken sink was dropped
        assert (await waiting).new_token_ids == [1]

    with caplog.at_level(logging.ERROR, logger="reference_server.request_streams"):
        _run(scenario)
    assert "stream sink failed for r" in caplog.text


def test_outputs_published_from_another_thread_reach_the_sink_on_the_consumers_loop():
    async def scenario() -> None:
        streams, _stream, waiting, sink = await _armed()
        producer = threading.Thread(
            target=lambda: (
                [streams.publish([_output(i)]) for i in range(5)]
                + [streams.publish([_output(5, finished=True)])]
            )
        )
        producer.start()
        producer.join()
        assert (await waiting).finished
        assert sink.taken == [0, 1, 2, 3, 4]
        assert sink.threads == {threading.get_ident()}

    _run(scenario)


def test_a_sink_for_a_request_not_in_flight_is_ignored_and_other_requests_are_unaffected():
    async def scenario() -> None:
        streams = RequestStreams()
        streams.set_sink("nobody", _Recorder())
        stream_a = _consumer(streams, "a")
        stream_b = _consumer(streams, "b")
        waiting_a = await _next_soon(stream_a)
        waiting_b = await _next_soon(stream_b)
        sink = _Recorder()
        streams.set_sink("a", sink)
        streams.publish([_output(0, request_id="a"), _output(7, request_id="b")])
        assert sink.taken == [0]
        assert (await waiting_b).new_token_ids == [7]
        assert not waiting_a.done()
        waiting_a.cancel()

    _run(scenario)
