"""Prompt text from hash ids: the same id is the same text everywhere, a prompt is its blocks in
order (the last one possibly cut short), two prompts sharing k leading hash ids share exactly
k * block_tokens leading tokens, and on a known tokenizer (byte-level, the bundled server's
tokenizer.json, a BPE with whole-word tokens) the token count is exactly the one planned."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from lg_support import REPO

from loadgen.errors import ConfigError
from loadgen.prefix_text import (
    BlockText,
    TokenUnits,
    approximate_units,
    byte_units,
    hf_units,
    token_units,
)
from loadgen.traces import TraceRequest, packaged_trace_path, read_trace, scale_lengths

BUNDLED_TOKENIZER = REPO / "reference_server" / "hf_tokenizer" / "tokenizer.json"


def _excerpt(length_scale: float) -> tuple[TraceRequest, ...]:
    trace = read_trace(packaged_trace_path("mooncake_conversation_excerpt"))
    return scale_lengths(trace.requests, length_scale).requests


def _bundled_hf() -> tuple[TokenUnits, Callable[[str], list[int]]]:
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer.from_file(str(BUNDLED_TOKENIZER))
    return hf_units(BUNDLED_TOKENIZER), lambda t: tokenizer.encode(t, add_special_tokens=False).ids


def _byte() -> tuple[TokenUnits, Callable[[str], list[int]]]:
    return byte_units(), lambda text: list(text.encode("utf-8"))


def _word_bpe(tmp_path: Path) -> tuple[TokenUnits, Callable[[str], list[int]]]:
    """A small byte-level BPE trained on English words: units are whole-word tokens."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    words = approximate_units().units
    tokenizer.train_from_iterator(["".join(words)] * 50, trainer)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return hf_units(path), lambda t: tokenizer.encode(t, add_special_tokens=False).ids


VOCABULARIES = {"byte": lambda tmp: _byte(), "bundled_hf": lambda tmp: _bundled_hf()}


def _prompt(text: BlockText, r: TraceRequest) -> str:
    return text.prompt_text(r.hash_ids, r.block_tokens, r.input_tokens, f"seed-{r.index}")


def test_byte_units_are_letters_and_the_space():
    units = byte_units()
    assert units.exact and units.source == "byte"
    assert sorted(units.units) == sorted("abcdefghijklmnopqrstuvwxyz ")
    assert units.count_tokens("abc de") == 6


def test_a_block_is_the_same_text_in_every_builder_and_run():
    first, second = BlockText(byte_units()), BlockText(byte_units(), max_cached_blocks=1)
    assert first.block_text(0, 24) == second.block_text(0, 24)
    # Pinned: the text depends on the hash id alone, never on the process or the run.
    assert first.block_text(0, 24) == "qhlkuuoyufeti chhkrvprdh"
    assert first.filler_text(3, 12) == "dmsjfdqawikw"
    assert BlockText(approximate_units()).block_text(0, 6) == " people that small say their here"


def test_different_hash_ids_give_different_text():
    text = BlockText(byte_units())
    blocks = {text.block_text(hash_id, 32) for hash_id in range(2000)}
    assert len(blocks) == 2000


def test_a_short_block_is_a_prefix_of_the_full_block_at_any_block_size():
    text = BlockText(byte_units())
    full = text.block_text(42, 512)
    assert text.block_text(42, 100) == full[:100]
    assert text.prompt_text([42], 512, 7, "x") == full[:7]
    words = BlockText(approximate_units())
    assert words.block_text(42, 512).startswith(words.block_text(42, 33))


@pytest.mark.parametrize("vocabulary", sorted(VOCABULARIES))
@pytest.mark.parametrize("length_scale", [1 / 16, 1 / 8, 0.3])
def test_prompts_have_exactly_the_planned_tokens(vocabulary, length_scale, tmp_path):
    units, encode = VOCABULARIES[vocabulary](tmp_path)
    assert units.exact
    text = BlockText(units)
    for r in _excerpt(length_scale)[:300]:
        prompt = _prompt(text, r)
        assert len(encode(prompt)) == r.input_tokens == units.count_tokens(prompt)


def test_full_length_prompts_are_exact_on_the_byte_vocabulary():
    text = BlockText(byte_units())
    for r in _excerpt(1.0)[:60]:
        assert len(_prompt(text, r).encode("utf-8")) == r.input_tokens


def test_word_units_of_a_bpe_tokenizer_are_exact(tmp_path):
    units, encode = _word_bpe(tmp_path)
    assert len(units.units) >= 32 and all(u.startswith(" ") for u in units.units)
    text = BlockText(units)
    for r in _excerpt(1 / 16)[:200]:
        assert len(encode(_prompt(text, r))) == r.input_tokens


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _shared_ids(a: TraceRequest, b: TraceRequest) -> int:
    return _common_prefix(list(a.hash_ids), list(b.hash_ids))


@pytest.mark.parametrize("vocabulary", sorted(VOCABULARIES))
@pytest.mark.parametrize("length_scale", [1 / 16, 1 / 4])
def test_prompts_sharing_k_hash_ids_share_exactly_k_blocks_of_tokens(
    vocabulary, length_scale, tmp_path
):
    units, encode = VOCABULARIES[vocabulary](tmp_path)
    text = BlockText(units)
    requests = _excerpt(length_scale)[:400]
    block = requests[0].block_tokens
    pairs = 0
    for a, b in itertools.pairwise(requests):
        k = _shared_ids(a, b)
        if not (1 <= k < min(len(a.hash_ids), len(b.hash_ids))):
            continue
        pairs += 1
        tokens_a, tokens_b = encode(_prompt(text, a)), encode(_prompt(text, b))
        # Past the shared blocks, block k of each differs; their first tokens may agree by
        # chance (1 in 27 on the byte alphabet), which is all the overlap there can be.
        chance = _common_prefix(
            encode(text.block_text(a.hash_ids[k], block)),
            encode(text.block_text(b.hash_ids[k], block)),
        )
        assert _common_prefix(tokens_a, tokens_b) == k * block + min(
            chance, len(tokens_a) - k * block, len(tokens_b) - k * block
        )
        assert chance < 4
    assert pairs > 50


def test_a_partial_last_block_shares_its_text_with_the_full_block():
    text = BlockText(byte_units())
    short = text.prompt_text([7, 8, 9], 16, 40, "a")  # block 9 holds 8 of its 16 tokens
    longer = text.prompt_text([7, 8, 9, 10], 16, 64, "b")
    assert longer.startswith(short)


def test_prompts_without_hash_ids_are_unshared_filler():
    text = BlockText(byte_units())
    prompts = [text.prompt_text((), None, 300, seed) for seed in range(200)]
    assert all(len(p) == 300 for p in prompts)
    assert len({p[:24] for p in prompts}) == 200  # unique from the first tokens
    assert text.prompt_text((), None, 300, 5) == prompts[5]


def test_tokens_past_the_hash_blocks_are_filler_of_the_request():
    text = BlockText(byte_units())
    a = text.prompt_text([1, 2], 16, 50, "a")
    b = text.prompt_text([1, 2], 16, 50, "b")
    assert len(a) == len(b) == 50
    assert a[:32] == b[:32] and a[32:] != b[32:]


def test_the_block_cache_size_does_not_change_the_text():
    requests = _excerpt(1 / 16)[:200]
    small, large = BlockText(byte_units(), max_cached_blocks=1), BlockText(byte_units())
    assert [_prompt(small, r) for r in requests] == [_prompt(large, r) for r in requests]


def test_the_bundled_tokenizer_json_is_treated_as_exact_byte_level():
    units, encode = _bundled_hf()
    assert units.exact and units.source.startswith("hf:")
    assert sorted(units.units) == sorted("abcdefghijklmnopqrstuvwxyz ")
    assert units.count_tokens("hello world") == 11 == len(encode("hello world"))


def test_approximate_units_are_words_with_a_leading_space_and_no_exact_count():
    units = approximate_units()
    assert not units.exact and units.count_tokens("anything") is None
    assert len(set(units.units)) == len(units.units) >= 64
    assert all(u.startswith(" ") and u[1:].isalpha() and u[1:].islower() for u in units.units)


def test_token_units_picks_the_vocabulary():
    assert token_units(None).source == "approximate"
    assert token_units("byte").source == "byte"
    pytest.importorskip("tokenizers")
    assert token_units(str(BUNDLED_TOKENIZER)).exact
    assert token_units(BUNDLED_TOKENIZER.parent).exact  # a tokenizer directory works too


def test_without_the_tokenizers_library_a_tokenizer_path_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ConfigError, match="pip install tokenizers"):
        hf_units(BUNDLED_TOKENIZER)


def test_an_unreadable_tokenizer_file_is_a_config_error(tmp_path):
    pytest.importorskip("tokenizers")
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot load"):
        hf_units(bad)


def test_a_tokenizer_without_one_token_units_is_refused(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers

    # Whole whitespace-split words, unknown ones as [UNK]: "ab" is one token, not two.
    tokenizer = tokenizers.Tokenizer(
        models.WordLevel({"[UNK]": 0, "the": 1, "of": 2}, unk_token="[UNK]")
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    with pytest.raises(ConfigError, match="leave --tokenizer out"):
        hf_units(path)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: BlockText(byte_units(), max_cached_blocks=0), "max_cached_blocks"),
        (lambda: BlockText(byte_units()).prompt_text([1], 16, 0, 1), "input_tokens"),
    ],
)
def test_bad_arguments_are_config_errors(call, message):
    with pytest.raises(ConfigError, match=message):
        call()
