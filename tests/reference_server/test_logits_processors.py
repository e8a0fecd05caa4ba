"""logit_bias and the penalties (logits_processors.py): vLLM's arithmetic, each row from its own
tokens, masked tokens stay masked, rows without settings are untouched; and the values
SamplingParams accepts for them."""

from __future__ import annotations

import math

import pytest

from reference_server.errors import RequestValidationError
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import Sequence

torch = pytest.importorskip("torch")

from reference_server.logits_processors import apply_logits_processors  # noqa: E402

VOCAB = 8


def _seq(params: SamplingParams, prompt: list[int], output: list[int]) -> Sequence:
    seq = Sequence("r", prompt, params, priority="interactive", arrival_time=0.0)
    seq.output_token_ids.extend(output)
    return seq


def test_logit_bias_moves_only_its_rows_tokens_and_keeps_masked_ones_masked():
    logits = torch.zeros((2, VOCAB))
    logits[0, 3] = -math.inf
    biased = _seq(SamplingParams(logit_bias={2: 5.0, 3: 100.0}), [1], [])
    plain = _seq(SamplingParams(), [1], [])
    apply_logits_processors(logits, [biased, plain])
    assert logits[0, 2] == 5.0
    assert logits[0, 3] == -math.inf
    assert torch.count_nonzero(logits[0]) == 2
    assert torch.equal(logits[1], torch.zeros(VOCAB))


def test_frequency_and_presence_penalties_count_the_rows_own_output():
    logits = torch.ones((2, VOCAB))
    penalised = _seq(
        SamplingParams(frequency_penalty=0.5, presence_penalty=0.25), [4, 4], [2, 2, 2, 5]
    )
    neighbour = _seq(SamplingParams(), [2], [2, 2])
    apply_logits_processors(logits, [penalised, neighbour])
    assert logits[0, 2] == pytest.approx(1 - 3 * 0.5 - 0.25)
    assert logits[0, 5] == pytest.approx(1 - 0.5 - 0.25)
    assert logits[0, 4] == 1.0  # prompt tokens: not for these two penalties
    assert torch.equal(logits[1], torch.ones(VOCAB))


def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits():
    logits = torch.tensor([[2.0, -2.0, 2.0, -2.0, 1.0, 1.0, 1.0, 1.0]])
    seq = _seq(SamplingParams(repetition_penalty=2.0), [0], [1])
    apply_logits_processors(logits, [seq])
    assert logits[0].tolist() == [1.0, -4.0, 2.0, -2.0, 1.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"logit_bias": {1: 101.0}}, "logit_bias"),
        ({"logit_bias": {-1: 1.0}}, "logit_bias"),
        ({"thinking_tokens": 3}, "thinking_tokens"),
        ({"thinking": True, "thinking_tokens": -1}, "thinking_tokens"),
    ],
)
def test_sampling_params_refuse_out_of_range_settings(kwargs, field):
    with pytest.raises(RequestValidationError) as caught:
        SamplingParams(**kwargs)
    assert caught.value.field == field


def test_the_signature_keeps_whether_a_seed_was_given_not_its_value():
    assert SamplingParams(seed=1).signature() == SamplingParams(seed=2).signature()
    assert SamplingParams(seed=1).signature() != SamplingParams().signature()
    assert SamplingParams(top_p=0.5).signature() != SamplingParams().signature()
    thinking = SamplingParams(max_tokens=4, thinking=True, thinking_tokens=9)
    assert thinking.num_thinking_tokens == 4  # max_tokens bounds reasoning and answer together
