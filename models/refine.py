"""Multi-turn refinement: a turn's judgement becomes the next user message.

The feedback is built from what the store holds (the evaluation and its
train-size measurements), never from in-memory state, so a resumed run asks
exactly what the first attempt would have asked. Held-out sizes are never
mentioned: their results stay out of every message.
"""

from __future__ import annotations

from typing import Any

from ptxbench.db.records import Evaluation, Measurement, Sample
from ptxbench.engine.categories import DESCRIPTIONS, OK, STAGE_OF, Category
from ptxbench.engine.text_scan import remove_think
from ptxbench.models.agent_tools import scrub, wrong_elements
from ptxbench.tasks.spec import TaskSpec

MAX_LOG_LINES = 25
MAX_WARNINGS = 6
LOST_REPLY = "(my previous reply did not arrive intact)"

CLOSING = ("Fix the problem and reply with the complete corrected kernel in one fenced code block (```ptx or "
           "```cuda), plus the launch manifest in a ```json block if you do not use the default launch.")


def is_final(evaluation: Evaluation) -> bool:
    """A trajectory stops at a turn with nothing left to fix."""
    return evaluation.category == OK


def _fmt_sizes(sizes: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sizes.items()) + "}"


def _fmt_num(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _assembler_lines(log: str | None) -> list[str]:
    if not log:
        return []
    lines = [ln.rstrip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() or "fatal" in ln.lower()]
    chosen = errors or lines
    out = chosen[:MAX_LOG_LINES]
    if len(chosen) > MAX_LOG_LINES:
        out.append(f"… {len(chosen) - MAX_LOG_LINES} more line(s)")
    return out


def _source_context(code: str | None, line: Any, before: int = 2) -> str | None:
    """The reported line and the ones before it (ptxas often reports the line after the mistake)."""
    if not code or not isinstance(line, int) or line < 1:
        return None
    lines = code.splitlines()
    if line > len(lines):
        return None
    first = max(1, line - before)
    return "\n".join(f"{n:>5} | {lines[n - 1].rstrip()}" for n in range(first, line + 1))


def feedback_message(task: TaskSpec, evaluation: Evaluation, measurements: list[Measurement],
                     sample: Sample | None = None) -> str:
    """What the model is told about its last answer."""
    cat = evaluation.category
    stage = STAGE_OF.get(cat, "inspect" if cat == OK else None)
    ev = evaluation.evidence or {}
    out: list[str] = []
    if cat == OK and evaluation.status != "judged":
        out.append(f"Your kernel assembles for {task.arch} and uses every requested instruction family; it was "
                   "not run here.")
    else:
        what = "reply" if stage == "extract" else "kernel"
        out.append(f"Your {what} was judged: {cat} ({DESCRIPTIONS.get(cat, 'passed')}).")

    response_meta = ev.get("response") or {}
    if response_meta.get("finish_reason") == "length":
        out.append("Your reply was cut off at the token limit before it ended; answer more compactly.")

    if stage == "extract":
        reason = (ev.get("extract") or {}).get("reason") or ev.get("message") or ""
        if reason:
            out.append(f"No kernel could be taken from your reply: {reason}.")
        out.append("Answer with exactly one fenced code block (```ptx or ```cuda) holding the whole kernel, and at "
                   "most one ```json block with the launch manifest.")
    elif stage == "assemble":
        where = f" at line {ev['line']}" if ev.get("line") else ""
        tool = "nvcc" if cat == Category.CUDA_COMPILE_ERROR else "ptxas"
        out.append(f"{tool} rejected it for {task.arch}{where}: {ev.get('message', '')}".rstrip())
        context = _source_context(evaluation.ptx or (sample.code if sample else None), ev.get("line"))
        if context:
            out.append(f"Around line {ev['line']} of the {'PTX nvcc produced' if evaluation.ptx else 'PTX'}:\n"
                       f"```\n{context}\n```")
        elif ev.get("source_line"):
            out.append(f"That line reads: `{ev['source_line']}`")
        log = _assembler_lines(evaluation.assembler_log)
        if log:
            out.append("Assembler output:\n```\n" + "\n".join(log) + "\n```")
    elif stage == "requirement":
        out.append(_families_text(evaluation))

    train = [m for m in measurements if m.split == "train"]
    size_lines = _size_lines(train, ev)
    if size_lines and stage not in ("extract", "assemble"):
        out.append("Results at the checked sizes:\n" + "\n".join(size_lines))
    if cat == Category.SLOWER_THAN_BASELINE or (evaluation.speedup is not None and stage not in ("extract", "assemble")):
        out.append(_speed_text(task, evaluation))

    warnings = [_warning_text(w) for w in evaluation.warnings or []]
    warnings = [w for w in warnings if w]
    if warnings:
        shown = warnings[:MAX_WARNINGS]
        out.append("Assembler warnings:\n" + "\n".join(f"- {w}" for w in shown))

    if stage != "extract":
        found = ", ".join(evaluation.ptx_families) or "none"
        out.append(f"Instruction families found in your PTX: {found}.")
    if cat != OK:
        out.append(CLOSING)
    return "\n\n".join(p for p in out if p)


def _warning_text(w: Any) -> str:
    if not isinstance(w, dict):
        return str(w)
    text = w.get("text") or w.get("message") or ""
    where = f"line {w['line']}: " if w.get("line") else ""
    code = f"({w['code']}) " if w.get("code") and f"({w['code']})" not in text else ""
    return f"{where}{code}{text}" if text else ""


def _families_text(evaluation: Evaluation) -> str:
    detail = (evaluation.evidence or {}).get("required_missing") or [
        {"family": f, "missing": "ptx"} for f in evaluation.required_missing]
    lines = []
    for m in detail:
        if m.get("missing") == "sass":
            lines.append(f"- {m['family']}: in the PTX but not in the machine code (on a path that is never "
                         "compiled in, or optimised away)")
        else:
            lines.append(f"- {m['family']}: not in the PTX")
    return "Requested instruction families that are missing:\n" + "\n".join(lines)


def _sizes_key(sizes: Any) -> tuple:
    return tuple(sorted(sizes.items())) if isinstance(sizes, dict) else ()


def _worst_text(worst: Any) -> str:
    if not isinstance(worst, dict) or not worst:
        return ""
    if "got" in worst and "expected" in worst:
        where = f"{worst.get('output', '')}{worst.get('index', '')}"
        return f"; worst element {where}: got {_fmt_num(worst['got'])}, expected {_fmt_num(worst['expected'])}"
    return "; worst element: " + ", ".join(f"{k} {_fmt_num(v)}" for k, v in worst.items())


def _size_lines(train: list[Measurement], evidence: dict[str, Any]) -> list[str]:
    # The worker's message per train size; sizes are matched whatever the order of their keys.
    seeds = tuple(s for s in evidence.get("seeds") or () if isinstance(s, int))  # secret: never in a message
    entries = {_sizes_key(m.get("sizes")): m
               for m in evidence.get("sizes", []) if isinstance(m, dict) and m.get("split") == "train"}
    messages = {key: m.get("message", "") for key, m in entries.items()}
    lines = []
    for m in train:
        line = f"- {_fmt_sizes(m.sizes)}: {m.category}"
        if m.max_rel_err is not None:
            line += f", error {_fmt_num(m.max_rel_err)}"
            if isinstance(m.worst, dict) and m.worst.get("tolerance") is not None:
                line += f" (tolerance {_fmt_num(m.worst['tolerance'])})"
        worst = _worst_text(m.worst)
        line += worst
        if m.category != OK:
            line += _pattern_text(wrong_elements(entries.get(_sizes_key(m.sizes))))
        msg = messages.get(_sizes_key(m.sizes))
        if msg and m.category != OK and not worst:
            line += f"\n  {scrub(msg, seeds)[:600]}"
        lines.append(line)
    return lines


_PATTERN_WORDS = (("wrong", "wrong"), ("unwritten", "never written"), ("nan_or_inf", "NaN or Inf"),
                  ("inputs_modified", "changed in an input"))


def _pattern_text(found: dict[str, Any]) -> str:
    """How many elements went wrong and where the first is, per output, and in how many trials."""
    parts = []
    for key, words in _PATTERN_WORDS:
        for row in found.get(key) or ():
            of = f" of {row['of']:,}" if isinstance(row.get("of"), int) else ""
            first = f", the first at {row['first_index']}" if row.get("first_index") is not None else ""
            values = (f" (got {_fmt_num(row['got'])}, expected {_fmt_num(row['expected'])})"
                      if "got" in row and "expected" in row else "")
            parts.append(f"{row['count']:,}{of} elements of {row['tensor']} {words}{first}{values}")
    if found.get("trials_failed"):
        parts.append(f"failed in {found['trials_failed']} trials")
    return ("\n  " + "; ".join(parts)) if parts else ""


def _speed_text(task: TaskSpec, evaluation: Evaluation) -> str:
    parts = [f"Timed at {_fmt_sizes(task.headline)}:"]
    if evaluation.time_ms is not None:
        parts.append(f"your kernel {evaluation.time_ms:.4g} ms")
    if evaluation.baseline_ms is not None:
        parts.append(f"the library ({task.baseline}) {evaluation.baseline_ms:.4g} ms")
    if evaluation.speedup is not None:
        parts.append(f"speedup {evaluation.speedup:.3f}×")
    if evaluation.tflops is not None:
        parts.append(f"{evaluation.tflops:.1f} TFLOP/s")
    text = " ".join(parts[:1]) + " " + ", ".join(parts[1:]) + "."
    if evaluation.speedup is not None and evaluation.speedup < 1.0:
        text += " It must be faster than the library."
    return text


def assistant_text(response: str | None, malformed: bool = False) -> str:
    """A stored response as it goes back into the conversation (reasoning set aside)."""
    if malformed or not response:
        return LOST_REPLY
    # Linear whatever the reply (it runs on the run's event loop): engine.text_scan, not a lazy regex.
    text = remove_think(response, space_after=True).text.strip()
    return text or LOST_REPLY


def conversation(base: list[dict[str, str]], turns: list[tuple[str, str]]) -> list[dict[str, str]]:
    """The prompt followed by each earlier turn's (assistant reply, feedback)."""
    messages = list(base)
    for reply, feedback in turns:
        messages.append({"role": "assistant", "content": reply})
        messages.append({"role": "user", "content": feedback})
    return messages
