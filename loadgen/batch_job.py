"""The offline job of the `offline_job` profile, sent through the target's OpenAI Batch API.

Owns `BatchJob`: at its planned time it builds a JSONL of `job_lines` short chat requests
(seeded like the chat plan, its own stream), uploads it (`POST /v1/files`, multipart,
`purpose=batch`), creates the job (`POST /v1/batches`), polls `GET /v1/batches/{id}` until a
terminal status or the wait runs out, and writes the job's timeline to `batch_job.jsonl` (one
line per step and per poll that changed something, then a summary line, docs/records.md). A
target without the Batch API (404/405 on either POST) is recorded as `not_supported`: that is
data, not a failure, and the chat traffic runs on regardless.

It talks HTTP through `loadgen.httpconn` (plain sockets, so cooperative once the load process
is gevent-patched: the job never blocks the users' clocks). It imports neither gevent nor
locust; the runner decides which greenlet it runs in. It does not send chat traffic.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from loadgen.httpconn import HttpConnection, ProtocolError, Target, parse_target
from loadgen.lengths import LengthDist
from loadgen.plan import RequestFactory
from loadgen.profiles import ProfileSpec, TrafficClass

__all__ = ["TERMINAL_STATUSES", "BatchJob", "build_job_lines", "job_enabled"]

# OpenAI's terminal batch statuses; anything else (validating, in_progress, finalizing,
# cancelling) is still moving.
TERMINAL_STATUSES = ("completed", "failed", "expired", "cancelled")
_JOB_STREAM = 7_919  # the job's own seeded stream: it must not shift the chat plan's requests
_NOT_SUPPORTED_HTTP = (404, 405)
_MAX_BODY_BYTES = 256 << 20


def job_enabled(spec: ProfileSpec) -> bool:
    return "job_lines" in spec.params


def build_job_lines(spec: ProfileSpec, *, model: str) -> list[dict[str, Any]]:
    """The job's requests, one Batch API input line each, identical on every run of a seed."""
    p = spec.params
    job_class = TrafficClass(
        weight=1.0,
        priority="batch",
        length_class="job",
        prompt_tokens=LengthDist.from_value(p["job_prompt_tokens"]),
        output_tokens=LengthDist.from_value(p["job_output_tokens"]),
    )
    factory = RequestFactory(dataclasses.replace(spec, classes=(job_class,)), stream=_JOB_STREAM)
    lines = []
    for i in range(int(p["job_lines"])):
        req = factory.make(i, 0.0, "job")
        lines.append(
            {
                "custom_id": f"job-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": model,
                    "messages": [{"role": r, "content": c} for r, c in req.messages],
                    "max_tokens": req.max_tokens,
                    **dict(p["extra_body"]),
                },
            }
        )
    return lines


class _HttpFailure(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class BatchJob:
    """Runs the job once; `run` returns the summary that load.json carries as `batch_job`."""

    def __init__(
        self, *, spec: ProfileSpec, target_url: str, model: str, api_key: str | None, out_dir: Path
    ) -> None:
        p = spec.params
        self.spec = spec
        self.target: Target = parse_target(target_url)
        self.model = model
        self.api_key = api_key
        self.path = Path(out_dir) / "batch_job.jsonl"
        self.path.unlink(missing_ok=True)  # a stale timeline would pass for this run's
        # Built before the start time, like the chat plan: encoding thousands of lines at
        # submit time would delay the users' sends (schedule lag).
        self.jsonl = "".join(
            json.dumps(line) + "\n" for line in build_job_lines(spec, model=model)
        ).encode()
        self.timeout_seconds = float(p["request_timeout_seconds"])
        self.poll_seconds = float(p["job_poll_seconds"])
        self.submit_offset_seconds = float(p["job_submit_at_ratio"]) * (
            spec.schedule.duration_seconds
        )
        self.wait_until_offset_seconds = spec.schedule.duration_seconds + float(
            p["job_wait_seconds"]
        )
        self.summary: dict[str, Any] = {
            "event": "summary",
            "status": "pending",  # the outcome; `batch_status` is the server's last word
            "batch_status": None,
            "http_status": None,
            "error": None,
            "input_file_id": None,
            "batch_id": None,
            "output_file_id": None,
            "error_file_id": None,
            "lines_total": int(p["job_lines"]),
            "lines_completed": None,
            "lines_failed": None,
            "output_tokens": None,
            "submit_planned_at": None,
            "submitted_at": None,
            "in_progress_at": None,
            "completed_at": None,
            "ended_at": None,
            "polls": 0,
        }

    # -- the job ---------------------------------------------------------------------------
    def run(self, t0: float) -> dict[str, Any]:
        """Submit at t0 + the submit offset, follow the job; never raises for I/O."""
        s = self.summary
        s["submit_planned_at"] = t0 + self.submit_offset_seconds
        try:
            delay = s["submit_planned_at"] - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # patched under gevent: yields to the users
            self._submit()
            self._follow(deadline=t0 + self.wait_until_offset_seconds)
        except _HttpFailure as exc:
            s["http_status"], s["error"] = exc.status, exc.message
            s["status"] = "not_supported" if exc.status in _NOT_SUPPORTED_HTTP else "error"
        except (OSError, TimeoutError, ProtocolError, ValueError) as exc:
            s["status"], s["error"] = "error", f"{type(exc).__name__}: {exc}"
        except BaseException:  # the runner stopped the run (Ctrl-C, SIGTERM): still say so
            s["status"] = "interrupted"
            self._finish()
            raise
        self._finish()
        return s

    def _submit(self) -> None:
        s = self.summary
        jsonl = self.jsonl
        boundary = uuid.uuid4().hex
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                f'filename="offline_job.jsonl"\r\nContent-Type: application/jsonl\r\n\r\n'
            ).encode()
            + jsonl
            + f"\r\n--{boundary}--\r\n".encode()
        )
        file_obj = self._json(
            "POST", "files", body, content_type=f"multipart/form-data; boundary={boundary}"
        )
        s["input_file_id"] = file_obj.get("id")
        self._event("uploaded", input_file_id=s["input_file_id"], bytes=len(jsonl))
        batch = self._json(
            "POST",
            "batches",
            json.dumps(
                {
                    "input_file_id": s["input_file_id"],
                    "endpoint": "/v1/chat/completions",
                    "completion_window": str(self.spec.params["job_completion_window"]),
                    "metadata": {"profile": self.spec.name},
                }
            ).encode(),
        )
        s["submitted_at"] = time.monotonic()
        s["batch_id"] = batch.get("id")
        self._observe(batch, "submitted")

    def _follow(self, *, deadline: float) -> None:
        s = self.summary
        while s["batch_status"] not in TERMINAL_STATUSES:
            if time.monotonic() >= deadline:
                s["status"] = "timed_out"
                self._cancel()
                return
            time.sleep(self.poll_seconds)
            s["polls"] += 1
            self._observe(self._json("GET", f"batches/{s['batch_id']}"), "poll")
        s["status"] = s["batch_status"]
        if s["output_file_id"]:
            s["output_tokens"] = self._output_tokens(s["output_file_id"])

    def _observe(self, batch: dict[str, Any], event: str) -> None:
        """Keep what a batch object says; a timeline line when it changed (or on submit)."""
        s = self.summary
        now = time.monotonic()
        status = batch.get("status")
        counts = batch.get("request_counts") or {}
        changed = (status, counts) != (s["batch_status"], s.get("_counts"))
        s["_counts"] = counts
        if status == "in_progress" and s["in_progress_at"] is None:
            s["in_progress_at"] = now
        if status in TERMINAL_STATUSES and s["completed_at"] is None:
            s["completed_at"] = now
        if status in ("finalizing", *TERMINAL_STATUSES) and s["in_progress_at"] is None:
            s["in_progress_at"] = now  # it ran between two polls
        s["batch_status"] = status
        s["lines_completed"] = counts.get("completed")
        s["lines_failed"] = counts.get("failed")
        s["output_file_id"] = batch.get("output_file_id")
        s["error_file_id"] = batch.get("error_file_id")
        if changed or event != "poll":
            self._event(
                event,
                batch_id=batch.get("id"),
                status=status,
                request_counts=counts,
                output_file_id=s["output_file_id"],
                error_file_id=s["error_file_id"],
                server_times={
                    k: batch.get(k)
                    for k in ("created_at", "in_progress_at", "finalizing_at", "completed_at")
                },
            )

    def _cancel(self) -> None:
        try:  # best effort: a job left running would load the next profile
            batch = self._json("POST", f"batches/{self.summary['batch_id']}/cancel", b"{}")
            self._observe(batch, "cancel_requested")
        except (_HttpFailure, OSError, TimeoutError, ProtocolError, ValueError) as exc:
            self._event("cancel_failed", error=str(exc))

    def _output_tokens(self, file_id: str) -> int | None:
        try:
            status, data = self._request("GET", f"files/{file_id}/content")
        except (OSError, TimeoutError, ProtocolError):
            return None
        if status != 200:
            return None
        total = 0
        for n, raw in enumerate(data.splitlines()):
            if n % 256 == 255:
                time.sleep(0)  # under gevent: lets the users send on time while this parses
            try:
                usage = json.loads(raw)["response"]["body"]["usage"]
                total += int(usage["completion_tokens"])
            except (ValueError, KeyError, TypeError):
                return None  # not the OpenAI shape: no count rather than a wrong one
        return total

    def abandon(self) -> None:
        """The run ended before the job could start (interrupted): say so in the timeline."""
        if self.summary["ended_at"] is None:
            self.summary["status"] = "interrupted"
            self._finish()

    def _finish(self) -> None:
        s = self.summary
        s.pop("_counts", None)
        s["ended_at"] = time.monotonic()
        self._write({**s, "wall": time.time(), "monotonic": s["ended_at"]})

    # -- timeline --------------------------------------------------------------------------
    def _event(self, event: str, **fields: Any) -> None:
        self._write({"event": event, "wall": time.time(), "monotonic": time.monotonic(), **fields})

    def _write(self, obj: dict[str, Any]) -> None:
        # Appended and flushed per line, like requests.jsonl: a crash keeps the timeline so far.
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(obj) + "\n")
            f.flush()
            os.fsync(f.fileno())

    # -- HTTP ------------------------------------------------------------------------------
    def _url(self, leaf: str) -> str:
        base = self.target.base_path
        return f"{base}/{leaf}" if base.endswith("/v1") else f"{base}/v1/{leaf}"

    def _json(
        self, method: str, leaf: str, body: bytes = b"", content_type: str = "application/json"
    ) -> dict[str, Any]:
        status, data = self._request(method, leaf, body, content_type)
        if status != 200:
            where = f"{method} {self._url(leaf)}"
            raise _HttpFailure(status, f"{where}: HTTP {status}: {_message(data)}")
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ValueError(f"{method} {self._url(leaf)} answered a non-object")
        return obj

    def _request(
        self, method: str, leaf: str, body: bytes = b"", content_type: str = "application/json"
    ) -> tuple[int, bytes]:
        # A fresh connection per call: a poll every half second gains nothing from keep-alive.
        deadline = time.monotonic() + self.timeout_seconds
        conn = HttpConnection(self.target, connect_timeout_seconds=self.timeout_seconds)
        try:
            headers = {"Host": self.target.host_header, "Connection": "close"}
            if body or method == "POST":
                headers["Content-Type"] = content_type
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            conn.send_request(method, self._url(leaf), headers, body)
            status, resp_headers, _ = conn.read_head(deadline)
            pieces, size = [], 0
            for piece, _ in conn.iter_body(resp_headers, deadline):
                pieces.append(piece)
                size += len(piece)
                if size > _MAX_BODY_BYTES:
                    raise ProtocolError("response body above 256 MiB")
            return status, b"".join(pieces)
        finally:
            conn.close()


def _message(data: bytes) -> str:
    try:
        err = json.loads(data)["error"]
        return str(err.get("message") or err)
    except (ValueError, KeyError, TypeError, AttributeError):
        return data[:200].decode("utf-8", "replace") or "(empty body)"
