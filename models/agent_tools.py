"""The judge as tools an agent calls: `assemble`, `check`, `time` and `submit`.

One implementation for both front doors: `ptxbench run --agent` offers these to a model through
the endpoint's function calling (models/agent.py), and `ptxbench mcp` offers them to an external
agent over the Model Context Protocol (services/mcp_server.py).

What a tool may say is the candidate's business and nothing else:

- `assemble`: the static stages — ptxas's messages, each entry's resources, the requested
  families in the PTX and the SASS of the launched entries (and what they call), and launch
  problems at the train sizes.
- `check`: run and verify at the task's **train** sizes only: the category, and per size its
  category, error and worst element. Held-out sizes are never run here, and neither the trial
  seeds nor the harness's internals (its timing schedule, fingerprints, worker commands) are
  ever in an answer: seed numbers are scrubbed from the worker's messages.
- `time`: the headline size, timed against the library in the same worker: time, speedup,
  TFLOP/s and the fraction of the speed of light.
- `submit`: the final kernel; the caller judges it in full (held-out sizes included) as the
  episode's sample.

Without a GPU of the task's arch, `check` and `time` answer `skipped: no sm_90a device` and run
nothing: an answer never claims a run that did not happen.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ptxbench.engine.candidate import Candidate
from ptxbench.engine.categories import DESCRIPTIONS, OK, SKIPPED_PREFIX, worst
from ptxbench.engine.manifest import ManifestError, parse_manifest
from ptxbench.tasks.spec import TaskSpec

TOOL_NAMES = ("assemble", "check", "time", "submit")
LANGUAGES = ("ptx", "cuda")
MAX_LOG_LINES = 40
MAX_MESSAGE = 1200
DEFAULT_GPU_BUDGET_S = 600.0
# One GPU worker per process (engine.pipeline.default_runner): judgements on it take turns.
GPU_LOCK = threading.Lock()
_SEED = re.compile(r"\bseeds?\s*[=:]?\s*\[?[0-9][0-9, ]*\]?", re.I)
_WORST_KEYS = ("output", "index", "got", "expected", "abs_err", "rel_err", "tolerance", "bound", "ratio")

_CANDIDATE_PROPERTIES: dict[str, Any] = {
    "code": {"type": "string", "description": "The whole kernel: a PTX module, or CUDA C++ device code with "
                                              "inline PTX (language cuda)."},
    "language": {"type": "string", "enum": list(LANGUAGES), "description": "ptx (default) or cuda."},
    "manifest": {"type": "object", "description": "Optional launch manifest (launches, scratch, tensor maps) when "
                                                  "the task's default launch does not fit the kernel."},
}
DESCRIPTIONS_OF_TOOLS = {
    "assemble": "Assemble the kernel for the task's architecture with ptxas (nvcc first for CUDA) and inspect it: "
                "assembler errors and warnings, registers and shared memory per entry, and which requested "
                "instruction families are in the PTX and in the machine code of the launched kernels. Runs nothing.",
    "check": "Assemble, then run the kernel on the GPU at the task's train sizes and verify every output against "
             "the reference: the verdict, and per size the error and the worst element. Does not time it.",
    "time": "Assemble, run and time the kernel at the headline size against the library in the same process: "
            "its time, the library's, the speedup, TFLOP/s and the fraction of the device's speed of light.",
    "submit": "Submit the final kernel. It is judged in full (correctness at more sizes than check runs, the "
              "requested families, speed) and the episode ends: call it once, last.",
}


def tool_schemas() -> list[dict[str, Any]]:
    """The four tools as chat-completions function definitions."""
    return [{"type": "function", "function": {
        "name": name, "description": DESCRIPTIONS_OF_TOOLS[name],
        "parameters": {"type": "object", "properties": dict(_CANDIDATE_PROPERTIES), "required": ["code"]},
    }} for name in TOOL_NAMES]


@dataclass(frozen=True)
class GpuAccess:
    """What the GPU stages may do here: the archs of the GPUs present, and whether they were asked for."""

    archs: tuple[str, ...] = ()
    enabled: bool = True

    def skipped(self, arch: str) -> str | None:
        """None when a GPU of `arch` will run; else the `skipped: …` status that says why not."""
        if arch not in self.archs:
            return f"{SKIPPED_PREFIX}no {arch} device"
        if not self.enabled:
            return f"{SKIPPED_PREFIX}the GPU stages are off here (--gpu off)"
        return None


@dataclass
class Submission:
    language: str
    code: str
    manifest: dict[str, Any] | None
    raw: str                          # the arguments as the agent sent them


@dataclass
class ToolOutcome:
    """One call's answer: what the agent sees (`result`), how it went, and what it cost."""

    tool: str
    status: str                       # ok | "error: …" | "skipped: …"
    result: dict[str, Any]
    seconds: float = 0.0
    gpu_s: float = 0.0
    submission: Submission | None = None

    def text(self) -> str:
        return json.dumps(self.result, ensure_ascii=False, default=str)


class ArgumentError(ValueError):
    """The call's arguments cannot be read: said to the agent, never judged."""


def parse_arguments(arguments: str | dict[str, Any] | None) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or not str(arguments).strip():
        raise ArgumentError("no arguments: give at least {\"code\": …}")
    try:
        value = json.loads(arguments)
    except ValueError as exc:
        raise ArgumentError(f"the arguments are not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ArgumentError("the arguments must be a JSON object such as {\"code\": …}")
    return value


def read_submission(arguments: str | dict[str, Any] | None) -> Submission:
    """code, language and manifest from a call's arguments; ArgumentError says what is wrong."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    args = parse_arguments(arguments)
    code = args.get("code")
    if not isinstance(code, str) or not code.strip():
        raise ArgumentError("`code` must be the kernel's source text")
    language = args.get("language") or "ptx"
    if language not in LANGUAGES:
        raise ArgumentError(f"`language` must be ptx or cuda, not {language!r}")
    manifest = args.get("manifest")
    if isinstance(manifest, str):
        if not manifest.strip():
            manifest = None
        else:
            try:
                manifest = json.loads(manifest)
            except ValueError as exc:
                raise ArgumentError(f"`manifest` is a string that is not JSON ({exc})") from None
    if manifest is not None and not isinstance(manifest, dict):
        raise ArgumentError("`manifest` must be a JSON object (docs/candidate.md)")
    return Submission(language, code, manifest or None, raw or "")


def scrub(text: str, seeds: tuple[int, ...] = ()) -> str:
    """A worker message without the trial seeds (they are secret for the process's life)."""
    text = _SEED.sub("a trial input", text)
    for s in seeds:
        text = text.replace(str(s), "…")
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "…"


def _worst(w: Any) -> dict[str, Any] | None:
    if not isinstance(w, dict):
        return None
    return {k: w[k] for k in _WORST_KEYS if k in w} or None


def _log_lines(log: str) -> list[str]:
    lines = [ln.rstrip() for ln in (log or "").splitlines() if ln.strip()]
    return lines[:MAX_LOG_LINES] + ([f"… {len(lines) - MAX_LOG_LINES} more line(s)"] if len(lines) > MAX_LOG_LINES else [])


@dataclass
class JudgeTools:
    """The tools for one task. `gpu_budget_s` bounds the GPU time of `check` and `time` together
    (an episode's, or an MCP session's); `gpu_spent_s` is what they used so far."""

    spec: TaskSpec
    gpu: GpuAccess = field(default_factory=GpuAccess)
    gpu_budget_s: float = DEFAULT_GPU_BUDGET_S
    gpu_spent_s: float = 0.0

    # -- the one entry point -----------------------------------------------------------------------

    def call(self, name: str, arguments: str | dict[str, Any] | None) -> ToolOutcome:
        """Answer one call. Never raises for what an agent sends: an unknown tool or unreadable
        arguments are an `error: …` answer the agent can act on."""
        started = time.perf_counter()
        if name not in TOOL_NAMES:
            out = ToolOutcome(name, "error: unknown tool", {
                "error": f"there is no tool {name!r}; the tools are {', '.join(TOOL_NAMES)}"})
        else:
            try:
                submission = read_submission(arguments)
            except ArgumentError as exc:
                out = ToolOutcome(name, "error: bad arguments", {"error": str(exc)})
            else:
                try:
                    out = getattr(self, f"_{name}")(submission)
                except (RuntimeError, OSError) as exc:  # EngineError, ToolchainError: the tool failed, not the kernel
                    out = ToolOutcome(name, f"error: the tool failed: {type(exc).__name__}",
                                      {"error": f"the judge could not answer this call ({type(exc).__name__}: "
                                                f"{scrub(str(exc))}); the kernel was not judged"})
        out.seconds = time.perf_counter() - started
        return out

    # -- the tools -----------------------------------------------------------------------------------

    def _candidate(self, sub: Submission) -> tuple[Candidate | None, dict[str, Any] | None]:
        manifest = None
        if sub.manifest is not None:
            try:
                manifest = parse_manifest(json.dumps(sub.manifest))
            except ManifestError as exc:
                return None, {"category": "bad_manifest", "meaning": DESCRIPTIONS["bad_manifest"],
                              "message": str(exc)}
        return Candidate(sub.language, sub.code, manifest, "agent tool call"), None  # type: ignore[arg-type]

    def _static(self, sub: Submission) -> tuple[Any, dict[str, Any]]:
        from ptxbench.engine.static import judge_static

        candidate, refused = self._candidate(sub)
        if candidate is None:
            return None, refused or {}
        verdict = judge_static(candidate, self.spec)
        return verdict, static_summary(verdict)

    def _assemble(self, sub: Submission) -> ToolOutcome:
        _verdict, summary = self._static(sub)
        return ToolOutcome("assemble", "ok", summary)

    def _gpu_ready(self, tool: str, verdict: Any, summary: dict[str, Any]) -> ToolOutcome | None:
        """The answer when the GPU stages cannot run this candidate here; None when they can."""
        if verdict is None or verdict.cubin is None:
            return ToolOutcome(tool, "ok", {**summary, "gpu": "not run: the kernel did not assemble"})
        skipped = self.gpu.skipped(self.spec.arch)
        if skipped:
            return ToolOutcome(tool, skipped, {"status": skipped, "static": _brief(summary),
                                               "note": "nothing was run: the GPU stages need a device of the task's "
                                                       "arch; the static verdict is above"})
        left = self.gpu_budget_s - self.gpu_spent_s
        if left <= 0:
            status = f"{SKIPPED_PREFIX}the GPU-time budget of {self.gpu_budget_s:g} s is used up"
            return ToolOutcome(tool, status, {"status": status, "static": _brief(summary)})
        return None

    def _judge(self, verdict: Any, sizes: list[tuple[str, dict[str, int]]], timing: Any) -> tuple[Any, float]:
        from ptxbench.engine.pipeline import DEFAULT_BUDGET_S, judge

        budget = min(DEFAULT_BUDGET_S, self.gpu_budget_s - self.gpu_spent_s)
        with GPU_LOCK:
            started = time.perf_counter()
            j = judge(verdict.candidate, self.spec, static=verdict, sizes=sizes, timing=timing, budget_s=budget)
            spent = time.perf_counter() - started
        self.gpu_spent_s += spent
        return j, spent

    def _check(self, sub: Submission) -> ToolOutcome:
        from ptxbench.engine.gpu.protocol import TimingConfig

        verdict, summary = self._static(sub)
        early = self._gpu_ready("check", verdict, summary)
        if early is not None:
            return early
        # The headline size is one of the train sizes and is always timed; without the library here.
        quick = TimingConfig(baseline=False)
        j, spent = self._judge(verdict, [("train", dict(s)) for s in self.spec.train], quick)
        seeds = tuple(j.evidence.get("seeds") or ())
        train = [m for m in j.measurements if m.split == "train"]
        category = worst([verdict.category] + [m.category for m in train]) if j.status == "judged" else j.status
        result = {
            "category": category, "meaning": DESCRIPTIONS.get(category, "correct at every train size"),
            "correct_at_train_sizes": bool(train) and all(m.category == OK for m in train),
            "sizes": [_size_answer(m, seeds) for m in train],
            "families": summary.get("families"),
            "device": j.device.name if j.device is not None else None,
        }
        return ToolOutcome("check", "ok" if j.status == "judged" else j.status, result, gpu_s=spent)

    def _time(self, sub: Submission) -> ToolOutcome:
        verdict, summary = self._static(sub)
        early = self._gpu_ready("time", verdict, summary)
        if early is not None:
            return early
        headline = dict(self.spec.headline)
        j, spent = self._judge(verdict, [("train", headline)], None)
        seeds = tuple(j.evidence.get("seeds") or ())
        m = next((m for m in j.measurements), None)
        result: dict[str, Any] = {"category": j.category, "meaning": DESCRIPTIONS.get(j.category, "correct, and "
                                                                                                  "not slower than the library"),
                                  "sizes": headline}
        if m is not None and m.time_ms is not None:
            timing = m.detail.get("timing") or {}
            result.update({
                "time_ms": m.time_ms, "spread": m.time_spread, "baseline": timing.get("baseline"),
                "baseline_ms": m.baseline_ms, "speedup": m.speedup, "tflops": m.tflops,
                "sol_fraction": m.sol_fraction, "baseline_sol_fraction": timing.get("baseline_sol_fraction"),
            })
            if m.speedup is None:
                result["note"] = "no library time was measured here, so there is no speedup"
        elif m is not None:
            result.update(_size_answer(m, seeds))
            result["note"] = "not timed: the kernel is not correct at the headline size"
        result["device"] = j.device.name if j.device is not None else None
        return ToolOutcome("time", "ok" if j.status == "judged" else j.status, result, gpu_s=spent)

    def _submit(self, sub: Submission) -> ToolOutcome:
        return ToolOutcome("submit", "ok", {"submitted": True, "note": "the kernel is judged in full; the episode ends"},
                           submission=sub)


def _brief(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary[k] for k in ("category", "stage", "meaning", "message", "families") if k in summary}


def _size_answer(m: Any, seeds: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": dict(m.sizes), "category": m.category}
    if m.max_rel_err is not None:
        out["error"] = m.max_rel_err
    w = _worst(m.worst)
    if w:
        out["worst_element"] = w
    if m.category != OK and m.message:
        out["message"] = scrub(m.message, seeds)
    return out


def static_summary(verdict: Any) -> dict[str, Any]:
    """What `assemble` answers: the static verdict without the module text, the commands or the
    launch checks at sizes the agent is not shown."""
    out: dict[str, Any] = {
        "category": verdict.category, "stage": verdict.stage,
        "meaning": DESCRIPTIONS.get(verdict.category, "assembles and uses every requested family"),
        "arch": verdict.arch,
    }
    if verdict.evidence:
        out["message"] = verdict.evidence
    if verdict.evidence_line is not None:
        out["line"] = verdict.evidence_line
    if verdict.evidence_source:
        out["source_line"] = verdict.evidence_source
    if verdict.extract_evidence.get("reason"):
        out["reason"] = verdict.extract_evidence["reason"]
    log = _log_lines(verdict.assembler_log)
    if log:
        out["assembler_output"] = log
    if verdict.warnings:
        out["warnings"] = verdict.warnings[:12]
    if verdict.resources:
        out["resources"] = verdict.resources
    out["families"] = [{k: r.to_dict()[k] for k in ("family", "in_ptx", "in_sass", "ok", "missing")}
                       for r in verdict.families]
    out["ptx_families"] = list(verdict.ptx_families)
    out["sass_families"] = list(verdict.sass_families)
    if verdict.entries:
        out["entries"] = [{"entry": e.entry, "launched": e.launched, "reaches": e.reaches,
                           "ptx_families": e.ptx_families, "sass_families": e.sass_families} for e in verdict.entries]
    problems = [p for p in verdict.launch_problems if p.get("split") in (None, "train")]
    if problems:
        out["launch_problems"] = [{k: p.get(k) for k in ("sizes", "category", "message")} for p in problems]
    return out
