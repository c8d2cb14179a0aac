"""A chat-completions client for any OpenAI-compatible endpoint (vLLM, SGLang, hosted APIs).

One request per call, through the `openai` SDK with its own retries turned off:
this module retries rate limits (429), server errors (5xx), timeouts and
dropped connections itself, with exponential backoff and jitter (honouring a
Retry-After header), under a semaphore that bounds the requests in flight.

The body of a successful reply is kept as text before it is parsed, so a reply
that is not a valid chat completion (truncated JSON, no choices) is still a
response: it comes back `malformed`, with the raw body as its content, and the
caller stores it and judges it as an extract failure. Requests that fail for
good come back with `error` set; a misconfigured endpoint (bad key, unknown
model, bad request) raises EndpointError, since every later request would
fail the same way.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any

import openai

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class EndpointError(RuntimeError):
    """The endpoint refuses the run as configured (authentication, model name, request shape)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status of the refusal


@dataclass(frozen=True)
class ClientConfig:
    base_url: str
    model: str
    api_key: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float = 600.0         # per request, the whole exchange
    retries: int = 6                 # extra attempts after the first
    backoff_s: float = 1.0           # first delay; doubles each retry
    backoff_max_s: float = 60.0
    concurrency: int = 4
    extra_body: dict[str, Any] = field(default_factory=dict)

    def request_params(self) -> dict[str, Any]:
        """What every request sends besides the messages (stored with the run)."""
        params: dict[str, Any] = {"model": self.model}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        return params


@dataclass
class ChatResult:
    content: str | None = None       # the model's text; for a malformed reply, the raw body
    ok: bool = False                 # a parsed chat completion came back
    malformed: str | None = None     # why the reply body is not a chat completion
    error: str | None = None         # why no reply came back at all (after the retries)
    finish_reason: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    latency_s: float | None = None   # of the attempt that answered
    attempts: int = 0
    response_id: str | None = None
    retried: list[str] = field(default_factory=list)  # one line per failed attempt
    # Function calling (models/agent.py): each call as {"id", "name", "arguments" (the raw text sent)}.
    tool_calls: list[dict[str, Any]] | None = None
    cost: float | None = None        # usage.cost, where the endpoint reports one

    @property
    def answered(self) -> bool:
        """Something to store: a completion or a malformed body."""
        return self.ok or self.malformed is not None

    def meta(self) -> dict[str, Any]:
        d: dict[str, Any] = {"attempts": self.attempts}
        for key in ("finish_reason", "response_id", "malformed"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        if self.retried:
            d["retried"] = self.retried[-10:]
        return d


def backoff_delay(attempt: int, base: float, cap: float, retry_after: float | None = None,
                  rng: random.Random | None = None) -> float:
    """Delay before retry number `attempt` (0-based): exponential with jitter in [d/2, d],
    or the server's Retry-After when it gives one (both capped)."""
    if retry_after is not None and retry_after >= 0:
        return min(cap, retry_after)
    delay = min(cap, base * (2 ** attempt))
    return delay / 2 + (rng or random).uniform(0, delay / 2)


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def parse_completion(body: str) -> tuple[dict[str, Any] | None, str | None]:
    """(fields, None) for a chat completion body, or (None, why not)."""
    try:
        data = json.loads(body)
    except json.JSONDecodeError as exc:
        return None, f"the reply is not valid JSON ({exc.msg} at character {exc.pos} of {len(body)})"
    except (ValueError, RecursionError):
        # Nested deeper than the parser goes: an endpoint's fault, said like any malformed reply.
        return None, f"the reply is JSON nested too deeply to read ({len(body)} characters)"
    if not isinstance(data, dict):
        return None, "the reply is JSON but not an object"
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, "the reply has no choices"
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None, "the reply's first choice has no message"
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return None, "the reply's message content is not text"
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    text = content or ""
    if isinstance(reasoning, str) and reasoning.strip():
        # Reasoning servers split the thinking off; keep it, marked so extract sets it aside.
        text = f"<think>\n{reasoning}\n</think>\n{text}"
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    cost = usage.get("cost")
    return {
        "content": text,
        "finish_reason": choices[0].get("finish_reason"),
        "tokens_in": usage.get("prompt_tokens"),
        "tokens_out": usage.get("completion_tokens"),
        "response_id": data.get("id") if isinstance(data.get("id"), str) else None,
        "tool_calls": _tool_calls(message.get("tool_calls")),
        "cost": float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) else None,
    }, None


def _tool_calls(raw: Any) -> list[dict[str, Any]] | None:
    """The reply's function calls as sent: arguments stay the raw text (they may not be JSON)."""
    if not isinstance(raw, list) or not raw:
        return None
    calls = []
    for i, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = "" if args is None else json.dumps(args)
        call_id = call.get("id") if isinstance(call, dict) else None
        calls.append({"id": call_id if isinstance(call_id, str) and call_id else f"call_{i}",
                      "name": fn.get("name") if isinstance(fn.get("name"), str) else "", "arguments": args})
    return calls


class ChatClient:
    def __init__(self, config: ClientConfig, *, rng: random.Random | None = None) -> None:
        self.config = config
        self._rng = rng or random.Random()
        self._semaphore = asyncio.Semaphore(max(1, config.concurrency))
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url,
            # Local servers take any key; the SDK insists on a non-empty one.
            api_key=config.api_key or os.environ.get("OPENAI_API_KEY") or "unused",
            max_retries=0,
            timeout=config.timeout_s,
        )

    async def close(self) -> None:
        await self._client.close()

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> ChatResult:
        """One chat completion, retried on transient failures. Raises EndpointError only
        for a configuration the endpoint refuses. `tools` offers functions to call."""
        result = ChatResult()
        cfg = self.config
        offered = {"tools": tools} if tools else {}
        for attempt in range(cfg.retries + 1):
            result.attempts = attempt + 1
            retry_after: float | None = None
            async with self._semaphore:
                started = time.perf_counter()
                try:
                    raw = await self._client.chat.completions.with_raw_response.create(
                        messages=messages,  # type: ignore[arg-type]
                        **offered,
                        **cfg.request_params(),
                        **({"extra_body": cfg.extra_body} if cfg.extra_body else {}),
                    )
                    body = raw.text
                except openai.APIStatusError as exc:
                    status = exc.status_code
                    if status not in RETRY_STATUS and status < 500:
                        raise EndpointError(f"{cfg.base_url} refused the request: HTTP {status}: "
                                            f"{_short(exc.message)}", status) from None
                    retry_after = _retry_after(exc)
                    why = f"HTTP {status}"
                except openai.APITimeoutError:
                    why = f"timed out after {cfg.timeout_s:g} s"
                except openai.APIConnectionError as exc:
                    cause = exc.__cause__ or exc
                    why = f"connection failed: {type(cause).__name__}: {_short(str(cause))}"
                else:
                    result.latency_s = time.perf_counter() - started
                    fields, problem = parse_completion(body)
                    if fields is None:
                        result.content, result.malformed = body, problem
                    else:
                        result.ok = True
                        for key, value in fields.items():
                            setattr(result, key, value)
                    return result
            result.retried.append(f"attempt {attempt + 1}: {why}")
            if attempt == cfg.retries:
                result.error = f"no reply after {attempt + 1} attempt(s); last: {why}"
                return result
            await asyncio.sleep(backoff_delay(attempt, cfg.backoff_s, cfg.backoff_max_s, retry_after, self._rng))
        return result


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"
