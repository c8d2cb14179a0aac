"""The judgement shown beside a failed candidate in a Fixit example.

It says what a model run would have been told: the category, the tool's
evidence and the train sizes' results. Held-out sizes are mentioned only when
asked for (examples of the held-out split), so a training example never
carries what happens at a held-out size.
"""

from __future__ import annotations

from ptxbench.engine.categories import DESCRIPTIONS, OK, STAGE_OF, Category
from ptxbench.fixit.records import FixitSample, SizeResult

MAX_LOG_LINES = 12
CLOSING = ("Explain what is wrong, then reply with the complete corrected kernel in one fenced code block "
           "(```ptx or ```cuda), plus the launch manifest in a ```json block if you do not use the default launch.")


def fmt_sizes(sizes: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sizes.items()) + "}"


def _size_line(m: SizeResult) -> str:
    line = f"- {fmt_sizes(m.sizes)}: {m.category}"
    if m.max_rel_err is not None:
        line += f", max error {m.max_rel_err:.4g}"
    return line


def _log_lines(log: str | None) -> list[str]:
    if not log:
        return []
    lines = [ln.rstrip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() or "fatal" in ln.lower()] or lines
    return errors[:MAX_LOG_LINES]


def evidence_of(sample: FixitSample) -> tuple[str, int | None, str]:
    """(message, line, source line) of the engine's evidence, in either of the shapes the store
    holds: flat (`message`, `line`, `source_line`) or under `static` (`evidence`, `line`, `source`)."""
    ev = sample.evidence or {}
    static = ev.get("static") if isinstance(ev.get("static"), dict) else {}
    message = ev.get("message") or static.get("evidence") or ""
    line = ev.get("line") if isinstance(ev.get("line"), int) else static.get("line")
    source = ev.get("source_line") or static.get("source") or ""
    return str(message), line if isinstance(line, int) else None, str(source)


def judgement_text(sample: FixitSample, *, include_heldout: bool = False, closing: bool = True) -> str:
    """The engine's verdict on `sample` in words, ending with the request to fix it."""
    if sample.feedback and not include_heldout:
        return sample.feedback
    cat = sample.category or "unjudged"
    stage = STAGE_OF.get(cat)
    ev = sample.evidence or {}
    out: list[str] = []
    if sample.heldout_failure:
        out.append("Your kernel was judged correct at every checked size.")
    else:
        out.append(f"Your kernel was judged: {cat} ({DESCRIPTIONS.get(cat, 'passed')}).")
    if stage == "extract":
        reason = (ev.get("extract") or {}).get("reason") or ev.get("message") or ""
        if reason:
            out.append(f"No kernel could be taken from the reply: {reason}.")
    elif stage == "assemble":
        message, line, source = evidence_of(sample)
        where = f" at line {line}" if line else ""
        tool = "nvcc" if cat == Category.CUDA_COMPILE_ERROR else "ptxas"
        out.append(f"{tool} rejected it for {sample.arch}{where}: {message}".rstrip().rstrip(":") + ".")
        if source:
            out.append(f"That line reads: `{source.strip()}`")
        log = _log_lines(sample.assembler_log)
        if log:
            out.append("Assembler output:\n```\n" + "\n".join(log) + "\n```")
    elif stage == "requirement":
        missing = ", ".join(sample.required_missing) or "(not recorded)"
        out.append(f"Requested instruction families missing: {missing}.")
    elif evidence_of(sample)[0]:
        out.append(evidence_of(sample)[0])
    train = sample.train_sizes()
    if train and stage not in ("extract", "assemble"):
        out.append("Results at the checked sizes:\n" + "\n".join(_size_line(m) for m in train))
    if include_heldout:
        held = sample.heldout_sizes()
        if held:
            out.append("Results at the held-out sizes:\n" + "\n".join(_size_line(m) for m in held))
        elif sample.correct_heldout is False:
            out.append("It fails at the held-out sizes.")
    if stage not in ("extract", None) and sample.ptx_families:
        out.append(f"Instruction families found in your PTX: {', '.join(sample.ptx_families)}.")
    if closing and (cat != OK or sample.heldout_failure):
        out.append(CLOSING)
    return "\n\n".join(out)
