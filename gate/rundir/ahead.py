"""Reading ahead on threads of their own, for the record readers.

Owns `read_ahead`: while the caller works on item k (numpy, which releases the GIL), a worker
thread produces item k + 1 (pyarrow decoding or parsing, which releases it too), so the two
overlap on a machine with a second core; and `map_ahead`, which runs a function on the next few
items at once (pyarrow's JSON reader on one thread a block uses less CPU a byte than on many,
so blocks side by side keep every core busy for less). Errors reach the caller at the item that
raised them. It does not know what the items are.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["map_ahead", "read_ahead"]

T = TypeVar("T")
R = TypeVar("R")
_END = object()


def read_ahead(items: Iterator[T], *, name: str) -> Iterator[T]:
    """`items` in order, the next one produced on a worker thread while this one is used."""
    with ThreadPoolExecutor(1, thread_name_prefix=name) as worker:
        pending = worker.submit(next, items, _END)
        while (item := pending.result()) is not _END:
            pending = worker.submit(next, items, _END)
            yield item  # type: ignore[misc]


def map_ahead(
    function: Callable[[T], R], items: Iterable[T], *, workers: int, name: str
) -> Iterator[R]:
    """`function(item)` for each item, in order: while the caller uses one result, the next
    `workers` calls run on `workers` threads. Items are drawn on the caller's thread."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        # A caller that stops early (an error in a block) does not wait for the blocks after.
        pool.shutdown(wait=True, cancel_futures=True)
