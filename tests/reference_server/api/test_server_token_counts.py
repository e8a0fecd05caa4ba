"""A client that re-tokenizes the text counts what `usage` reports: random requests run to
max_tokens on a real server, for chat and completions, streamed or not; each text is valid
UTF-8 whose token count - by the shipped Hugging Face tokenizer where `tokenizers` is installed,
and by the server's ByteTokenizer always - equals usage.completion_tokens."""

from __future__ import annotations

import random
from dataclasses import dataclass

import httpx
import pytest
from server_testlib import parse_sse

from reference_server.hf_tokenizer_files import hf_tokenizer_dir
from reference_server.tokenizer import ByteTokenizer

TOKENIZER = ByteTokenizer()
REQUESTS_PER_SHAPE = 5


@dataclass(frozen=True)
class Answer:
    endpoint: str
    stream: bool
    prompt: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int


def _body(endpoint: str, prompt: str, rng: random.Random, stream: bool) -> dict:
    body = {
        "max_tokens": rng.randrange(1, 48),
        "temperature": rng.choice([0.0, 1.0, 2.0]),
        "seed": rng.randrange(2**31),
        "ignore_eos": True,  # a loaded checkpoint could end early; the count must still match
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if endpoint == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def _ask(client: httpx.Client, endpoint: str, body: dict) -> tuple[str, dict]:
    path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
    if not body["stream"]:
        response = client.post(path, json=body)
        assert response.status_code == 200, response.text
        answer = response.json()
        choice = answer["choices"][0]
        text = choice["message"]["content"] if endpoint == "chat" else choice["text"]
        return text, answer["usage"]
    with client.stream("POST", path, json=body) as response:
        events = parse_sse(list(response.iter_lines()))
    assert events[-1] == "[DONE]"
    pieces = []
    for event in events[:-2]:
        choice = event["choices"][0]
        pieces.append(
            choice["delta"].get("content") or "" if endpoint == "chat" else choice["text"]
        )
    return "".join(pieces), events[-2]["usage"]


@pytest.fixture(scope="module")
def answers(client: httpx.Client) -> list[Answer]:
    rng = random.Random(20261201)
    prompts = ["Tell me a story.", "  leading spaces", "日本語で", "emoji 🤖", "a\nb\tc"]
    out = []
    for endpoint in ("chat", "completions"):
        for stream in (False, True):
            for _ in range(REQUESTS_PER_SHAPE):
                prompt = rng.choice(prompts)
                body = _body(endpoint, prompt, rng, stream)
                text, usage = _ask(client, endpoint, body)
                out.append(
                    Answer(endpoint, stream, prompt, text, usage["prompt_tokens"],
                           usage["completion_tokens"], body["max_tokens"])
                )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def client(server):  # module scope: the answers are fetched once for every check below
    with httpx.Client(base_url=server.base_url, timeout=60.0) as http:
        yield http


def test_every_text_is_valid_utf8_and_runs_to_max_tokens(answers: list[Answer]) -> None:
    assert len(answers) == 4 * REQUESTS_PER_SHAPE
    for answer in answers:
        assert answer.completion_tokens == answer.max_tokens
        assert "\ufffd" not in answer.text
        answer.text.encode("utf-8")  # no lone surrogates either


def test_the_byte_tokenizer_counts_usage(answers: list[Answer]) -> None:
    for answer in answers:
        assert len(TOKENIZER.encode(answer.text)) == answer.completion_tokens, answer


def test_the_shipped_hf_tokenizer_counts_usage(answers: list[Answer]) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(hf_tokenizer_dir() / "tokenizer.json"))
    for answer in answers:
        count = len(hf.encode(answer.text, add_special_tokens=False).ids)
        assert count == answer.completion_tokens, answer
        if answer.endpoint == "completions":  # a text prompt gets bos, as encode() adds it
            assert len(hf.encode(answer.prompt).ids) == answer.prompt_tokens, answer
