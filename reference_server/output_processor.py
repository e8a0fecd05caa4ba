"""Turning sampled tokens into RequestOutputs: each request's text streams (the answer's, with
its stop strings, and in thinking mode the reasoning's), its stop conditions, and which tokens
are reasoning.

It owns the per-request TextStreams and the token -> delta step (vLLM's output processor); it
does not schedule, count engine statistics or free anything: a finished request goes back to
the engine through the `on_finish` callback, which does.
"""

from __future__ import annotations

from collections.abc import Callable

from reference_server.outputs import RequestOutput
from reference_server.sampling_params import SamplingParams
from reference_server.sequence import Sequence, request_output
from reference_server.text_stream import TextStream
from reference_server.tokenizer import ByteTokenizer

__all__ = ["OutputProcessor"]

# (seq, reason, new token ids, text so far, flush the held-back text?) -> the final output
FinishCallback = Callable[[Sequence, str, list[int], str, bool], RequestOutput]


class OutputProcessor:
    def __init__(
        self,
        tokenizer: ByteTokenizer,
        *,
        eos_token_id: int,
        max_model_len: int,
        on_finish: FinishCallback,
    ) -> None:
        self._tokenizer = tokenizer
        self._eos_token_id = eos_token_id
        self._max_model_len = max_model_len
        self._on_finish = on_finish
        self._streams: dict[str, TextStream] = {}
        self._reasoning_streams: dict[str, TextStream] = {}

    def add(self, request_id: str, params: SamplingParams) -> None:
        # Stop strings look at the answer only: reasoning has a stream of its own, without them.
        self._streams[request_id] = TextStream(self._tokenizer, params.stop)
        if params.num_thinking_tokens:
            self._reasoning_streams[request_id] = TextStream(self._tokenizer, ())

    def remove(self, request_id: str, *, flush: bool) -> str:
        """Forget the request; the answer's held-back text when `flush`."""
        stream = self._streams.pop(request_id)
        self._reasoning_streams.pop(request_id, None)
        return stream.finish() if flush else ""

    def append_token(self, seq: Sequence, token: int) -> RequestOutput:
        """`token` was just appended to seq.output_token_ids: its delta, finished or not."""
        # The per-token hot path (once per running sequence per step): kept lean on purpose.
        num_output_tokens = len(seq.output_token_ids)
        params = seq.sampling_params
        if num_output_tokens <= params.num_thinking_tokens:
            return self._append_reasoning_token(seq, token, num_output_tokens)
        text, stopped = self._streams[seq.request_id].push(token)
        is_eos = token == self._eos_token_id and not params.ignore_eos
        if stopped or is_eos or token in params.stop_token_ids:
            reason = "stop"
        elif num_output_tokens >= params.max_tokens:
            reason = "length"
        elif len(seq.prompt_token_ids) + num_output_tokens >= self._max_model_len:
            # Unreachable through add_request's checks today; kept as the cache's hard bound.
            reason = "max_model_len"
        else:
            # The same fields as request_output, positionally (cheaper than keywords per token).
            return RequestOutput(
                seq.request_id,
                [token],
                text,
                False,
                None,
                len(seq.prompt_token_ids),
                num_output_tokens,
                seq.arrival_time,
                seq.first_scheduled_time,
                seq.first_token_time,
                seq.num_preemptions,
                seq.num_cached_tokens,
                "",
                params.num_thinking_tokens,  # an answer token comes after all the reasoning
            )
        seq.finish_reason = reason  # the scheduler drops it after this step
        return self._on_finish(seq, reason, [token], text, not stopped)

    def _append_reasoning_token(
        self, seq: Sequence, token: int, num_output_tokens: int
    ) -> RequestOutput:
        # Reasoning ends only by its length or max_tokens: the allowed-token mask keeps EOS and
        # stop_token_ids out of it, and stop strings apply to the answer.
        params = seq.sampling_params
        stream = self._reasoning_streams[seq.request_id]
        reasoning, _ = stream.push(token)
        if num_output_tokens == params.num_thinking_tokens:
            reasoning += stream.finish()  # the mask made it end on a character boundary
        reason = None
        if num_output_tokens >= params.max_tokens:
            reason = "length"
        elif len(seq.prompt_token_ids) + num_output_tokens >= self._max_model_len:
            reason = "max_model_len"
        if reason is None:
            output = request_output(seq, [token], "", None)
        else:
            seq.finish_reason = reason
            output = self._on_finish(seq, reason, [token], "", True)
        output.new_reasoning_text = reasoning
        return output
