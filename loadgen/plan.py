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
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.arrivals import generate_arrivals
from loadgen.dataset import DatasetEntry, load_dataset
from loadgen.prefix_text import BlockText, target_units, token_units
from loadgen.profiles import ProfileSpec, TrafficClass
from loadgen.sampling_mix import request_body

__all__ = ["PlannedRequest", "RequestFactory", "build_plan", "trace_plan"]

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
    # Multi-turn sessions and trace replay (docs/records.md): which conversation and turn, and
    # which trace line; `exact_output` asks the target for exactly max_tokens (min_tokens and
    # ignore_eos, vLLM's extensions), as a trace replay must to keep the trace's lengths.
    session: str | None = None
    turn: int | None = None
    trace_index: int | None = None
    exact_output: bool = False
    # A trace conversation's own id and its previous turn's (Bailian chat_id, parent_chat_id):
    # the turn is sent only once its parent answered.
    chat_id: str | None = None
    parent: str | None = None
    # Request-body fields of this request's own (thinking mode, sampling parameters), merged
    # over the profile's extra_body; `probe`: an answer-consistency probe's index
    # (loadgen.probes), whose record is marked so.
    body: Mapping[str, Any] | None = None
    probe: int | None = None

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
        self._spec_classes = spec.classes
        self._stream = stream
        self._decks: dict[str, _ClassDeck] = {}

    def _deck_for(self, stage: str) -> _ClassDeck:
        """The deck of the classes dealt in `stage`: one deck for every stage when no class is
        stage-bound (the profiles before stage-bound classes deal exactly as they did)."""
        if all(c.stages is None for c in self._spec_classes):
            stage = ""
        deck = self._decks.get(stage)
        if deck is None:
            classes = (
                tuple(c for c in self._spec_classes if c.stages is None or stage in c.stages)
                or self._spec_classes
            )
            deck = self._decks[stage] = _ClassDeck(self._spec, self._stream, classes)
        return deck

    def make(self, index: int, offset_seconds: float, stage: str) -> PlannedRequest:
        rng = self._rng
        # One draw, as the class choice took before decks: the stream's other draws (lengths,
        # text) stay where they were, so a one-class profile plans exactly what it did.
        rng.random()
        cls = self._deck_for(stage).deal()
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
            body=request_body(cls, self._spec.seed, index),
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

    def __init__(
        self, spec: ProfileSpec, stream: int, classes: tuple[TrafficClass, ...] | None = None
    ) -> None:
        self._classes = spec.classes if classes is None else classes
        self._weights = [c.weight for c in self._classes]
        self._total = sum(self._weights)
        self._credit = [0.0] * len(self._classes)
        # A stage-bound deck (a subset of the classes) shuffles with a stream of its own.
        suffix = "" if classes is None or classes == spec.classes else f"-{len(self._classes)}"
        self._rng = random.Random(f"{spec.seed}-{stream}-classes{suffix}")
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
    if spec.replay is not None:
        return trace_plan(spec, worker_index=worker_index, worker_count=worker_count)
    arrivals = generate_arrivals(spec.arrival, spec.schedule, seed=spec.seed)
    factory = RequestFactory(spec)
    # Every worker walks the whole stream so request i is identical whichever worker sends it.
    plan = [factory.make(i, offset, stage) for i, (offset, stage) in enumerate(arrivals)]
    return plan[worker_index::worker_count]


def trace_plan(
    spec: ProfileSpec, *, worker_index: int = 0, worker_count: int = 1
) -> list[PlannedRequest]:
    """This worker's share of a trace replay: each request at its scaled timestamp, its prompt
    built from its hash ids (loadgen.prefix_text), asking for the trace's answer length. A
    conversation (requests with a `session`) stays on one worker, which sends its turns in order."""
    replay = spec.replay
    assert replay is not None
    if spec.params["tokenizer"] == "target":
        units = target_units(spec.params["token_units"] or (), "the target's /tokenize")
    else:
        units = token_units(_tokenizer(spec.params["tokenizer"]))
    distinct = len({h for r in replay.requests for h in r.hash_ids})
    text = BlockText(units, max_cached_blocks=max(distinct, 1))
    exact = bool(spec.params["exact_output"])
    plan = []
    for i, r in enumerate(replay.requests):
        owner = (zlib.crc32(r.session.encode()) if r.session is not None else i) % worker_count
        if owner != worker_index:
            continue
        prompt = text.prompt_text(
            r.hash_ids, r.block_tokens, r.input_tokens, f"{spec.seed}-{r.index}"
        )
        plan.append(
            PlannedRequest(
                index=i,
                offset_seconds=r.timestamp_seconds,
                stage="main",
                priority=str(spec.params["priority"]),
                length_class="short",
                messages=(("user", prompt),),
                prompt_tokens=r.input_tokens,
                max_tokens=r.output_tokens,
                session=r.session,
                turn=r.turn,
                trace_index=r.index,
                exact_output=exact,
                chat_id=r.chat_id,
                parent=r.parent,
            )
        )
    return plan


def _tokenizer(value: str | None) -> str | None:
    """The prefix_text vocabulary for the profile's `tokenizer`: "byte" (byte-level, the bundled
    server), a tokenizer.json path, or None (approximate words; also "auto" left unresolved,
    as under plain Locust)."""
    if value in (None, "auto", "words"):
        return None
    return "byte" if value in ("byte", "bytes") else value
