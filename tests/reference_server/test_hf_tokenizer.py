"""The shipped Hugging Face tokenizer files: equal to what `hf_tokenizer_files` renders (so the
script and the package cannot drift), shipped as package data, and counting exactly as
ByteTokenizer does - checked against the `tokenizers` / `transformers` libraries where they are
installed, and always against a plain reading of the files (byte alphabet, added tokens, chat
template rendered with Jinja as transformers renders it)."""

from __future__ import annotations

import functools
import json
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_server.api.cli import build_parser
from reference_server.hf_tokenizer_files import (
    FILE_NAMES,
    hf_tokenizer_dir,
    render_files,
    special_token_names,
)
from reference_server.tokenizer import ByteTokenizer

TOKENIZER = ByteTokenizer()
DIR = hf_tokenizer_dir()
REPO_ROOT = Path(__file__).resolve().parents[2]

# Any text a client may send, less lone surrogates (no UTF-8 form) and special token names
# (the one documented difference: the HF tokenizer reads "<|eos|>" in text as the token).
TEXTS = st.text(st.characters(blacklist_categories=("Cs",))).filter(lambda t: "<|" not in t)
SAMPLES = [
    "",
    " leading space",
    "  two\tand\ttabs\r\n",
    "héllo wörld",
    "日本語のテキスト",
    "emoji 🤖🚀 and 👩‍👩‍👧",
    "\x00\x7f\u0085\u2028",
    "Ā Ġ ĉ",  # the byte alphabet's own characters are plain text
    "a" * 3000,
]


@functools.cache
def _json(name: str) -> dict:
    return json.loads((DIR / name).read_text(encoding="utf-8"))


def test_the_shipped_files_are_exactly_what_the_script_renders() -> None:
    assert sorted(p.name for p in DIR.iterdir()) == sorted(FILE_NAMES)
    for name, text in render_files().items():
        assert (DIR / name).read_text(encoding="utf-8") == text, (
            f"{name} is stale: run scripts/make_hf_tokenizer.py"
        )


def test_the_files_are_package_data_of_an_installed_wheel() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["reference_server"]
    for name in FILE_NAMES:
        relative = (DIR / name).relative_to(REPO_ROOT / "reference_server").as_posix()
        assert any(fnmatch(relative, pattern) for pattern in patterns), relative


def test_the_cli_prints_the_directory_and_exits_0(capsys) -> None:
    parser, _ = build_parser()
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--print-tokenizer-dir"])
    assert exited.value.code == 0
    assert Path(capsys.readouterr().out.strip()) == DIR
    assert (DIR / "tokenizer.json").is_file()


# -- a plain reading of the files (no tokenizers library) --------------------------------------


def _gpt2_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's published byte-to-unicode table, written out independently of the module."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    bs += range(ord("®"), ord("ÿ") + 1)
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


def _plain_encode(text: str) -> list[int]:
    """What tokenizer.json specifies: added tokens split out of the raw text, the rest mapped
    byte by byte through the ByteLevel alphabet and looked up in the (merge-free) BPE vocab."""
    spec = _json("tokenizer.json")
    vocab = spec["model"]["vocab"]
    added = {t["content"]: t["id"] for t in spec["added_tokens"]}
    alphabet = _gpt2_bytes_to_unicode()
    ids: list[int] = []
    pattern = "(" + "|".join(map(re.escape, added)) + ")"
    for index, piece in enumerate(re.split(pattern, text)):
        if index % 2:
            ids.append(added[piece])
        else:
            ids.extend(vocab[alphabet[b]] for b in piece.encode("utf-8"))
    return ids


def test_tokenizer_json_is_a_merge_free_byte_level_bpe_with_the_special_ids() -> None:
    spec = _json("tokenizer.json")
    model = spec["model"]
    assert model["type"] == "BPE" and model["merges"] == [] and model["unk_token"] is None
    alphabet = _gpt2_bytes_to_unicode()
    assert model["vocab"] == {alphabet[b]: b for b in range(256)}
    for part in ("pre_tokenizer", "decoder"):
        assert spec[part]["type"] == "ByteLevel"
    assert spec["pre_tokenizer"]["add_prefix_space"] is False
    assert spec["pre_tokenizer"]["use_regex"] is False  # one word: no split, no merges anyway
    assert spec["normalizer"] is None
    assert {t["id"]: t["content"] for t in spec["added_tokens"]} == special_token_names()
    assert all(t["special"] and not t["normalized"] for t in spec["added_tokens"])
    config = _json("tokenizer_config.json")
    assert config["clean_up_tokenization_spaces"] is False
    names = special_token_names()
    assert config["bos_token"] == names[TOKENIZER.bos_token_id]
    assert config["eos_token"] == names[TOKENIZER.eos_token_id]
    assert _json("special_tokens_map.json")["eos_token"] == names[TOKENIZER.eos_token_id]


@settings(deadline=None, max_examples=200)
@given(TEXTS)
def test_the_files_encode_any_text_as_the_byte_tokenizer_does(text: str) -> None:
    assert _plain_encode(text) == TOKENIZER.encode(text)


def test_special_token_names_in_text_are_the_one_documented_difference() -> None:
    assert _plain_encode("a<|eos|>") == [ord("a"), TOKENIZER.eos_token_id]
    assert TOKENIZER.encode("a<|eos|>") == list(b"a<|eos|>")


@functools.cache
def _chat_template():  # type: ignore[no-untyped-def]
    """Compiled as transformers compiles a chat template (its sandbox and whitespace settings)."""
    jinja2 = pytest.importorskip("jinja2")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(_json("tokenizer_config.json")["chat_template"])


def _render_chat(messages: list[dict], *, add_generation_prompt: bool) -> str:
    return _chat_template().render(messages=messages, add_generation_prompt=add_generation_prompt)


MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": TEXTS}
    ),
    min_size=1,
    max_size=4,
)


@settings(deadline=None, max_examples=100)
@given(MESSAGES)
def test_the_chat_template_renders_the_tokens_of_apply_chat_template(messages) -> None:
    expected = TOKENIZER.apply_chat_template(messages)
    assert _plain_encode(_render_chat(messages, add_generation_prompt=True)) == expected
    assert _plain_encode(_render_chat(messages, add_generation_prompt=False)) == expected[:-1]


def test_the_chat_template_reads_messages_as_the_api_does() -> None:
    api_shaped = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi "}, {"text": "you"}]},
        {"role": "assistant", "content": None},
    ]
    plain = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi you"},
        {"role": "assistant", "content": ""},
    ]
    rendered = _render_chat(api_shaped, add_generation_prompt=True)
    assert _plain_encode(rendered) == TOKENIZER.apply_chat_template(plain)
    with pytest.raises(Exception, match="roles must be"):
        _render_chat([{"role": "tool", "content": "x"}], add_generation_prompt=True)


# -- the real libraries, where installed -------------------------------------------------------


@pytest.fixture(scope="module")
def hf_tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(DIR / "tokenizer.json"))


@pytest.mark.parametrize("text", SAMPLES)
def test_the_tokenizers_library_encodes_and_decodes_as_the_byte_tokenizer(hf_tokenizer, text):
    ids = hf_tokenizer.encode(text, add_special_tokens=False).ids
    assert ids == TOKENIZER.encode(text)
    assert hf_tokenizer.encode(text).ids == TOKENIZER.encode(text, add_bos=True)
    assert hf_tokenizer.decode(ids) == text
    assert hf_tokenizer.decode([TOKENIZER.bos_token_id, *ids, TOKENIZER.eos_token_id]) == text


@settings(deadline=None, max_examples=200)
@given(TEXTS)
def test_the_tokenizers_library_agrees_on_any_text(hf_tokenizer, text: str) -> None:
    assert hf_tokenizer.encode(text, add_special_tokens=False).ids == TOKENIZER.encode(text)


def test_transformers_loads_the_directory_with_its_chat_template() -> None:
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoTokenizer.from_pretrained(str(DIR))
    messages = [
        {"role": "system", "content": "Sé breve."},
        {"role": "user", "content": " hi 🤖\n"},
    ]
    expected = TOKENIZER.apply_chat_template(messages)
    rendered = auto.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    # transformers 5 returns a BatchEncoding (a mapping, not a dict); 4.x a list of ids.
    ids = rendered["input_ids"] if hasattr(rendered, "keys") else list(rendered)
    assert ids == expected
    for text in SAMPLES:
        assert auto(text, add_special_tokens=False)["input_ids"] == TOKENIZER.encode(text)
        assert auto.decode(TOKENIZER.encode(text)) == text
    assert auto.eos_token_id == TOKENIZER.eos_token_id
