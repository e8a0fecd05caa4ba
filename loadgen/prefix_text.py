"""Prompt text from a trace's hash ids: the same id gives the same text in every request and run.

Owns `TokenUnits` (a vocabulary of strings that are each exactly one token of the target's
tokenizer and concatenate without merging, so N units are N tokens) and `BlockText`, which turns
a hash id into its block of units (seeded by the id alone), a request's hash ids into its prompt
(the blocks in order, the last one possibly cut short, so requests sharing their first k full
blocks share exactly that text), and fills prompts without hash ids with text unique to the
request. Three vocabularies:

- `byte_units()`: byte-level tokenizers such as the bundled server's (every UTF-8 byte is one
  token): lowercase ASCII letters and the space. Exact.
- `hf_units(path)`: a Hugging Face `tokenizer.json` (`--tokenizer PATH`), loaded with the
  `tokenizers` library: words with a leading space that the tokenizer itself encodes as one token
  alone and as two tokens in pairs (checked), or single characters when it has no such words
  (the bundled server's tokenizer.json, which has no merges). Exact, and `count_tokens` says so.
- `approximate_units()`: a foreign server whose tokenizer is unknown: common short English words
  with a leading space, which most BPE vocabularies (GPT, Llama, Qwen families) hold as one token
  each; not checked against the target. An approximation: its error is measured, not assumed, as
  the difference between the planned prompt tokens and the server's `usage.prompt_tokens` in the
  request records.

It does not know traces, requests or HTTP; the caller passes hash ids, block sizes and lengths.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.errors import ConfigError

__all__ = [
    "BlockText",
    "TokenUnits",
    "approximate_units",
    "byte_units",
    "candidate_words",
    "hf_units",
    "target_units",
    "token_units",
]

# At most 256 units: one random byte picks one unit (a few units come up slightly more often
# when the count does not divide 256, which does not matter for filler text).
_MAX_UNITS = 256
_MIN_WORD_UNITS = 32  # fewer verified words than this: use single characters instead
_WORD = re.compile(r"[a-z]{2,10}")
_SPACE_MARKERS = ("Ġ", "▁")  # byte-level BPE (GPT, Llama 3, Qwen) and SentencePiece spaces
# The approximate vocabulary: common English words (approximate_units adds the leading space).
_COMMON_WORDS_TEXT = """
the of and to in is it that was for on are with as be at this have from or by not but
what all were when we there can an your which their said if do will each about how up
out them then she many some so these would other into has more her two like him see time
could no make than first been its who now people my made over did down only way find use
may water long little very after words called just where most know get through back much
before go good new write our used me man too any day same right look think also around
another came come work three word must because does part even place well such here take
why things help put years different away again off went old number great tell men say
small every found
"""


@dataclass(frozen=True, kw_only=True)
class TokenUnits:
    """Strings that are one token each for the target and do not merge when concatenated."""

    units: tuple[str, ...]
    source: str  # "byte", "hf:<path>" or "approximate"
    exact: bool  # True: N units are exactly N tokens for the target's tokenizer
    # Counts the tokens of a text with the target's tokenizer; None when it is not known.
    counter: Callable[[str], int] | None = field(default=None, compare=False, repr=False)

    def count_tokens(self, text: str) -> int | None:
        """The exact token count of `text` (no special tokens), or None for the approximation."""
        return self.counter(text) if self.counter is not None else None


def byte_units() -> TokenUnits:
    """Byte-level tokenizers (the bundled server's): each ASCII letter and the space is a token."""
    letters = tuple("abcdefghijklmnopqrstuvwxyz ")
    return TokenUnits(
        units=letters, source="byte", exact=True, counter=lambda text: len(text.encode("utf-8"))
    )


def approximate_units() -> TokenUnits:
    """Common English words with a leading space: one token each in most BPE vocabularies."""
    return TokenUnits(
        units=tuple(f" {w}" for w in _COMMON_WORDS_TEXT.split()), source="approximate", exact=False
    )


def target_units(units: Sequence[str], source: str) -> TokenUnits:
    """Units the target itself counted as one token each (its `/tokenize`), `source` naming it."""
    if len(units) < 2 or not all(isinstance(u, str) and u for u in units):
        raise ConfigError("token_units: needs at least two non-empty strings")
    return TokenUnits(units=tuple(units)[:_MAX_UNITS], source=source, exact=True)


def candidate_words() -> tuple[str, ...]:
    """The approximate vocabulary's units, which a target's `/tokenize` can verify."""
    return approximate_units().units


def token_units(tokenizer: str | Path | None) -> TokenUnits:
    """`"byte"` -> byte_units(), a tokenizer.json path -> hf_units(path), None -> approximate."""
    if tokenizer is None:
        return approximate_units()
    if str(tokenizer) == "byte":
        return byte_units()
    return hf_units(tokenizer)


def hf_units(path: str | Path) -> TokenUnits:
    """Verified one-token units of a Hugging Face tokenizer.json (needs `tokenizers`)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConfigError(
            "--tokenizer needs the `tokenizers` library: pip install tokenizers"
        ) from None
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust side raises plain Exception for every kind of failure
        raise ConfigError(f"--tokenizer: cannot load {file}: {exc}") from exc

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)

    vocab = tokenizer.get_vocab(with_added_tokens=False)
    words = sorted(
        (token_id, " " + token[1:])
        for token, token_id in vocab.items()
        if token[:1] in _SPACE_MARKERS and _WORD.fullmatch(token[1:])
    )
    units = _verified([unit for _, unit in words[: 4 * _MAX_UNITS]], encode)
    if len(units) < _MIN_WORD_UNITS:
        units = _verified(list("abcdefghijklmnopqrstuvwxyz "), encode, all_pairs=True)
    if len(units) < 2:
        raise ConfigError(
            f"--tokenizer {file}: found no strings that stay one token each when concatenated; "
            "leave --tokenizer out to use the approximate word vocabulary"
        )
    chosen = tuple(units[:_MAX_UNITS])
    sample = "".join(random.Random("units-check").choices(chosen, k=512))
    if len(encode(sample)) != 512:
        raise ConfigError(
            f"--tokenizer {file}: 512 verified units encode to {len(encode(sample))} tokens, not "
            "512 (a normalizer or pre-tokenizer merges them); leave --tokenizer out to use the "
            "approximate word vocabulary"
        )
    return TokenUnits(
        units=chosen, source=f"hf:{file}", exact=True, counter=lambda text: len(encode(text))
    )


def _verified(
    candidates: list[str], encode: Callable[[str], list[int]], *, all_pairs: bool = False
) -> list[str]:
    """Candidates that encode to one token alone and to their two ids next to another unit."""
    single = {}
    for unit in candidates:
        ids = encode(unit)
        if len(ids) == 1:
            single[unit] = ids[0]
    kept = list(single)
    rng = random.Random("units-pairs")
    good = []
    for unit in kept:
        partners = kept if all_pairs else rng.sample(kept, min(8, len(kept)))
        if all(
            encode(unit + other) == [single[unit], single[other]]
            and encode(other + unit) == [single[other], single[unit]]
            for other in partners
        ):
            good.append(unit)
        if len(good) == _MAX_UNITS:
            break
    return good


class BlockText:
    """Deterministic prompt text: hash-id blocks, a request's prompt, per-request filler.

    Each block's full text is cached by (hash id, block tokens) in a bounded LRU: size it to the
    window's distinct hash ids and no block is generated twice.
    """

    def __init__(self, units: TokenUnits, *, max_cached_blocks: int = 8192) -> None:
        if max_cached_blocks < 1:
            raise ConfigError(f"max_cached_blocks: must be >= 1, got {max_cached_blocks}")
        self.units = units
        self._table = tuple(units.units[i % len(units.units)] for i in range(256))
        # One-character ASCII units (the byte vocabulary) map bytes to text in C via translate.
        self._bytes_table = (
            "".join(self._table).encode("ascii")
            if all(len(u) == 1 and u.isascii() for u in units.units)
            else None
        )
        self._cache: OrderedDict[tuple[int, int], tuple[bytes, str]] = OrderedDict()
        self._max_cached = max_cached_blocks

    def block_text(self, hash_id: int, num_tokens: int) -> str:
        """The first `num_tokens` units of block `hash_id` (the same in every request and run)."""
        return self._block(hash_id, num_tokens, num_tokens)

    def filler_text(self, seed: int | str, num_tokens: int) -> str:
        """`num_tokens` units no other request shares (seeded by the request's own seed)."""
        return self._units(_random_bytes(f"filler-{seed}", num_tokens))

    def prompt_text(
        self,
        hash_ids: Sequence[int],
        block_tokens: int | None,
        input_tokens: int,
        seed: int | str,
    ) -> str:
        """A prompt of `input_tokens` units: its hash blocks in order, then filler if they end.

        Block i holds units i*block_tokens onwards; the last block may be cut short (a prefix of
        its full text), and tokens past the last hash block are filler seeded by `seed`.
        """
        if input_tokens < 1:
            raise ConfigError(f"input_tokens: must be >= 1, got {input_tokens}")
        if not hash_ids or not block_tokens:
            return self.filler_text(seed, input_tokens)
        used = min(len(hash_ids), math.ceil(input_tokens / block_tokens))
        parts = []
        for position in range(used):
            left = input_tokens - position * block_tokens
            parts.append(self._block(hash_ids[position], block_tokens, min(left, block_tokens)))
        rest = input_tokens - used * block_tokens
        if rest > 0:
            parts.append(self.filler_text(seed, rest))
        return "".join(parts)

    def _block(self, hash_id: int, block_tokens: int, num_tokens: int) -> str:
        key = (hash_id, block_tokens)
        cached = self._cache.get(key)
        if cached is None:
            raw = _random_bytes(f"block-{hash_id}", block_tokens)
            cached = (raw, self._units(raw))
            self._cache[key] = cached
            if len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        raw, text = cached
        return text if num_tokens >= block_tokens else self._units(raw[:num_tokens])

    def _units(self, raw: bytes) -> str:
        if self._bytes_table is not None:
            return raw.translate(self._bytes_table).decode("ascii")
        return "".join(map(self._table.__getitem__, raw))


def _random_bytes(seed: str, count: int) -> bytes:
    # SHAKE-128's output of n bytes is a prefix of its output of m > n bytes, so a block's text
    # at a smaller block size is a prefix of its text at a larger one; a standard function, so
    # the text is the same on every platform and Python version (and 10x cheaper than seeding a
    # random.Random per block: a window of the Mooncake trace holds 10^5 distinct blocks).
    return hashlib.shake_128(seed.encode()).digest(count)
