"""The messages between the API process and the engine core process, and their encoding.

A message is a tuple whose first item names its kind; it travels as one pickle (protocol 5)
framed by multiprocessing's Connection. One step's outputs travel as one message, each output a
plain tuple: a list of tuples pickles and unpickles several times faster than a list of
dataclass instances, and the step loop pays for every byte. Exceptions travel pickled (the
engine's errors define __reduce__ for it).
"""

from __future__ import annotations

import itertools
import operator
import pickle
from dataclasses import fields
from typing import Any

from reference_server.outputs import RequestOutput

__all__ = [
    "ABORT",
    "ABORT_ALL",
    "ADD",
    "DEAD",
    "DRAINED",
    "DRAIN_WAIT",
    "EMBED",
    "READY",
    "REJECT",
    "REPLY",
    "SHUTDOWN",
    "STATS",
    "STEP",
    "UPDATE_BATCHING",
    "decode",
    "encode",
    "pack_outputs",
    "unpack_outputs",
]

# API process -> engine core
ADD = "add"  # (ADD, request_id, prompt_token_ids, params, priority, arrival_time)
ABORT = "abort"  # (ABORT, request_id)
ABORT_ALL = "abort_all"  # (ABORT_ALL,)
EMBED = "embed"  # (EMBED, call_id, token_id_lists)
UPDATE_BATCHING = "update_batching"  # (UPDATE_BATCHING, call_id, changes)
DRAIN_WAIT = "drain_wait"  # (DRAIN_WAIT,): answer DRAINED once nothing is unfinished
SHUTDOWN = "shutdown"  # (SHUTDOWN,)

# engine core -> API process
READY = "ready"  # (READY, {"device", "batching", "stats", "memory"})
STEP = "step"  # (STEP, packed outputs, StepRecord | None, snapshot | None)
STATS = "stats"  # (STATS, snapshot): sent before the loop goes idle
REJECT = "reject"  # (REJECT, request_id, EngineError): refused, or its forward pass failed
REPLY = "reply"  # (REPLY, call_id, result, error | None)
DRAINED = "drained"  # (DRAINED,)
DEAD = "dead"  # (DEAD, description, EngineError | None): the core failed and exits next

# attrgetter builds each output's tuple in C: a third of the cost of a getattr loop per field.
_output_row = operator.attrgetter(*(f.name for f in fields(RequestOutput)))


def encode(message: tuple[Any, ...]) -> bytes:
    return pickle.dumps(message, protocol=5)


def decode(data: bytes) -> tuple[Any, ...]:
    message = pickle.loads(data)
    if not isinstance(message, tuple) or not message:
        raise ValueError(f"not an engine core message: {type(message).__name__}")
    return message


def pack_outputs(outputs: list[RequestOutput]) -> list[tuple[Any, ...]]:
    return list(map(_output_row, outputs))


def unpack_outputs(packed: list[tuple[Any, ...]]) -> list[RequestOutput]:
    return list(itertools.starmap(RequestOutput, packed))
