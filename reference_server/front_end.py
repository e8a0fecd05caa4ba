"""EngineFrontEnd: what both engine front ends share — generate() over RequestStreams (and its
sinks), abort, draining, step listeners and death handlers.

AsyncEngine (the step loop on a thread) and EngineCoreClient (the step loop in a child process)
differ only in how a command reaches the engine; they implement the four `_send_*` hooks and
`is_alive`. It knows nothing about threads, pipes or HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

from reference_server.errors import AdmissionError, EngineDeadError
from reference_server.outputs import RequestOutput
from reference_server.request_streams import RequestStreams, Sink
from reference_server.sampling_params import SamplingParams
from reference_server.step_record import StepRecord

__all__ = ["EngineFrontEnd"]

logger = logging.getLogger(__name__)


class EngineFrontEnd:
    def __init__(self) -> None:
        self._streams = RequestStreams()
        self._listeners: list[Callable[[StepRecord], None]] = []
        self._draining = False

    # -- what a front end provides ----------------------------------------------------------

    def is_alive(self) -> bool:
        raise NotImplementedError

    def _dead_reason(self) -> str | None:
        """Why the engine died, or None while it has not."""
        raise NotImplementedError

    def _send_add(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
        priority: str, arrival_time: float,
    ) -> None:  # fmt: skip
        """Hand the request to the engine; a refusal is delivered to its stream."""
        raise NotImplementedError

    def _send_abort(self, request_id: str) -> None:
        raise NotImplementedError

    def _send_abort_all(self) -> None:
        raise NotImplementedError

    def _send_drain_wait(self) -> None:
        """Ask for the drain waiters to be woken once nothing is unfinished."""
        raise NotImplementedError

    # -- shared behaviour ---------------------------------------------------------------------

    def on_death(self, handler: Callable[[BaseException], None]) -> None:
        """`handler(error)` runs once if the engine dies (after every consumer got its error):
        the server uses it to exit instead of staying half alive."""
        self._streams.on_death(handler)

    async def generate(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        priority: str = "interactive",
        stream: bool = True,
    ) -> AsyncIterator[RequestOutput]:
        """Stream `request_id`'s outputs; errors (validation, admission) raise before the first
        output. Stopping early (aclose, cancellation) aborts the request.

        stream=False yields one output, at the end, with the whole text and token ids (its
        timing fields as usual): a caller that only needs the answer (a Batch API line) then
        costs the event loop one wake-up per request instead of one per step."""
        self._check_alive()
        if self._draining:
            raise AdmissionError("draining")
        arrival = time.monotonic()
        async for output in self._streams.consume(
            request_id,
            stream=stream,
            submit=lambda: self._send_add(request_id, prompt_token_ids, params, priority, arrival),
            abort=lambda: self._send_abort(request_id),
            is_dead=lambda: self._dead_reason() is not None,
        ):
            yield output

    def set_sink(self, request_id: str, sink: Sink) -> None:
        """Have `request_id`'s outputs handled by `sink` where they arrive until it declines
        one (RequestStreams.set_sink); call it from the consumer's loop before each wait."""
        self._streams.set_sink(request_id, sink)

    async def abort(self, request_id: str) -> None:
        self._check_alive()
        self._send_abort(request_id)

    async def drain(self, timeout_seconds: float) -> None:
        """Refuse new requests ("draining"), wait up to `timeout_seconds` for in-flight ones,
        then abort whatever is left (its consumers get finish_reason "abort")."""
        self._draining = True
        if not self.is_alive():
            return
        if not await self._wait_drained(timeout_seconds):
            self._send_abort_all()
            await self._wait_drained(max(1.0, timeout_seconds))

    async def _wait_drained(self, timeout_seconds: float) -> bool:
        event = self._streams.add_drain_waiter()
        self._send_drain_wait()
        try:
            await asyncio.wait_for(event.wait(), timeout_seconds)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            return False
        return True

    def add_step_listener(self, fn: Callable[[StepRecord], None]) -> None:
        self._listeners.append(fn)

    def _notify_listeners(self, record: StepRecord) -> None:
        for listener in self._listeners:
            try:
                listener(record)
            except Exception:  # a broken observer must not stop serving
                logger.exception("step listener failed")

    def _check_alive(self) -> None:
        reason = self._dead_reason()
        if reason is not None:
            raise EngineDeadError(f"the engine died: {reason}")
        if not self.is_alive():
            raise EngineDeadError("the engine is not running")
