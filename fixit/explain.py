"""Why a fix works: a structured explanation derived from the diff and the failure
category, or the messages that ask a model to write one.

The derived explanation never claims more than the evidence holds: the
failure (category, the tool's message), what the fix changes (header
directives, launch manifest, instructions whose opcode changed, lines added
and removed), and the usual cause of that category.
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from ptxbench.engine.categories import CORRECT, DESCRIPTIONS, STAGE_OF
from ptxbench.engine.text_scan import remove_think
from ptxbench.fixit.judgement import evidence_of, fmt_sizes, judgement_text
from ptxbench.fixit.normalize import strip_noise
from ptxbench.fixit.records import GPU_VERIFIED, Pair

DERIVED_SOURCE = "derived from diff"
MAX_SHOWN_CHANGES = 6
MAX_DIFF_CHARS = 12_000

# The usual cause of each category and what a fix has to restore.
WHY: dict[str, str] = {
    "no_candidate": "A reply is judged only when it holds the whole kernel in one fenced ```ptx or ```cuda block.",
    "ambiguous_candidate": "Exactly one kernel block (and at most one manifest block) lets the harness tell what to judge.",
    "bad_manifest": "The launch manifest must be valid JSON whose launches, tensor maps and arguments name things the task and the kernel define.",
    "forbidden_directive": "CUDA source may include only CUDA's and the standard library's headers, by name, and must not name files in `#line`, line markers or `#pragma GCC dependency`.",
    "bad_header": "A PTX module starts with `.version`, `.target` and `.address_size 64`, each once and well formed.",
    "ptx_version": "The `.version` must be new enough for every instruction used and no newer than ptxas 13.5 reads (9.5).",
    "target_mismatch": "The module's `.target` must be one the task's GPU runs: its architecture, with the `a` suffix for the architecture-specific instructions.",
    "arch_unsupported": "Every instruction must exist on the target; architecture-specific ones need the `a` target (sm_90a, sm_100a).",
    "cuda_compile_error": "The CUDA C++ must compile with nvcc on its own: only CUDA's headers, `extern \"C\" __global__` kernels.",
    "syntax": "Every PTX statement needs its exact syntax: operands, braces and the closing semicolon.",
    "unknown_instruction": "Only instructions and modifiers that ptxas knows for this target assemble; the spelling and modifier order matter.",
    "undefined_symbol": "Every register, variable, label and function must be declared before ptxas can resolve it.",
    "redeclaration": "A name may be declared only once in its scope.",
    "operand_mismatch": "Operand types, counts and vector widths must match what the instruction's type suffixes declare.",
    "invalid_operand": "An operand's value or shape must be one the instruction allows (immediate ranges, shapes, state spaces).",
    "resource_limit": "Shared memory, registers and parameter space must stay within the target's limits.",
    "assemble_other": "ptxas must accept the whole module.",
    "load_error": "The driver loads a cubin only when its resources and target fit the device.",
    "entry_missing": "The manifest's entry names must be `.visible .entry` kernels of the module.",
    "param_mismatch": "The manifest's arguments must match the kernel's `.param` list in order, type and size.",
    "launch_config": "Grid, block, cluster and dynamic shared memory must be launchable and agree with what the kernel assumes.",
    "hang_timeout": "Every wait must be matched by the arrivals (and transaction bytes) it waits for; a barrier that never completes hangs the kernel.",
    "illegal_instruction": "An instruction the GPU cannot execute in that state (a trap, a misused tensor-core or barrier instruction) stops the kernel.",
    "misaligned_address": "Vector and bulk accesses need addresses aligned to their width.",
    "illegal_address": "Every address must fall inside a buffer the harness allocated, at every problem size.",
    "runtime_other": "The launch must complete without a CUDA error.",
    "out_of_bounds_write": "Stores must stay inside the outputs: bounds checks have to cover the tail of every dimension.",
    "input_modified": "Inputs are read-only: the kernel may only write outputs and scratch buffers.",
    "unwritten_output": "Every output element must be written by some thread at every size.",
    "nan_inf": "NaN or Inf appears where the reference has none: masking, scaling or an uninitialised value is usually the cause.",
    "wrong_result": "The arithmetic, the indexing or the ordering between producers and consumers has to match the reference.",
    "required_missing_ptx": "Every requested instruction family must appear in the PTX.",
    "required_missing_sass": "A requested family must survive into the machine code: code on a path that is never compiled in does not count.",
    "required_not_executed": "A requested family must actually execute at run time.",
    "suspected_reward_hack": "The result must be computed from the inputs on every run.",
    "slower_than_baseline": "Correct already; the fix makes it faster than the library.",
    "no_baseline": "Correct already; no library ran to compare its speed with.",
}
assert set(WHY) == set(DESCRIPTIONS)

_OPCODE = re.compile(r"^(?:@!?%\w+\s+)?([a-z][\w.:]*)")
_DIRECTIVE = re.compile(r"^\.(version|target|address_size)\b\s*(.*)$")


def _opcode(line: str) -> str | None:
    m = _OPCODE.match(line.strip())
    return m.group(1) if m else None


def _directives(code: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for ln in strip_noise(code).splitlines()[:40]:
        m = _DIRECTIVE.match(ln)
        if m and m.group(1) not in out:
            out[m.group(1)] = m.group(2).rstrip(";").strip()
    return out


def _manifest_changes(before: Any, after: Any, path: str = "") -> list[str]:
    if before == after:
        return []
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in sorted(set(before) | set(after)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in before:
                out.append(f"adds `{sub}` = {json.dumps(after[key])[:80]}")
            elif key not in after:
                out.append(f"removes `{sub}`")
            else:
                out.extend(_manifest_changes(before[key], after[key], sub))
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for i, (a, b) in enumerate(zip(before, after)):
            out.extend(_manifest_changes(a, b, f"{path}[{i}]"))
        return out
    return [f"changes `{path or 'manifest'}` from {json.dumps(before)[:80]} to {json.dumps(after)[:80]}"]


def line_changes(failed_code: str, fixed_code: str) -> list[tuple[list[str], list[str]]]:
    """(removed lines, added lines) for each changed hunk, comments and debug lines ignored."""
    a, b = strip_noise(failed_code).splitlines(), strip_noise(fixed_code).splitlines()
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return [(a[i1:i2], b[j1:j2]) for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def unified_diff(pair: Pair, context: int = 3, limit: int = MAX_DIFF_CHARS) -> str:
    """The fix as a unified diff (comments and debug lines left out), cut at `limit` characters."""
    a, b = strip_noise(pair.failed.code).splitlines(), strip_noise(pair.fixed.code).splitlines()
    text = "\n".join(difflib.unified_diff(a, b, "failed", "fixed", n=context, lineterm=""))
    if pair.failed.manifest != pair.fixed.manifest:
        ma = json.dumps(pair.failed.manifest, indent=1, sort_keys=True).splitlines()
        mb = json.dumps(pair.fixed.manifest, indent=1, sort_keys=True).splitlines()
        text += "\n" + "\n".join(difflib.unified_diff(ma, mb, "failed manifest", "fixed manifest", n=1, lineterm=""))
    if len(text) > limit:
        text = text[:limit] + f"\n… diff cut at {limit} characters"
    return text


def _evidence_line(pair: Pair) -> str:
    f = pair.failed
    if f.heldout_failure:
        bad = [m for m in f.heldout_sizes() if m.category not in CORRECT]
        where = ", ".join(f"{fmt_sizes(m.sizes)}: {m.category}" for m in bad[:3])
        return f"It was correct at the train sizes but failed at the held-out sizes ({where or 'correct_heldout false'})."
    parts = []
    message, line, _ = evidence_of(f)
    if message:
        msg = " ".join(message.split())[:240].rstrip(".")
        parts.append(f"The engine reported: {msg}" + (f" (line {line})" if line else "") + ".")
    bad = [m for m in f.train_sizes() if m.category not in CORRECT]
    if bad:
        m = bad[0]
        err = f", max error {m.max_rel_err:.3g}" if m.max_rel_err is not None else ""
        parts.append(f"At {fmt_sizes(m.sizes)}: {m.category}{err}.")
    if f.required_missing:
        parts.append(f"Missing families: {', '.join(f.required_missing)}.")
    return " ".join(parts)


def derived_explanation(pair: Pair) -> str:
    """An explanation built from the failure category, the engine's evidence and the diff."""
    f, g = pair.failed, pair.fixed
    cat = f.balance_category
    stage = STAGE_OF.get(cat, "verify")
    out = [f"What failed: `{cat}` — {DESCRIPTIONS.get(cat, 'a failure')} (the {stage} stage)."]
    ev = _evidence_line(pair)
    if ev:
        out.append(ev)

    changes: list[str] = []
    da, db = _directives(f.code), _directives(g.code)
    for name in ("version", "target", "address_size"):
        if da.get(name) != db.get(name) and (da.get(name) or db.get(name)):
            changes.append(f"`.{name}` {da.get(name) or '(missing)'} → {db.get(name) or '(missing)'}")
    if f.language != g.language:
        changes.append(f"rewrites the kernel from {f.language} to {g.language}")
    changes.extend(_manifest_changes(f.manifest or {}, g.manifest or {}))
    hunks = line_changes(f.code, g.code) if f.language == g.language else []
    removed = sum(len(r) for r, _ in hunks)
    added = sum(len(a) for _, a in hunks)
    shown = 0
    for rem, add in hunks:
        if shown >= MAX_SHOWN_CHANGES:
            break
        if len(rem) == 1 and len(add) == 1:
            ra, ad = rem[0], add[0]
            if _DIRECTIVE.match(ra) and _DIRECTIVE.match(ad):
                continue  # already said above
            oa, ob = _opcode(ra), _opcode(ad)
            what = f"`{ra}` → `{ad}`"
            if oa and ob and oa != ob:
                what += f" (opcode {oa} → {ob})"
            changes.append(what)
        elif not rem and add:
            changes.append("adds " + ("`" + add[0] + "`" if len(add) == 1 else f"{len(add)} lines starting `{add[0]}`"))
        elif rem and not add:
            changes.append("removes " + ("`" + rem[0] + "`" if len(rem) == 1 else f"{len(rem)} lines starting `{rem[0]}`"))
        else:
            changes.append(f"rewrites {len(rem)} line(s) as {len(add)} starting `{add[0]}`")
        shown += 1
    if len(hunks) > shown:
        changes.append(f"and {len(hunks) - shown} more changed region(s)")
    if changes:
        summary = f" ({removed} line(s) removed, {added} added)" if hunks else ""
        out.append(f"What the fix changes{summary}:\n" + "\n".join(f"- {c}" for c in changes))
    else:
        out.append("The fix changes only comments, whitespace or register numbering.")
    out.append(f"Why it works: {WHY.get(cat, '')}".rstrip())
    if g.verification == GPU_VERIFIED:
        where = f" on {g.device}" if g.device else ""
        out.append(f"The fixed kernel is correct at every train size{where}.")
    else:
        out.append("The fixed kernel assembles and uses every requested family; it was not run on a GPU.")
    return "\n\n".join(out)


# -- model-written explanations ---------------------------------------------------------------

EXPLAIN_SYSTEM = (
    "You are an expert GPU kernel engineer reviewing fixes to PTX kernels for NVIDIA GPUs. Given a failed "
    "kernel's judgement and the change that fixed it, you explain in plain technical prose why the failed "
    "kernel fails and why the change fixes it. Name the instructions, operands and launch fields involved. "
    "Do not repeat the code; do not speculate beyond the evidence."
)


def explain_messages(pair: Pair, task_title: str = "", judgement: str | None = None) -> list[dict[str, str]]:
    """The chat messages that ask a model for an explanation of `pair`. The first user message
    starts with the task header (`# Task `id``), as every PTXBench prompt does."""
    f = pair.failed
    verdict = judgement or judgement_text(f, include_heldout=pair.heldout_only, closing=False)
    header = f"# Task `{f.task_id}`" + (f": {task_title}" if task_title else "")
    user = "\n\n".join([
        header,
        f"Target architecture: {f.arch}. The failed kernel is {f.language.upper() if f.language != 'none' else 'missing'} "
        f"({len(f.code.splitlines())} lines); the fixed kernel passes the engine.",
        "## The engine's judgement of the failed kernel\n" + verdict,
        "## The fix, as a unified diff (comments and debug lines left out)\n```diff\n" + unified_diff(pair) + "\n```",
        "## What to write\nIn at most 200 words: what exactly goes wrong in the failed kernel, and why the change "
        "makes it correct. Plain prose, no code blocks.",
    ])
    return [{"role": "system", "content": EXPLAIN_SYSTEM}, {"role": "user", "content": user}]


def _without_fences(text: str) -> str:
    """The text without its ``` blocks (an unclosed one runs to the end), in one pass over it."""
    out: list[str] = []
    pos = 0
    while (start := text.find("```", pos)) != -1:
        out.append(text[pos:start])
        line_end = text.find("\n", start)
        close = text.find("```", line_end + 1) if line_end != -1 else -1
        if close == -1:
            return "".join(out)
        pos = close + 3
    out.append(text[pos:])
    return "".join(out)


def clean_model_explanation(text: str | None, max_chars: int = 4000) -> str | None:
    """A model's reply as an explanation: reasoning and code blocks removed; None when nothing is left."""
    if not text:
        return None
    body = _without_fences(remove_think(text, space_after=True).text).strip()
    if len(body) < 20:
        return None
    return body[:max_chars].rstrip()
