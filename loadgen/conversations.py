"""Multi-turn chat sessions: what each turn of a conversation sends.

Owns `Conversation` (one session's seeded plan: how many turns, each user message and answer
length) and the message list of each turn: a system prompt shared by every session of the run,
then the earlier turns with the answers actually received, then the new user message. So a
follow-up turn repeats its whole history, as a chat front end does, and a prefix cache can serve
everything before the new message. It does not send anything or keep time (`loadgen.session`
runs the turns with think time between them), and knows no tokenizer: N tokens of text are N
bytes, exact on the bundled server's byte-level tokenizer (docs/loadgen.md).
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field

from loadgen.lengths import LengthDist
from loadgen.plan import PlannedRequest

__all__ = ["TURN_STAGES", "Conversation", "ConversationFactory"]

# A turn's record stage: its place in its conversation, which the default gate compares.
FIRST_TURN, FOLLOW_UP = "first_turn", "follow_up"
TURN_STAGES = (FIRST_TURN, FOLLOW_UP)
_LETTERS = string.ascii_lowercase + "      "  # spaces make word-like text


@dataclass(kw_only=True)
class Conversation:
    """One session: its id, the turns still to send and the history so far."""

    session: str
    system: str
    priority: str
    user_messages: list[str]
    answer_tokens: list[int]
    history: list[tuple[str, str]] = field(default_factory=list)

    @property
    def num_turns(self) -> int:
        return len(self.user_messages)

    def request(self, turn: int, *, index: int, offset_seconds: float) -> PlannedRequest:
        """Turn `turn` (0-based) as a planned request; its history is what was answered."""
        messages = (("system", self.system), *self.history, ("user", self.user_messages[turn]))
        return PlannedRequest(
            index=index,
            offset_seconds=offset_seconds,
            stage=FIRST_TURN if turn == 0 else FOLLOW_UP,
            priority=self.priority,
            length_class="short",
            messages=messages,
            prompt_tokens=sum(len(content.encode()) for _, content in messages),
            max_tokens=self.answer_tokens[turn],
            session=self.session,
            turn=turn,
        )

    def answered(self, turn: int, answer: str) -> None:
        """Keep turn `turn` and the answer received for the next turn's history."""
        self.history.append(("user", self.user_messages[turn]))
        self.history.append(("assistant", answer))


class ConversationFactory:
    """Seeded conversations: the n-th one of a stream is the same in every run."""

    def __init__(
        self,
        *,
        seed: int,
        stream: int,
        system_prompt_tokens: int,
        turns: LengthDist,
        user_tokens: LengthDist,
        output_tokens: LengthDist,
        priority: str,
    ) -> None:
        self._rng = random.Random(seed * 1_000_003 + 7919 * (stream + 1))
        # Shared by every session of every worker: seeded by the run's seed only.
        system_rng = random.Random(f"{seed}-system-prompt")
        self._system = "".join(system_rng.choices(_LETTERS, k=system_prompt_tokens))
        self._turns = turns
        self._user_tokens = user_tokens
        self._output_tokens = output_tokens
        self._priority = priority

    def make(self, session: str) -> Conversation:
        rng = self._rng
        num_turns = self._turns.sample(rng)
        users = [
            "".join(rng.choices(_LETTERS, k=self._user_tokens.sample(rng)))
            for _ in range(num_turns)
        ]
        answers = [self._output_tokens.sample(rng) for _ in range(num_turns)]
        return Conversation(
            session=session,
            system=self._system,
            priority=self._priority,
            user_messages=users,
            answer_tokens=answers,
        )
