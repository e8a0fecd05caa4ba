"""The request plan: every request of a run, decided up front from the profile and seed.

Owns `PlannedRequest` (what to send, when, and its scenario tags) and the seeded choice of
traffic class, prompt text and output length. Classes are dealt from shuffled decks of
`CLASS_DECK_SIZE` requests that each hold the profile's shares (rounding carried from deck to
deck), not drawn independently per request: a smoke run of 50 requests then carries its 15 %
long answers, where independent draws gave seed 0 only 4 of 50, three of them together, and a
static batch's head-of-line blocking looked like luck.

Prompts are synthetic ASCII text of N bytes for N tokens (exact on byte-level tokenizers such as
the bundled server's; roughly 4x too many tokens' worth of text on BPE tokenizers, see
docs/loadgen.md) or dataset entries. It does not send anything and does not know about workers
beyond taking a slice.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

from loadgen.arrivals import generate_arrivals
from loadgen.dataset import DatasetEntry, load_dataset
from loadgen.profiles import ProfileSpec, TrafficClass

__all__ = ["PlannedRequest", "RequestFactory", "build_plan"]

_TEXT_POOL_BYTES = 1 << 16
# Requests per class deck: small enough that any window of a run carries the mix, large enough
# that a 5 % class still appears in every deck.
CLASS_DECK_SIZE = 20


@dataclass(frozen=True, kw_only=True)
class PlannedRequest:
    index: int
    offset_seconds: float  # since the run start; 0 for closed loop
    stage: str
    priority: str
    length_class: str
    messages: tuple[tuple[str, str], ...]
    prompt_tokens: int  # the client's own count (bytes of text)
    max_tokens: int

    @property
    def prompt_text(self) -> str:
        return "\n".join(content for _, content in self.messages)


class RequestFactory:
    """Makes requests from one seeded stream: the n-th call is the same on every process.

    One stream (rather than one generator per request) keeps planning at a few microseconds per
    request, so even a 60 000-request plan is ready before its start time.
    """

    def __init__(self, spec: ProfileSpec, *, stream: int = 0) -> None:
        self._spec = spec
        self._rng = random.Random(spec.seed * 1_000_003 + stream)
        pool_rng = random.Random(f"{spec.seed}-text")
        letters = string.ascii_lowercase + "      "  # spaces make word-like text
        self._pool = "".join(pool_rng.choices(letters, k=_TEXT_POOL_BYTES))
        dataset = spec.params.get("dataset")
        self._dataset: list[DatasetEntry] | None = load_dataset(dataset) if dataset else None
        self._deck = _ClassDeck(spec, stream)

    def make(self, index: int, offset_seconds: float, stage: str) -> PlannedRequest:
        rng = self._rng
        # One draw, as the class choice took before decks: the stream's other draws (lengths,
        # text) stay where they were, so a one-class profile plans exactly what it did.
        rng.random()
        cls = self._deck.deal()
        max_tokens = cls.output_tokens.sample(rng)
        if self._dataset is not None:
            entry = self._dataset[rng.randrange(len(self._dataset))]
            messages = entry.messages
            max_tokens = entry.output_tokens or max_tokens
            prompt_tokens = len(entry.text.encode())
        else:
            prompt_tokens = cls.prompt_tokens.sample(rng)
            messages = (("user", self._text(rng, prompt_tokens)),)
        return PlannedRequest(
            index=index,
            offset_seconds=offset_seconds,
            stage=stage,
            priority=cls.priority,
            length_class=cls.length_class,
            messages=messages,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
        )

    def _text(self, rng: random.Random, n_bytes: int) -> str:
        parts, left = [], n_bytes
        while left > 0:
            start = rng.randrange(_TEXT_POOL_BYTES)
            piece = self._pool[start : start + left]
            parts.append(piece)
            left -= len(piece)
        return "".join(parts)


class _ClassDeck:
    """Deals a profile's traffic classes in shuffled decks whose counts follow the weights.

    Each deck's counts come from a smooth weighted round robin over CLASS_DECK_SIZE turns whose
    credit carries over, so after any number of whole decks every class is within one request
    of its share; the shuffle (its own seeded stream) keeps the order within a deck random."""

    def __init__(self, spec: ProfileSpec, stream: int) -> None:
        self._classes = spec.classes
        self._weights = [c.weight for c in spec.classes]
        self._total = sum(self._weights)
        self._credit = [0.0] * len(self._classes)
        self._rng = random.Random(f"{spec.seed}-{stream}-classes")
        self._cards: list[int] = []

    def deal(self) -> TrafficClass:
        if len(self._classes) == 1:
            return self._classes[0]
        if not self._cards:
            self._cards = self._next_deck()
        return self._classes[self._cards.pop()]

    def _next_deck(self) -> list[int]:
        cards = []
        for _ in range(CLASS_DECK_SIZE):
            for i, weight in enumerate(self._weights):
                self._credit[i] += weight
            chosen = max(range(len(self._credit)), key=self._credit.__getitem__)
            self._credit[chosen] -= self._total
            cards.append(chosen)
        self._rng.shuffle(cards)
        return cards


def build_plan(
    spec: ProfileSpec, *, worker_index: int = 0, worker_count: int = 1
) -> list[PlannedRequest]:
    """This worker's share of the open-loop plan: every `worker_count`-th arrival."""
    arrivals = generate_arrivals(spec.arrival, spec.schedule, seed=spec.seed)
    factory = RequestFactory(spec)
    # Every worker walks the whole stream so request i is identical whichever worker sends it.
    plan = [factory.make(i, offset, stage) for i, (offset, stage) in enumerate(arrivals)]
    return plan[worker_index::worker_count]
