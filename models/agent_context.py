"""What an agent episode sends its endpoint: one consistent prompt, and a conversation kept inside the
model's context.

The prompt. A plain run asks for one fenced code block; an agent works with tools. The agent's
system message is the plain one with its answer-format paragraph replaced by the tools' way of
working, and its user message is the task's prompt without the closing "reply with one code block"
line, plus a note on the tools and the budgets: nothing in it asks for a code block.

The conversation. Each reply and each tool answer is appended; a reply's reasoning (a reasoning
server's `<think>` section) is stored with its step but never sent back, and a call's arguments
longer than `ECHO_ARGUMENT_CHARS` go back as a short note (the workspace file holds what they
wrote). When the conversation would pass the stated context budget (`AgentBudget.context_tokens`,
counted from the endpoint's own token counts where it reports them, else 4 characters a token), or
the endpoint answers that it does: it is **compacted** to the prompt, the workspace file, and the
last tool results summarised. A refusal that says the context is exceeded is an overflow, never a
sign that function calling is missing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ptxbench.engine.text_scan import remove_think
from ptxbench.tasks.prompts import Prompt

CHARS_PER_TOKEN = 4.0                # the estimate before the endpoint has reported any count
ECHO_ARGUMENT_CHARS = 8_000          # a call's arguments sent back in full up to this size
RESULT_SUMMARY_CHARS = 700           # one tool result in a compacted conversation
KEPT_RESULTS = 6                     # the last results a compacted conversation keeps
FILE_HEAD_LINES = 60                 # a file too large to send whole: its first and last lines
# The endpoints' own words for a prompt longer than the model takes (vLLM, SGLang, OpenAI, Anthropic's
# OpenAI-compatible API, llama.cpp, TGI); matched on the error text of an HTTP 400/413/422.
_OVERFLOW = re.compile(
    r"context[ _-]?(length|window|size)|maximum context|max(imum)?[ _-]?(model[ _-]?)?(input|prompt)?[ _-]?"
    r"(length|tokens)|prompt is too long|too many (input )?tokens|reduce the length|input (is )?too long|"
    r"exceeds? (the )?(model'?s? )?(context|token|maximum)|longer than the model|token limit|"
    r"context_length_exceeded|n_ctx|input tokens exceed", re.I)
OVERFLOW_STATUSES = frozenset({400, 413, 422})
_PLAIN_FORMAT = "Answer with exactly one fenced code block"
_PLAIN_CLOSING = "Reply with the complete kernel in one fenced code block"

AGENT_SYSTEM = (
    "You work with tools. Your kernel is a file in a workspace: write it, edit it, read it, and have the "
    "judge assemble, check and time it as often as your budget allows; you finish by calling `submit`. A "
    "kernel written in a message is not judged: only what `submit` hands in counts.")


def is_overflow(status: int | None, message: str) -> bool:
    """True when an endpoint's refusal says the request is longer than the model's context."""
    return status in OVERFLOW_STATUSES and bool(_OVERFLOW.search(message or ""))


def agent_system(prompt: Prompt) -> str:
    paragraphs = [p for p in prompt.system.split("\n\n") if not p.startswith(_PLAIN_FORMAT)]
    return "\n\n".join(paragraphs + [AGENT_SYSTEM])


def agent_user(prompt: Prompt) -> str:
    paragraphs = prompt.user.rstrip("\n").split("\n\n")
    return "\n\n".join(p for p in paragraphs if not p.startswith(_PLAIN_CLOSING))


def tools_note(*, budget_line: str = "") -> str:
    """The note on the tools that follows the task's prompt (and the budget, for a driven episode)."""
    return (
        "\n\n## Working with tools\n\n"
        "Your kernel is a file in a workspace. `write_file(code, language, manifest)` writes it whole; "
        "`edit_file(old, new)` replaces one exact span; `apply_patch(patch)` applies a unified diff; "
        "`read_file(start_line, end_line)` shows it. The judge's tools act on the file as it is (given `code`, "
        "they write it to the file first):\n\n"
        "- `assemble`: ptxas's messages, registers and shared memory per kernel, and which requested instruction "
        "families reach the PTX and the machine code.\n"
        "- `check`: runs the kernel at the train sizes above and verifies every output: per size the error, how "
        "many elements are wrong and where the first one is.\n"
        "- `time`: times it at the headline size against the library.\n"
        "- `submit`: hands in the file as the final kernel; it is judged in full, at more sizes than `check` "
        "runs, and the episode ends.\n\n"
        "`language` is `ptx` (the default) or `cuda`. The launch manifest is the `manifest` argument, a JSON "
        "object (not a ```json block), left out for the default launch. Every tool answer says the budget left."
        + (f"\n\nBudget: {budget_line}." if budget_line else "")
    )


def visible_text(content: str | None) -> str:
    """A reply's text as it goes back to the endpoint: its reasoning set aside."""
    if not content:
        return ""
    return remove_think(content, space_after=True).text.strip()


def echoed_arguments(kept: str) -> str:
    """A call's recorded arguments as they go back in the conversation: whole when short, else a note."""
    if len(kept) <= ECHO_ARGUMENT_CHARS:
        return kept
    return json.dumps({"omitted": f"{len(kept):,} characters of arguments, not repeated here: the workspace file "
                                  "holds what they wrote; read_file shows it"})


@dataclass
class TokenGauge:
    """Characters per token, learnt from the endpoint's own prompt counts."""

    chars_per_token: float = CHARS_PER_TOKEN
    _samples: list[float] = field(default_factory=list)

    def learn(self, chars: int, prompt_tokens: int | None) -> None:
        if prompt_tokens and prompt_tokens > 0 and chars > 0:
            self._samples = (self._samples + [chars / prompt_tokens])[-8:]
            self.chars_per_token = min(self._samples)  # the densest text seen: never underestimate

    def tokens(self, messages: list[dict[str, Any]]) -> int:
        return int(conversation_chars(messages) / self.chars_per_token) + 1


def conversation_chars(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        total += len(m.get("content") or "") + 16
        for call in m.get("tool_calls") or ():
            fn = call.get("function") or {}
            total += len(fn.get("arguments") or "") + len(fn.get("name") or "") + 32
    return total


def summarise_result(turn: int, tool: str, status: str, result: dict[str, Any]) -> str:
    """One tool answer in a line or two: the status, the category, and the start of the rest."""
    brief = {k: v for k, v in result.items() if k not in ("file", "budget_left", "warning")}
    text = json.dumps(brief, ensure_ascii=False, default=str)
    if len(text) > RESULT_SUMMARY_CHARS:
        text = text[:RESULT_SUMMARY_CHARS] + "…"
    return f"- reply {turn}, `{tool}` ({status}): {text}"


def compacted(head: list[dict[str, Any]], *, file_code: str, file_language: str, manifest: Any,
              results: list[str], progress: str, budget_tokens: int, gauge: TokenGauge) -> list[dict[str, Any]] | None:
    """The conversation as the prompt (`head`: system and user) and one message saying where the episode
    stands: the workspace file (whole when it fits, else its ends), the last results, the budget left.
    None when even the prompt alone does not fit `budget_tokens`."""
    if gauge.tokens(head) >= budget_tokens:
        return None
    parts = ["## Where you are", "The conversation so far was compacted to fit the model's context. " + progress]
    if file_code.strip():
        parts.append(_file_section(file_code, file_language, manifest))
    else:
        parts.append("The workspace file is empty.")
    kept = list(results[-KEPT_RESULTS:])
    shrunk = not file_code.strip()
    while True:
        text = "\n\n".join(parts + (["Your last tool results:\n" + "\n".join(kept)] if kept else []) +
                           ["Carry on from here: the tools act on the file as it is now."])
        messages = [*head, {"role": "user", "content": text}]
        if gauge.tokens(messages) < budget_tokens:
            return messages
        if kept:
            kept.pop(0)
        elif not shrunk:
            parts[2] = _file_section(file_code, file_language, manifest, head_lines=0)
            shrunk = True
        else:
            return None


def _file_section(code: str, language: str, manifest: Any, head_lines: int | None = None) -> str:
    lines = code.split("\n")
    man = f" and a launch manifest: `{json.dumps(manifest)[:2000]}`" if manifest else " and the default launch"
    if head_lines is None and len(code) <= 24_000:
        return f"The workspace file ({len(lines)} lines, {language}){man}:\n```{language}\n{code}\n```"
    n = FILE_HEAD_LINES if head_lines is None else head_lines
    if n == 0 or len(lines) <= 2 * n:
        return (f"The workspace file holds {len(lines)} lines of {language} ({len(code):,} characters){man}; "
                "read_file shows it.")
    shown = "\n".join(lines[:n]) + f"\n… ({len(lines) - 2 * n} lines: read_file shows them) …\n" + "\n".join(lines[-n:])
    return f"The workspace file ({len(lines)} lines, {language}){man}, its first and last {n} lines:\n```{language}\n{shown}\n```"
