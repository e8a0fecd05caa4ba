"""One worker's load session: sends its share of the plan on time, under gevent.

Owns the open-loop scheduler (each planned request starts in its own greenlet at its planned
time, whether or not earlier ones finished, up to the concurrency cap, beyond which it waits and
the wait shows as schedule lag), the closed-loop alternative (N users with think time), draining
and cancellation, and the worker's summary (lags, CPU, counts). It runs only inside a gevent-
patched process (Locust's); records go to a `sink` callable. It does not know where records end
up, nor about Locust's runners.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import math
import time
from collections.abc import Callable
from typing import Any

import gevent
import gevent.event
import gevent.lock
import gevent.pool

from loadgen.client import ClientConfig, OpenAIClient, RequestCancelled
from loadgen.config import RunConfig
from loadgen.conversations import ConversationFactory
from loadgen.cpu import CpuMeter
from loadgen.deadline import DeadlineTimer
from loadgen.httpconn import parse_target
from loadgen.lengths import LengthDist
from loadgen.plan import PlannedRequest, RequestFactory, build_plan
from loadgen.probes import PROBE_SET, probe_request, probe_schedule
from loadgen.profiles import ProfileSpec
from loadgen.records import RequestRecord
from loadgen.release import PREPARE_LEAD_SECONDS, Member, Release

__all__ = ["LoadSession"]

_CPU_SAMPLE_SECONDS = 1.0


class LoadSession:
    def __init__(
        self,
        *,
        config: RunConfig,
        spec: ProfileSpec,
        worker_index: int,
        worker_count: int,
        sink: Callable[[RequestRecord], None],
    ) -> None:
        self.config = config
        self.spec = spec
        self.worker_index = worker_index
        self.worker_count = worker_count
        self.sink = sink
        p = spec.params
        self.client = OpenAIClient(
            parse_target(config.target_url),
            ClientConfig(
                model=config.model,
                endpoint=p["endpoint"],
                stream=bool(p["stream"]),
                api_key=config.api_key,
                request_timeout_seconds=float(p["request_timeout_seconds"]),
                extra_body=dict(p["extra_body"]),
                # "auto" left unresolved (plain Locust) is "off": safe on any target.
                continuous_usage=p["continuous_usage"] == "on",
                drop_fields=frozenset(p["drop_fields"]),
            ),
        )
        self.cap = gevent.lock.BoundedSemaphore(int(p["max_concurrency"]))
        self.group = gevent.pool.Group()
        self.probe_group = gevent.pool.Group()  # consistency probes in flight (loadgen.probes)
        self.lags: list[float] = []
        self.planned = 0
        self.sent = 0
        self.cap_reached = 0
        self.stopping = False
        self.cpu = CpuMeter()
        # Planned before the start time arrives: planning must not eat into the schedule.
        self.plan: list[PlannedRequest] = []
        if spec.mode == "open":
            self.plan = build_plan(spec, worker_index=worker_index, worker_count=worker_count)

    # -- open loop -------------------------------------------------------------------------
    def run(self, t0: float) -> dict[str, Any]:
        """Run to the end of the schedule plus drain; returns the worker summary."""
        self.cpu = CpuMeter()  # from here: planning (in __init__) is not the run's CPU
        sampler = gevent.spawn(self._sample_cpu)
        interrupted = False
        try:
            if self.spec.driver != "probes" and self.worker_index == 0:
                self._spawn(self.group, self._run_probes, t0)
            if self.spec.driver == "probes":
                self._run_probes_alone(t0)
            elif self.spec.driver == "sessions":
                self._run_sessions(t0)
            elif self.spec.mode == "closed":
                self._run_closed(t0)
            else:
                self._run_open(t0)
            self._drain(timeout_seconds=float(self.spec.params["request_timeout_seconds"]) + 1.0)
        except gevent.GreenletExit:  # the runner stops this user (Ctrl-C, SIGTERM, UI stop)
            interrupted = True
            self.stop()
        finally:
            sampler.kill()
            self.cpu.sample()
            self.client.close()
        return self.summary(interrupted=interrupted)

    def _run_open(self, t0: float) -> None:
        self.planned = len(self.plan)
        # A trace conversation's turn waits for its parent's answer (docs/traces.md).
        answered = {r.chat_id: gevent.event.Event() for r in self.plan if r.chat_id is not None}
        timer = DeadlineTimer()  # gevent.sleep wakes up to ~1 ms late (loadgen/deadline.py)
        pending: collections.deque[tuple[float, Release]] = collections.deque()
        try:
            # Each instant's requests are prepared ahead and released at it (loadgen/release.py).
            for offset, requests in itertools.groupby(self.plan, key=lambda r: r.offset_seconds):
                planned_at = t0 + offset
                if not self._release_until(pending, planned_at - PREPARE_LEAD_SECONDS, timer):
                    return
                release = Release()
                for req in requests:
                    if self.cap.locked():
                        self.cap_reached += 1
                    if answered:
                        self._spawn(self.group, self._turn, req, planned_at, answered, release)
                    else:
                        self._spawn(self.group, self._one, req, planned_at, release=release)
                pending.append((planned_at, release))
            self._release_until(pending, math.inf, timer)
        finally:
            timer.close()

    def _release_until(
        self, pending: collections.deque[tuple[float, Release]], until: float, timer: DeadlineTimer
    ) -> bool:
        """Release each pending instant at its time up to `until`, then sleep until `until`
        (when finite). False once the session is stopping (nothing more is released)."""
        while pending and pending[0][0] <= until:
            at, release = pending.popleft()
            timer.sleep_until(at)
            if self.stopping:
                return False
            release.release()
        if math.isfinite(until):
            timer.sleep_until(until)
        return not self.stopping

    def _turn(
        self,
        req: PlannedRequest,
        planned_at: float,
        answered: dict[str, gevent.event.Event],
        release: Release,
    ) -> None:
        """A trace turn: sent at its time, but not before its parent answered; the wait for
        the parent is the conversation's, not client lag, so the turn is planned at its end."""
        member = release.member()
        parent = answered.get(req.parent) if req.parent is not None else None
        try:
            if parent is not None and not parent.is_set():
                parent.wait()
                planned_at = max(planned_at, time.monotonic())
            self._one(req, planned_at, member=member)
        finally:
            member.settle()
            if req.chat_id is not None:
                answered[req.chat_id].set()

    def _one(
        self,
        req: PlannedRequest,
        planned_at: float,
        *,
        answer: list[str] | None = None,
        record_id: str | None = None,
        release: Release | None = None,
        member: Member | None = None,
    ) -> RequestRecord:
        """One request, recorded. In the open loop it is prepared ahead and sent when its
        instant is released (`release`, or `member` of one already joined)."""
        if member is None and release is not None:
            member = release.member()
        rec = RequestRecord(
            id=record_id or f"{self.worker_index}-{req.index}",
            profile=self.spec.name,
            stage=req.stage,
            priority=req.priority,
            length_class=req.length_class,
            endpoint=self.spec.params["endpoint"],
            stream=bool(self.spec.params["stream"]),
            max_tokens=req.max_tokens,
            planned_at=planned_at,
            prompt_tokens=req.prompt_tokens,
            worker=self.worker_index,
            session=req.session,
            turn=req.turn,
            trace_index=req.trace_index,
            probe=req.probe,
        )
        if req.probe is not None and answer is None:
            answer = []
        try:
            with self.cap:
                if member is None:
                    self.client.send(req, rec, answer=answer)
                else:
                    self.client.send(
                        req, rec, answer=answer, before_send=member.wait, on_written=member.written
                    )
        except RequestCancelled:  # killed while waiting for a concurrency slot
            rec.status, rec.error = "cancelled", "cancelled before sending (waiting for a slot)"
        finally:
            if member is not None:
                member.settle()  # never written (refused, cancelled): not awaited any more
        if req.probe is not None and rec.status == "ok" and answer is not None:
            rec.probe_answer = "".join(answer)
        if rec.sent_at is not None:
            self.sent += 1
            self.lags.append(rec.sent_at - rec.planned_at)
        self.sink(rec)
        return rec

    # -- answer-consistency probes (loadgen.probes) ------------------------------------------
    def _run_probes(self, t0: float) -> None:
        """This profile's probes, a group at a time, spread over its schedule (worker 0 only:
        one worker's share is the profile's). A closed loop or sessions that ended early end
        the probes too: a probe sent to an idle server would not be under the profile's load."""
        count = int(self.spec.params.get("probes") or 0)
        duration = self.spec.schedule.duration_seconds
        numbers = itertools.count()  # the probe records' ids: `<worker>-p<n>`
        for offset, members in probe_schedule(count, duration):
            delay = t0 + offset - time.monotonic()
            if delay > 0:
                gevent.sleep(delay)
            if self.stopping or (self.spec.mode == "closed" and len(self.group) <= 1):
                break
            stage = self._stage_at(offset)
            for index in members:
                req = probe_request(
                    PROBE_SET[index], index=next(numbers), offset_seconds=offset, stage=stage
                )
                self.planned += 1
                self._spawn(self.probe_group, self._probe_one, req, t0 + offset)
        self.probe_group.join()

    def _probe_one(self, req: PlannedRequest, planned_at: float) -> None:
        self._one(req, planned_at, record_id=f"{self.worker_index}-p{req.index}")

    def _stage_at(self, offset: float) -> str:
        tick = self.spec.schedule.tick(offset)
        return tick.stage if tick is not None else self.spec.schedule.stages[-1].name

    def _run_probes_alone(self, t0: float) -> None:
        """The `consistency_probes` profile: every probe of the set, once, each alone (the
        previous answered and a pause passed), the answers the gate compares with."""
        pause = float(self.spec.params["think_time_seconds"])
        delay = t0 - time.monotonic()
        if delay > 0:
            gevent.sleep(delay)
        for round_ in range(int(self.spec.params["probe_rounds"])):
            for probe in PROBE_SET:
                if self.stopping:
                    return
                now = time.monotonic()
                index = round_ * len(PROBE_SET) + probe.index
                req = probe_request(probe, index=index, offset_seconds=now - t0, stage="alone")
                self.planned += 1
                self._one(req, now, record_id=f"{self.worker_index}-p{index}")
                gevent.sleep(pause)

    # -- closed loop -----------------------------------------------------------------------
    def _run_closed(self, t0: float) -> None:
        users = [
            u
            for u in range(int(self.spec.params["users"]))
            if u % self.worker_count == self.worker_index
        ]
        factory = RequestFactory(self.spec, stream=1 + self.worker_index)
        counter = itertools.count()
        end = t0 + self.spec.schedule.duration_seconds
        think = float(self.spec.params["think_time_seconds"])
        delay = t0 - time.monotonic()
        if delay > 0:
            gevent.sleep(delay)

        def user() -> None:
            while not self.stopping:
                now = time.monotonic()
                tick = self.spec.schedule.tick(now - t0)
                if tick is None or now >= end:
                    return
                n = next(counter)
                self.planned += 1
                # A closed-loop user plans a request when the previous one is done: this is
                # exactly the coordinated omission an open loop avoids.
                self._one(factory.make(n, now - t0, tick.stage), now)
                if think > 0:
                    gevent.sleep(think)

        for _ in users:
            self._spawn(self.group, user)

    # -- multi-turn sessions ---------------------------------------------------------------
    def _run_sessions(self, t0: float) -> None:
        """`concurrent_sessions` conversations at a time (this worker's share), each turn sent
        when the previous one answered plus think time, until `sessions_total` sessions were
        started or the schedule's end. A turn that failed ends its conversation: its history
        would be made up."""
        p = self.spec.params
        factory = ConversationFactory(
            seed=self.spec.seed,
            stream=self.worker_index,
            system_prompt_tokens=int(p["system_prompt_tokens"]),
            turns=LengthDist.from_value(p["turns"]),
            user_tokens=LengthDist.from_value(p["user_tokens"]),
            output_tokens=LengthDist.from_value(p["output_tokens"]),
            priority=str(p["priority"]),
        )
        mine = [
            n for n in range(int(p["sessions_total"])) if n % self.worker_count == self.worker_index
        ]
        slots = [
            u
            for u in range(int(p["concurrent_sessions"]))
            if u % self.worker_count == self.worker_index
        ]
        queue = iter(mine)
        counter = itertools.count()
        end = t0 + self.spec.schedule.duration_seconds
        think = float(p["think_time_seconds"])
        delay = t0 - time.monotonic()
        if delay > 0:
            gevent.sleep(delay)

        def slot() -> None:
            for n in queue:
                conversation = factory.make(f"{self.worker_index}-s{n}")
                for turn in range(conversation.num_turns):
                    now = time.monotonic()
                    if self.stopping or now >= end:
                        return
                    self.planned += 1
                    req = conversation.request(turn, index=next(counter), offset_seconds=now - t0)
                    answer: list[str] = []
                    rec = self._one(req, now, answer=answer)
                    if rec.status != "ok":
                        break
                    conversation.answered(turn, "".join(answer))
                    if think > 0 and turn + 1 < conversation.num_turns:
                        gevent.sleep(think)

        for _ in slots:
            self._spawn(self.group, slot)

    # -- ending ----------------------------------------------------------------------------
    def _drain(self, *, timeout_seconds: float) -> None:
        self.group.join(timeout=timeout_seconds)
        if len(self.group):
            self.stop()

    @staticmethod
    def _spawn(
        group: gevent.pool.Group, func: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> None:
        """Every greenlet of a session ends quietly when `stop` cancels it: the cancel can land
        anywhere it waits (a probe's sleep, a turn's wait for its parent, a think time), and
        an uncaught one would print a gevent traceback into load.log, burying the reason the
        run stopped under it."""

        def quiet() -> None:
            with contextlib.suppress(RequestCancelled):
                func(*args, **kwargs)

        group.spawn(quiet)

    def stop(self) -> None:
        """Stop scheduling and cancel everything in flight (recorded as `cancelled`)."""
        self.stopping = True
        self.probe_group.kill(exception=RequestCancelled, block=True, timeout=5.0)
        self.group.kill(exception=RequestCancelled, block=True, timeout=5.0)

    def _sample_cpu(self) -> None:
        while True:
            gevent.sleep(_CPU_SAMPLE_SECONDS)
            self.cpu.sample()

    def summary(self, *, interrupted: bool) -> dict[str, Any]:
        return {
            "worker": self.worker_index,
            "planned": self.planned,
            "sent": self.sent,
            "lags": self.lags,
            "cpu": self.cpu.summary(),
            "cap_reached": self.cap_reached,
            "streams_without_done": self.client.streams_without_done,
            "interrupted": interrupted,
        }
