"""The OpenAI API's request and answer shapes, for the server (inference/server.py).

Requests are checked strictly (a wrong type or a value out of range is a 422 naming the field); the
answers are built here, so that streamed and plain answers share one source.

The chat template. gradcraft's tokenizers carry no chat template, so /v1/chat/completions turns the
messages into one prompt with this simple one (documented in docs/inference.md):

    System: {content}
    User: {content}
    Assistant: {content}
    ...
    Assistant:

one line per message, `Role: content`, then `Assistant:` for the model to continue; "\\nUser:" is a
stop string, so the answer ends where the model starts the user's next turn.
"""

import time
import uuid

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from gradcraft.inference.generate import MAX_TEMPERATURE, MIN_TEMPERATURE

MAX_PROMPT_CHARS = 1_000_000
MAX_PROMPTS = 64  # prompts in one /v1/completions request (a list)
MAX_CHOICES = 16  # n
MAX_LOGPROBS = 5  # as OpenAI (completions); chat's top_logprobs allows 20
MAX_STOP_STRINGS = 4  # as OpenAI
MAX_STOP_CHARS = 256
MAX_TOP_K = 2**31 - 1
MAX_SEED = 2**63 - 1  # (choice i of a request samples with seed + i: NumPy takes any size)
CHAT_ROLES = ("system", "user", "assistant")
CHAT_STOP = "\nUser:"


class _Sampling(BaseModel):
    """The fields /v1/completions and /v1/chat/completions share."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(1.0, ge=0, le=MAX_TEMPERATURE, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=1, le=MAX_TOP_K)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    stream: bool = False
    # at the context length: "stop", or "crop" (go on with the last context tokens, as nanoGPT's sample.py)
    context: Literal["stop", "crop"] = "stop"
    model_config = {"extra": "ignore", "strict": True}

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value):
        if value is not None and 0 < value < MIN_TEMPERATURE:
            raise ValueError(f"must be 0 (greedy) or at least {MIN_TEMPERATURE}")
        return value

    @field_validator("stop")
    @classmethod
    def _stop(cls, value):
        stops = [value] if isinstance(value, str) else list(value or ())
        if len(stops) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings, got {len(stops)}")
        if any(len(s) > MAX_STOP_CHARS for s in stops):
            raise ValueError(f"a stop string is at most {MAX_STOP_CHARS} characters")
        return value

    def stop_strings(self) -> tuple:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class CompletionRequest(_Sampling):
    prompt: str | list[str] = Field(...)
    max_tokens: int | None = Field(16, ge=1)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value):
        prompts = [value] if isinstance(value, str) else value
        if not 1 <= len(prompts) <= MAX_PROMPTS:
            raise ValueError(f"give 1 to {MAX_PROMPTS} prompts, got {len(prompts)}")
        if sum(len(p) for p in prompts) > MAX_PROMPT_CHARS:
            raise ValueError(f"the prompts are over {MAX_PROMPT_CHARS} characters")
        return value

    def prompts(self) -> list[str]:
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)


class ChatMessage(BaseModel):
    role: str
    content: str = Field(..., max_length=MAX_PROMPT_CHARS)
    model_config = {"extra": "ignore", "strict": True}

    @field_validator("role")
    @classmethod
    def _role(cls, value):
        if value not in CHAT_ROLES:
            raise ValueError(f"must be one of {', '.join(CHAT_ROLES)}")
        return value


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(..., min_length=1, max_length=1000)
    max_completion_tokens: int | None = Field(None, ge=1)  # the newer name of max_tokens
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def prompt(self) -> str:
        return chat_prompt([(m.role, m.content) for m in self.messages])


def chat_prompt(messages: list[tuple[str, str]]) -> str:
    """The default chat template: one `Role: content` line per message, then `Assistant:`."""
    return "".join(f"{role.capitalize()}: {content}\n" for role, content in messages) + "Assistant:"


def error_body(
    message: str, kind: str = "invalid_request_error", param: str | None = None, code: str | None = None
) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def new_id(prefix: str) -> tuple[str, int]:
    return f"{prefix}-{uuid.uuid4().hex[:24]}", int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def finish_reason(reason: str | None) -> str | None:
    """OpenAI's two reasons: 'stop' (a stop token or string) or 'length' (max_tokens or the context)."""
    return None if reason is None else "stop" if reason == "stop" else "length"


def completion_logprobs(entries: list) -> dict:
    """/v1/completions' logprobs object from (text, TokenLogprob or None, text offset, top texts) entries."""
    return {
        "tokens": [text for text, _, _, _ in entries],
        "token_logprobs": [None if lp is None else lp.logprob for _, lp, _, _ in entries],
        "top_logprobs": [None if lp is None else dict(zip(top, (v for _, v in lp.top))) for _, lp, _, top in entries],
        "text_offset": [offset for _, _, offset, _ in entries],
    }


def chat_logprobs(entries: list) -> dict:
    """/v1/chat/completions' logprobs object from the same entries."""

    def one(text, logprob):
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return {
        "content": [
            dict(one(text, lp.logprob), top_logprobs=[one(t, v) for t, (_, v) in zip(top, lp.top)])
            for text, lp, _, top in entries
            if lp is not None
        ]
    }
