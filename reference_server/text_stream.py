"""One request's output text as it streams: detokenizes token by token and finds stop strings.

It holds back just enough characters that a stop string split across tokens is never emitted in
part; it knows nothing of token ids' meaning beyond the tokenizer's streaming detokenizer.
"""

from __future__ import annotations

from reference_server.tokenizer import NUM_BYTE_TOKENS, ByteTokenizer, StreamingDetokenizer

__all__ = ["TextStream"]


class TextStream:
    def __init__(self, tokenizer: ByteTokenizer, stop: tuple[str, ...]) -> None:
        self._detokenizer = StreamingDetokenizer(tokenizer)
        self._stop = stop
        # A match that ends in the next piece starts at most this many characters back.
        self._hold_chars = max((len(s) for s in stop), default=1) - 1
        self._pending = ""  # decoded but not yet emitted
        # True while the detokenizer holds no partial UTF-8 character: an ASCII byte then decodes
        # to itself, so the per-token hot path can skip the incremental decoder. Any ASCII byte
        # ends whatever partial character came before it; other bytes may start one.
        self._at_char_boundary = True

    def push(self, token_id: int) -> tuple[str, bool]:
        """(text safe to emit now, whether a stop string was reached). After a stop the text up
        to (not including) the stop string has been emitted and the rest is dropped."""
        if 0 <= token_id < 128:
            if self._at_char_boundary:
                piece = chr(token_id)
            else:
                piece = self._detokenizer.push(token_id)
                self._at_char_boundary = True
        else:
            piece = self._detokenizer.push(token_id)
            # A non-ASCII byte may start a character; ids above the bytes carry no text.
            if token_id < NUM_BYTE_TOKENS:
                self._at_char_boundary = False
        if not self._stop:
            return piece, False
        pending = self._pending + piece
        cut = min((i for s in self._stop if (i := pending.find(s)) >= 0), default=-1)
        if cut >= 0:
            self._pending = ""
            return pending[:cut], True
        keep = min(len(pending), self._hold_chars)
        self._pending = pending[len(pending) - keep :]
        return pending[: len(pending) - keep], False

    def finish(self) -> str:
        """The held-back text plus any dangling bytes (as U+FFFD) when the request ends."""
        text = self._pending + self._detokenizer.flush()
        self._pending = ""
        return text
