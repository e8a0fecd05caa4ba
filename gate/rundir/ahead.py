"""Reading one item ahead on a thread of its own, for the record readers.

Owns `read_ahead`: while the caller works on item k (numpy, which releases the GIL), a worker
thread produces item k + 1 (pyarrow decoding or parsing, which releases it too), so the two
overlap on a machine with a second core. Errors reach the caller at the item that raised them.
It does not know what the items are.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["read_ahead"]

T = TypeVar("T")
_END = object()


def read_ahead(items: Iterator[T], *, name: str) -> Iterator[T]:
    """`items` in order, the next one produced on a worker thread while this one is used."""
    with ThreadPoolExecutor(1, thread_name_prefix=name) as worker:
        pending = worker.submit(next, items, _END)
        while (item := pending.result()) is not _END:
            pending = worker.submit(next, items, _END)
            yield item  # type: ignore[misc]
