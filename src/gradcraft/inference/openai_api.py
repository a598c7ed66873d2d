"""The OpenAI API's request and answer shapes, for the server (inference/server.py).

Requests are checked strictly (a wrong type or a value out of range is a 400 `invalid_request_error`
naming the field in `param`, as OpenAI answers); the answers are built here, so that streamed and plain
answers share one source.

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

from pydantic import BaseModel, Field, field_validator, model_validator

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
MAX_LOGIT_BIAS = 300  # entries of logit_bias (OpenAI's limit)

# OpenAI fields whose meaning this server does not implement: a request that sets one (to anything but
# its "off" value) is refused with a 400 naming it, rather than answered as if it were not there.
UNSUPPORTED = {
    "suffix": (None, ""),
    "best_of": (None, 1),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "function_call": (None, "none"),
    "response_format": (None, {"type": "text"}),
    "audio": (None,),
    "prediction": (None,),
    "modalities": (None, ["text"]),
}


class UnsupportedField(ValueError):
    """A request set a field the server does not implement (server.py answers 400 naming it)."""

    def __init__(self, name: str):
        super().__init__(f"{name} is not supported by this server")
        self.name = name


class StreamOptions(BaseModel):
    include_usage: bool = False
    model_config = {"extra": "ignore", "strict": True}


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
    stream_options: StreamOptions | None = None
    # penalties and filters (docs/inference.md): OpenAI's, HF's repetition_penalty, vLLM's min_p
    frequency_penalty: float | None = Field(None, ge=-2, le=2, allow_inf_nan=False)
    presence_penalty: float | None = Field(None, ge=-2, le=2, allow_inf_nan=False)
    repetition_penalty: float | None = Field(None, gt=0, le=100, allow_inf_nan=False)
    logit_bias: dict[str, float] | None = None
    min_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    # True: special-token strings in the prompt are plain text (HF's `split_special_tokens`)
    split_special_tokens: bool = False
    # at the context length: "stop", or "crop" (go on with the last context tokens, as nanoGPT's sample.py)
    context: Literal["stop", "crop"] = "stop"
    model_config = {"extra": "allow", "strict": True}

    @model_validator(mode="after")
    def _unsupported(self):
        for name, value in (self.model_extra or {}).items():
            if name in UNSUPPORTED and value not in UNSUPPORTED[name]:
                raise UnsupportedField(name)
        return self

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, value):
        if value is None:
            return value
        if len(value) > MAX_LOGIT_BIAS:
            raise ValueError(f"at most {MAX_LOGIT_BIAS} entries, got {len(value)}")
        for key, bias in value.items():
            if not key.isdigit():
                raise ValueError(f"keys are token ids (strings of digits), got {key!r}")
            if not -100 <= bias <= 100:
                raise ValueError(f"biases are in [-100, 100], got {bias} for token {key}")
        return value

    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

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
    # text, a list of texts, token ids, or a list of token-id lists (as OpenAI takes them)
    prompt: str | list[str] | list[int] | list[list[int]] = Field(...)
    max_tokens: int | None = Field(16, ge=0)  # 0: score the prompt (with echo and logprobs)
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, value):
        prompts = _as_prompts(value)
        if not 1 <= len(prompts) <= MAX_PROMPTS:
            raise ValueError(f"give 1 to {MAX_PROMPTS} prompts, got {len(prompts)}")
        if sum(len(p) for p in prompts) > MAX_PROMPT_CHARS:
            raise ValueError(f"the prompts are over {MAX_PROMPT_CHARS} characters or tokens")
        if any(not isinstance(p, str) and any(t < 0 for t in p) for p in prompts):
            raise ValueError("token ids are at least 0")
        return value

    def prompts(self) -> list:
        """Each prompt: a string, or a list of token ids."""
        return _as_prompts(self.prompt)


def _as_prompts(value) -> list:
    if isinstance(value, str):
        return [value]
    if value and all(isinstance(v, int) for v in value):
        return [list(value)]
    return list(value)


class ContentPart(BaseModel):
    """One part of a message's content: only text parts are understood (an image is refused)."""

    type: str
    text: str = Field("", max_length=MAX_PROMPT_CHARS)
    model_config = {"extra": "ignore", "strict": True}

    @field_validator("type")
    @classmethod
    def _type(cls, value):
        if value != "text":
            raise ValueError(f"only text content parts are supported, got {value!r}")
        return value


class ChatMessage(BaseModel):
    role: str
    content: str | list[ContentPart] = Field(..., max_length=MAX_PROMPT_CHARS)
    model_config = {"extra": "ignore", "strict": True}

    def text(self) -> str:
        """The content as one string (text parts joined, as OpenAI concatenates them)."""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)

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
        return chat_prompt([(m.role, m.text()) for m in self.messages])


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
