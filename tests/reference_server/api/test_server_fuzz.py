"""Property: no request body a client can send makes the server answer 5xx (bounded fuzz)."""

from __future__ import annotations

import json

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Values of every JSON type, plus near-valid ones, so the fuzz reaches deep into validation.
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
    st.text(max_size=20),
)  # fmt: skip
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
small_ints = st.one_of(st.integers(-3, 12), json_values)
messages = st.one_of(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "assistant", "tool", "x"]),
             "content": st.one_of(st.text(max_size=30), json_values)},
        ),
        max_size=3,
    ),
    json_values,
)  # fmt: skip
optional_fields = {
    "model": st.one_of(st.just("tiny"), json_values),
    "max_tokens": small_ints,
    "max_completion_tokens": small_ints,
    "temperature": st.one_of(st.floats(-1, 3), json_values),
    "top_p": st.one_of(st.floats(-0.5, 1.5), json_values),
    "top_k": small_ints,
    "seed": st.one_of(st.integers(-5, 2**64), json_values),
    "stop": st.one_of(st.text(max_size=4), st.lists(st.text(max_size=4), max_size=6), json_values),
    "n": small_ints,
    "stream": st.one_of(st.booleans(), json_values),
    "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": json_values}),
                                json_values),
    "priority": st.one_of(st.sampled_from(["interactive", "batch", "vip"]), json_values),
    "ignore_eos": json_values,
    "logprobs": json_values,
    "min_tokens": small_ints,
    "unexpected": json_values,
}  # fmt: skip
chat_bodies = st.fixed_dictionaries({"messages": messages}, optional=optional_fields)
completion_bodies = st.fixed_dictionaries(
    {"prompt": st.one_of(st.text(max_size=30), st.lists(st.integers(-2, 300), max_size=5),
                         json_values)},
    optional=optional_fields,
)  # fmt: skip
embedding_bodies = st.fixed_dictionaries(
    {"input": st.one_of(st.text(max_size=20), st.lists(st.text(max_size=10), max_size=3),
                        json_values)},
    optional={"model": json_values, "encoding_format": json_values, "dimensions": json_values},
)  # fmt: skip
PRIORITIES = ["batch", "BATCH", "x", "no such"]
requests = st.one_of(
    st.tuples(st.just("/v1/chat/completions"), chat_bodies),
    st.tuples(st.just("/v1/completions"), completion_bodies),
    st.tuples(st.just("/v1/embeddings"), embedding_bodies),
    st.tuples(st.sampled_from(["/v1/completions", "/admin/batching"]), json_values),
)


def test_fuzzed_bodies_never_get_a_5xx(client: httpx.Client):
    @settings(
        max_examples=60, deadline=None, database=None, derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )  # fmt: skip
    @given(
        request=requests,
        priority_header=st.one_of(st.none(), st.sampled_from(["batch", "BATCH", "x", "no such"])),
    )
    def check(request, priority_header):
        path, body = request
        headers = {"content-type": "application/json"}
        if priority_header is not None:
            headers["X-Priority"] = priority_header
        # stdlib json: it writes integers beyond 64 bits, which orjson (client side) refuses.
        method = "PUT" if path == "/admin/batching" else "POST"
        with client.stream(
            method, path, content=json.dumps(body).encode(), headers=headers
        ) as response:
            payload = response.read()
        assert response.status_code < 500, (path, body, payload[:500])
        if response.status_code >= 400:
            error = orjson.loads(payload)["error"]
            assert set(error) == {"message", "type", "param", "code"}
        if path == "/admin/batching" and response.status_code == 200:
            # Never leave a fuzzed batching setting behind for the other tests.
            restore = client.put("/admin/batching", json=orjson.loads(payload)["previous"])
            assert restore.status_code == 200

    check()
