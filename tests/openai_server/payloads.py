"""The OpenAI response bodies the test server sends: completions, their stream events, usage, logprobs.

``choices`` is what :meth:`.server.OpenAITestServer._choice_texts` gives: per choice, its
tokens and its finish reason. ``number`` makes the response id; every token gets ``logprob``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .request import RecordedRequest, tokenize

Choices = Sequence[tuple[list[str], str]]


def usage(req: RecordedRequest, choices: Choices) -> dict:
    prompt_tokens = len(tokenize(req.prompt))
    completion_tokens = sum(len(t) for t, _ in choices)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def chat_logprobs(tokens: list[str], logprob: float) -> dict:
    return {
        "content": [
            {
                "token": t,
                "logprob": logprob,
                "bytes": list(t.encode()),
                "top_logprobs": [],
            }
            for t in tokens
        ],
        "refusal": None,
    }


def text_logprobs(tokens: list[str], logprob: float, offset: int = 0) -> dict:
    offsets, pos = [], offset
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": [logprob] * len(tokens),
        "top_logprobs": [{t: logprob} for t in tokens],
        "text_offset": offsets,
    }


def wants_logprobs(req: RecordedRequest) -> bool:
    lp = req.body.get("logprobs")
    return bool(lp) if req.is_chat else lp is not None


def completion(req: RecordedRequest, choices: Choices, number: int, logprob: float) -> dict:
    """The whole response of a request that does not stream."""
    want_lp = wants_logprobs(req)
    created = int(time.time())
    model = req.body.get("model")
    if req.is_chat:
        return {
            "id": f"chatcmpl-test-{number}",
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": "".join(tokens)},
                    "finish_reason": finish,
                    "logprobs": chat_logprobs(tokens, logprob) if want_lp else None,
                }
                for i, (tokens, finish) in enumerate(choices)
            ],
            "usage": usage(req, choices),
        }
    return {
        "id": f"cmpl-test-{number}",
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": i,
                "text": "".join(tokens),
                "finish_reason": finish,
                "logprobs": text_logprobs(tokens, logprob) if want_lp else None,
            }
            for i, (tokens, finish) in enumerate(choices)
        ],
        "usage": usage(req, choices),
    }


def stream_events(req: RecordedRequest, choices: Choices, number: int, logprob: float) -> list[dict]:
    """The SSE events of a streamed response, in order (without the final ``[DONE]``): the
    assistant role (chat), the choices' tokens interleaved, the finish reasons, then usage if asked."""
    want_lp = wants_logprobs(req)
    created = int(time.time())
    model = req.body.get("model")
    chat = req.is_chat
    cid = f"{'chatcmpl' if chat else 'cmpl'}-test-{number}"
    base = {
        "id": cid,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created,
        "model": model,
    }

    def chunk(index, text=None, finish=None, role=False, token=None):
        if chat:
            delta = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            c = {"index": index, "delta": delta, "finish_reason": finish}
            if want_lp and token is not None:
                c["logprobs"] = chat_logprobs([token], logprob)
        else:
            c = {"index": index, "text": text or "", "finish_reason": finish}
            if want_lp and token is not None:
                c["logprobs"] = text_logprobs([token], logprob)
        return {**base, "choices": [c]}

    events = []
    for i, _choice in enumerate(choices):
        if chat:
            events.append(chunk(i, "", role=True))
    for step in range(max((len(t) for t, _ in choices), default=0)):
        for i, (tokens, _) in enumerate(choices):
            if step < len(tokens):
                events.append(chunk(i, tokens[step], token=tokens[step]))
    for i, (_, finish) in enumerate(choices):
        events.append(chunk(i, None if chat else "", finish=finish))
    if (req.body.get("stream_options") or {}).get("include_usage"):
        events.append({**base, "choices": [], "usage": usage(req, choices)})
    return events
