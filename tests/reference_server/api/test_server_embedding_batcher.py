"""The embeddings batcher (reference_server.api.embedding_batcher) with an injected embed function
(no model, no server)."""

from __future__ import annotations

import asyncio
import time

import pytest

from reference_server.api.embedding_batcher import BatcherFullError, EmbeddingBatcher


class RecordingEmbed:
    """Returns [first token, batch position] per input and records each batch."""

    def __init__(self, *, delay_seconds: float = 0.0, fail: bool = False) -> None:
        self.batches: list[list[list[int]]] = []
        self.delay_seconds = delay_seconds
        self.fail = fail

    async def __call__(self, inputs: list[list[int]]) -> list[list[float]]:
        self.batches.append(inputs)
        if self.delay_seconds:
            await asyncio.sleep(self.delay_seconds)
        if self.fail:
            raise RuntimeError("model exploded")
        return [[float(ids[0]), float(i)] for i, ids in enumerate(inputs)]


def make(embed, **overrides) -> EmbeddingBatcher:
    settings = dict(max_batch_size=4, max_wait_ms=50.0, dispatch_threshold=None,
                    max_pending_inputs=16)  # fmt: skip
    settings.update(overrides)
    return EmbeddingBatcher(embed_fn=embed, **settings)


def test_requests_arriving_within_the_window_share_one_forward():
    async def main():
        embed = RecordingEmbed()
        batcher = make(embed, max_wait_ms=200.0)
        results = await asyncio.gather(*(batcher.embed([[n]]) for n in (1, 2, 3)))
        await batcher.close()
        return embed, results

    embed, results = asyncio.run(main())
    assert len(embed.batches) == 1 and len(embed.batches[0]) == 3
    assert [vector[0][0] for vector in results] == [1.0, 2.0, 3.0]  # each caller gets its own


def test_a_full_batch_dispatches_without_waiting_for_the_window():
    async def main():
        embed = RecordingEmbed()
        batcher = make(embed, max_wait_ms=10_000.0)
        started = time.monotonic()
        await asyncio.gather(*(batcher.embed([[n]]) for n in range(8)))
        elapsed = time.monotonic() - started
        await batcher.close()
        return embed, elapsed

    embed, elapsed = asyncio.run(main())
    assert [len(b) for b in embed.batches] == [4, 4]
    assert elapsed < 5.0  # the 10 s window never had to expire


def test_adaptive_threshold_dispatches_at_once_and_a_lone_input_waits_for_the_window():
    async def main():
        # The pair against a 10 s window (dispatched at once or not is then beyond doubt on any
        # machine), the lone input against a short one it must wait out.
        pair_embed = RecordingEmbed()
        pair_batcher = make(pair_embed, max_wait_ms=10_000.0, dispatch_threshold=2)
        started = time.monotonic()
        await asyncio.gather(pair_batcher.embed([[1]]), pair_batcher.embed([[2]]))
        pair_seconds = time.monotonic() - started
        await pair_batcher.close()
        lone_batcher = make(RecordingEmbed(), max_wait_ms=300.0, dispatch_threshold=2)
        started = time.monotonic()
        await lone_batcher.embed([[3]])
        lone_seconds = time.monotonic() - started
        await lone_batcher.close()
        return pair_embed, pair_seconds, lone_seconds

    pair_embed, pair_seconds, lone_seconds = asyncio.run(main())
    assert [len(b) for b in pair_embed.batches] == [2]
    assert pair_seconds < 5.0
    assert lone_seconds >= 0.29


def test_a_request_with_many_inputs_keeps_their_order_across_batches():
    async def main():
        embed = RecordingEmbed()
        batcher = make(embed, max_wait_ms=0.0)
        vectors = await batcher.embed([[n] for n in range(10)])
        await batcher.close()
        return embed, vectors

    embed, vectors = asyncio.run(main())
    assert [v[0] for v in vectors] == [float(n) for n in range(10)]
    assert all(len(b) <= 4 for b in embed.batches)


def test_the_queue_is_bounded():
    async def main():
        embed = RecordingEmbed(delay_seconds=0.2)
        batcher = make(embed, max_pending_inputs=4, max_wait_ms=0.0)
        first = asyncio.ensure_future(batcher.embed([[1], [2], [3], [4]]))
        await asyncio.sleep(0)
        with pytest.raises(BatcherFullError):
            await batcher.embed([[5]])
        await first
        await batcher.close()

    asyncio.run(main())


def test_cancelled_inputs_are_not_embedded():
    async def main():
        embed = RecordingEmbed()
        batcher = make(embed, max_wait_ms=100.0)
        gone = asyncio.ensure_future(batcher.embed([[9]]))
        await asyncio.sleep(0.01)
        gone.cancel()
        kept = await batcher.embed([[1]])
        await batcher.close()
        return embed, kept

    embed, kept = asyncio.run(main())
    assert kept == [[1.0, 0.0]]
    assert [[ids[0] for ids in batch] for batch in embed.batches] == [[1]]


def test_an_embed_failure_reaches_the_callers_and_the_batcher_keeps_serving():
    async def main():
        embed = RecordingEmbed(fail=True)
        batcher = make(embed, max_wait_ms=0.0)
        with pytest.raises(RuntimeError, match="exploded"):
            await batcher.embed([[1]])
        embed.fail = False
        result = await batcher.embed([[2]])
        await batcher.close()
        return result

    assert asyncio.run(main()) == [[2.0, 0.0]]
