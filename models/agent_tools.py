"""The judge as tools an agent calls, on a workspace file: `write_file`, `edit_file`, `apply_patch`,
`read_file`, and the judge's `assemble`, `check`, `time` and `submit`.

One implementation for both front doors: `ptxbench run --agent` offers these to a model through
the endpoint's function calling (models/agent.py), and `ptxbench mcp` offers them to an external
agent over the Model Context Protocol (services/mcp_server.py).

The kernel is a file (models/workspace.py): written once, then edited; the judge's tools act on it
(given `code`, they write it first). What a judge tool may say is the candidate's business and
nothing else:

- `assemble`: the static stages — ptxas's messages, each entry's resources, the requested
  families in the PTX and the SASS of the launched entries (and what they call), and launch
  problems at the train sizes.
- `check`: run and verify at the task's **train** sizes only: the category, and per size its
  category, error, worst element, and how many elements are wrong (unwritten, not finite) and
  where the first is, in how many trials. Held-out sizes are never run here, and neither the trial
  seeds nor the harness's internals (its timing schedule, fingerprints, worker commands) are
  ever in an answer: seed numbers are scrubbed from the worker's messages.
- `time`: the headline size, timed against the library in the same worker: time, speedup,
  TFLOP/s and the fraction of the speed of light.
- `submit`: the final kernel; the caller judges it in full (held-out sizes included) as the
  episode's sample.

Without a GPU of the task's arch, `check` and `time` answer `skipped: no sm_90a device` and run
nothing: an answer never claims a run that did not happen. A call may carry a deadline (the
episode's wall budget): the assembler's deadline and the GPU stages' budget are cut to it. The GPU
budget (`GpuBudget`, an episode's or one an MCP session shares) is read and charged only under
`GPU_LOCK`.

A call's arguments come from a model or a client and are read with care: their size and nesting are
checked on the raw text, in one linear pass, before any JSON parser sees them (`check_arguments`),
and an already-parsed mapping is walked with a stack, never by recursion. `JudgeTools.call` never
raises: every failure is an `error: …` answer the caller can act on.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

from ptxbench.engine.candidate import Candidate
from ptxbench.engine.categories import DESCRIPTIONS, OK, SKIPPED_PREFIX, worst
from ptxbench.engine.manifest import MAX_MANIFEST_BYTES, ManifestError, parse_manifest
from ptxbench.models.workspace import EditError, Workspace
from ptxbench.tasks.spec import TaskSpec

JUDGE_TOOLS = ("assemble", "check", "time", "submit")
FILE_TOOLS = ("write_file", "edit_file", "apply_patch", "read_file")
TOOL_NAMES = FILE_TOOLS + JUDGE_TOOLS
READ_ONLY_TOOLS = ("read_file", "assemble", "check", "time")   # they change neither the file nor the episode
LANGUAGES = ("ptx", "cuda")
MAX_LOG_LINES = 40
MAX_MESSAGE = 1200
DEFAULT_GPU_BUDGET_S = 600.0
# One GPU worker per process (engine.pipeline.default_runner): judgements on it take turns. The GPU
# budgets are read and charged only while it is held, so concurrent calls can never overspend one.
GPU_LOCK = threading.Lock()
_SEED = re.compile(r"\bseeds?\s*[=:]?\s*\[?[0-9][0-9, ]*\]?", re.I)
_WORST_KEYS = ("output", "index", "got", "expected", "abs_err", "rel_err", "tolerance", "bound", "ratio")

# What one call may send. The code cap is the engine's own candidate limit (engine/assemble.py), so a
# kernel the engine would refuse is refused here with a message the agent can act on; the whole
# arguments may add the largest manifest the engine reads and some room for the JSON around them.
MAX_CODE_BYTES = 4 << 20
MAX_ARGUMENT_BYTES = MAX_CODE_BYTES + MAX_MANIFEST_BYTES + (64 << 10)
# A candidate's arguments nest a handful of levels (object, manifest, launches, a launch, its args);
# 32 leaves room and keeps every parser, json's and the store readers', far from Python's recursion limit.
MAX_DEPTH = 32
MAX_NAME_CHARS = 64
# A JSON string literal, escapes included, read possessively (no backtracking); one left open runs to
# the end of the text, an escape cut off by the end included.
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_BRACKET_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes

_CODE = {"type": "string", "description": "The whole kernel: a PTX module, or CUDA C++ device code with inline PTX "
                                         "(language cuda). Left out: the workspace file as it is now."}
_LANGUAGE = {"type": "string", "enum": list(LANGUAGES),
             "description": "ptx (the default) or cuda. Left out: the file's language."}
_MANIFEST = {"type": "object", "description": "The launch manifest (launches, scratch, tensor maps) when the task's "
                                             "default launch does not fit the kernel. Left out with `code`: the default "
                                             "launch; left out without `code`: the file's manifest."}
_CANDIDATE_PROPERTIES: dict[str, Any] = {"code": _CODE, "language": _LANGUAGE, "manifest": _MANIFEST}
_PARAMETERS: dict[str, dict[str, Any]] = {
    "write_file": {"properties": {
        "code": {"type": "string", "description": "The whole kernel; it replaces the file."},
        "language": {**_LANGUAGE, "description": "ptx (the default) or cuda."},
        "manifest": {"type": "object", "description": "The launch manifest; left out, the default launch."}},
        "required": ["code"]},
    "edit_file": {"properties": {
        "old": {"type": "string", "description": "Text that occurs exactly once in the file (include a few lines of "
                                                 "context), whitespace included."},
        "new": {"type": "string", "description": "The text that takes its place (empty to delete it)."}},
        "required": ["old", "new"]},
    "apply_patch": {"properties": {
        "patch": {"type": "string", "description": "A unified diff of the file: @@ -a,b +c,d @@ hunks whose context "
                                                   "(' ') and removed ('-') lines match the file; '+' lines are added."}},
        "required": ["patch"]},
    "read_file": {"properties": {
        "start_line": {"type": "integer", "minimum": 1, "description": "First line to show (1 when left out)."},
        "end_line": {"type": "integer", "minimum": 1, "description": "Last line to show (at most 400 at a time)."}},
        "required": []},
    **{name: {"properties": _CANDIDATE_PROPERTIES, "required": []} for name in JUDGE_TOOLS},
}
DESCRIPTIONS_OF_TOOLS = {
    "write_file": "Write the whole kernel into the workspace file (replacing what it held), with its language and "
                  "launch manifest. The judge's tools then act on the file, so a kernel is sent once.",
    "edit_file": "Replace one exact span of the workspace file: `old` must occur in it exactly once. Answers the "
                 "changed lines with a little context.",
    "apply_patch": "Apply a unified diff to the workspace file. Every hunk must match, or nothing changes.",
    "read_file": "Show lines of the workspace file, numbered (at most 400 lines a call).",
    "assemble": "Assemble the kernel for the task's architecture with ptxas (nvcc first for CUDA) and inspect it: "
                "assembler errors and warnings, registers and shared memory per entry, and which requested "
                "instruction families are in the PTX and in the machine code of the launched kernels. Runs nothing.",
    "check": "Assemble, then run the kernel on the GPU at the task's train sizes and verify every output against "
             "the reference: the verdict, and per size the error, how many elements are wrong and where the "
             "first is. Does not time it.",
    "time": "Assemble, run and time the kernel at the headline size against the library in the same process: "
            "its time, the library's, the speedup, TFLOP/s and the fraction of the device's speed of light.",
    "submit": "Submit the final kernel. It is judged in full (correctness at more sizes than check runs, the "
              "requested families, speed) and the episode ends: call it once, last.",
}
_JUDGE_NOTE = " Without `code` it judges the workspace file; with `code` it writes the file first."


def tool_schemas() -> list[dict[str, Any]]:
    """The tools as chat-completions function definitions."""
    out = []
    for name in TOOL_NAMES:
        params = _PARAMETERS[name]
        description = DESCRIPTIONS_OF_TOOLS[name] + (_JUDGE_NOTE if name in JUDGE_TOOLS else "")
        out.append({"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": dict(params["properties"]),
                           "required": list(params["required"])}}})
    return out


class GpuBudget:
    """GPU seconds that `check` and `time` may spend together: an episode's, or an MCP session's shared by
    the episodes of its tasks. Read and charged only under GPU_LOCK."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0

    def left(self) -> float:
        return max(0.0, self.seconds - self.spent)


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
    raw: str                          # the arguments as the agent sent them (within the caps)

    def stored_response(self) -> str:
        """What the submitted sample keeps as its response: the call's arguments with the code left
        out, for the sample keeps the code itself (and the call's step its arguments)."""
        size = len(self.code.encode("utf-8", "surrogatepass"))
        return json.dumps({"code": f"(the sample's code, {size:,} bytes)", "language": self.language,
                           **({"manifest": self.manifest} if self.manifest is not None else {})}, ensure_ascii=False)


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


def _utf8_size(text: str, cap: int) -> int:
    """The text's size in UTF-8 bytes, or a number over `cap` as soon as it must be over (no copy then)."""
    if len(text) > cap:  # a character is at least one byte
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def json_depth(text: str) -> int:
    """How deep the JSON text's arrays and objects nest (0 for a scalar), without parsing it: linear in
    the text, brackets inside strings (escapes included) not counted. Text that is not JSON gets a
    number too; the parser refuses it afterwards."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    steps = memoryview(brackets.encode("ascii").translate(_BRACKET_STEP)).cast("b")
    return max(accumulate(steps), default=0)


_FLAT = "send one flat object: {\"code\": …, \"language\": …, \"manifest\": {…}}"


def _too_large(what: str, size: int, limit: int) -> ArgumentError:
    return ArgumentError(f"{what}: {size:,} bytes or more, over the limit of {limit:,} bytes "
                         f"(a kernel may be {MAX_CODE_BYTES:,} bytes, a manifest {MAX_MANIFEST_BYTES:,})")


def _too_deep(what: str, depth: int | None) -> ArgumentError:
    levels = f"{depth:,} levels deep" if depth is not None else f"more than {MAX_DEPTH} levels deep"
    return ArgumentError(f"{what}: nested {levels}, over the limit of {MAX_DEPTH} levels; {_FLAT}")


def _check_text(text: str, what: str, max_bytes: int) -> None:
    size = _utf8_size(text, max_bytes)
    if size > max_bytes:
        raise _too_large(what, size, max_bytes)
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise _too_deep(what, depth)


def _check_value(value: Any) -> None:
    """Depth and size of arguments that arrive already parsed, walked with a stack (no recursion),
    stopping as soon as a cap is passed; a cycle is a depth over the cap."""
    size, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, (dict, list, tuple)):
            if depth > MAX_DEPTH:
                raise _too_deep("the arguments", None)
            size += 2 + len(item)  # brackets and separators, counted before any child is looked at
            if size > MAX_ARGUMENT_BYTES:
                break
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise ArgumentError("the arguments have a key that is not a string")
                    size += len(key) + 3
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif item is None or isinstance(item, (bool, float)):
            size += 5
        elif isinstance(item, int):
            size += item.bit_length() // 3 + 1  # about its decimal digits, without writing them out
        else:
            raise ArgumentError(f"the arguments hold a {type(item).__name__}, which is not a JSON value")
        if size > MAX_ARGUMENT_BYTES:
            break
    if size > MAX_ARGUMENT_BYTES:
        raise _too_large("the arguments", size, MAX_ARGUMENT_BYTES)


def check_arguments(arguments: object) -> None:
    """The caps, before anything reads the arguments: ArgumentError when they are too large or
    nest too deep. Text is measured raw; a mapping (an SDK that parsed the JSON itself) is walked."""
    if isinstance(arguments, str):
        _check_text(arguments, "the arguments", MAX_ARGUMENT_BYTES)
    elif arguments is not None:
        _check_value(arguments)


def parse_arguments(arguments: object) -> dict[str, Any]:
    """The arguments as a mapping, the caps checked first; ArgumentError says what is wrong."""
    check_arguments(arguments)
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        raise ArgumentError("no arguments: give at least {\"code\": …}")
    if not isinstance(arguments, str):
        raise ArgumentError("the arguments must be a JSON object such as {\"code\": …}")
    try:
        value = json.loads(arguments)
    except ValueError as exc:  # JSONDecodeError, and an integer literal too long to read
        raise ArgumentError(f"the arguments are not valid JSON ({_short(str(exc))})") from None
    if not isinstance(value, dict):
        raise ArgumentError("the arguments must be a JSON object such as {\"code\": …}")
    return value


def _read_code(args: dict[str, Any]) -> str | None:
    """`code` when the call gives it (None when it is left out or null); ArgumentError when it is not text."""
    code = args.get("code")
    if code is None:
        return None
    if not isinstance(code, str) or not code.strip():
        raise ArgumentError("`code` must be the kernel's source text, a non-empty string")
    size = _utf8_size(code, MAX_CODE_BYTES)
    if size > MAX_CODE_BYTES:
        raise _too_large("`code`", size, MAX_CODE_BYTES)
    return code


def _read_language(args: dict[str, Any]) -> str | None:
    language = args.get("language")
    if language is None or language == "":
        return None
    if language not in LANGUAGES:
        raise ArgumentError(f"`language` must be ptx or cuda, not {_short(repr(language), 60)}")
    return str(language)


def _read_manifest(args: dict[str, Any]) -> dict[str, Any] | None:
    manifest = args.get("manifest")
    if isinstance(manifest, str):
        if not manifest.strip():
            return None
        _check_text(manifest, "`manifest`", MAX_MANIFEST_BYTES)
        try:
            manifest = json.loads(manifest)
        except ValueError as exc:
            raise ArgumentError(f"`manifest` is a string that is not JSON ({_short(str(exc))})") from None
    if manifest is not None and not isinstance(manifest, dict):
        raise ArgumentError("`manifest` must be a JSON object (docs/candidate.md)")
    return manifest or None


def read_submission(arguments: object) -> Submission:
    """code, language and manifest from a call's arguments; ArgumentError says what is wrong."""
    args = parse_arguments(arguments)
    code = _read_code(args)
    if code is None:
        raise ArgumentError("`code` must be the kernel's source text, a non-empty string")
    language, manifest = _read_language(args) or "ptx", _read_manifest(args)
    raw = arguments if isinstance(arguments, str) else json.dumps(args, ensure_ascii=False)
    return Submission(language, code, manifest, raw)


def tool_name(name: object) -> str:
    """A call's tool name as it may be recorded and said back: short, and always text."""
    if not isinstance(name, str):
        return f"<{type(name).__name__}>"
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS] + "…"


def recorded_arguments(arguments: object) -> str:
    """What a log or the store keeps of a call's arguments, and what goes back to the endpoint in the
    conversation: the text as sent when it is within the caps (even when it is not JSON), else a
    short JSON note saying what was dropped, so no reader ever meets the oversized or deep text."""
    try:
        check_arguments(arguments)
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            parsed = None  # not JSON: kept as sent, it is small and flat enough
        manifest = parsed.get("manifest") if isinstance(parsed, dict) else None
        if isinstance(manifest, str):  # a reader of the manifest text must be as safe as one of the arguments
            _check_text(manifest, "`manifest`", MAX_MANIFEST_BYTES)
        if isinstance(arguments, str):
            return arguments
        return "" if arguments is None else json.dumps(arguments, ensure_ascii=False, default=str)
    except (ArgumentError, RecursionError, MemoryError, TypeError, ValueError) as exc:
        why = str(exc) if isinstance(exc, ArgumentError) else type(exc).__name__
        return json.dumps({"omitted": f"the arguments were not kept: {_short(why, 300)}"})


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


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
    """The tools for one task and one episode: its workspace file, and the GPU time `check` and `time`
    may spend together (`budget`: an MCP session hands in one shared by its episodes; else the tools
    have their own of `gpu_budget_s`). One call at a time per instance."""

    spec: TaskSpec
    gpu: GpuAccess = field(default_factory=GpuAccess)
    gpu_budget_s: float = DEFAULT_GPU_BUDGET_S
    budget: GpuBudget | None = None
    workspace: Workspace = field(default_factory=lambda: Workspace(MAX_CODE_BYTES))

    def __post_init__(self) -> None:
        if self.budget is None:
            self.budget = GpuBudget(self.gpu_budget_s)

    @property
    def gpu_spent_s(self) -> float:
        assert self.budget is not None
        return self.budget.spent

    # -- the one entry point -----------------------------------------------------------------------

    def call(self, name: object, arguments: object, *, deadline: float | None = None) -> ToolOutcome:
        """Answer one call. Never raises: an unknown tool, arguments that are unreadable, too large
        or nested too deep, and even a failure of the judge itself are an `error: …` answer.
        `deadline` (time.monotonic()) bounds what the call may spend: the assembler's and the GPU
        stages' own deadlines are cut to it, and a call begun after it runs nothing."""
        started = time.perf_counter()
        tool = tool_name(name)
        try:
            out = self._answer(name, tool, arguments, deadline)
        except RecursionError:  # a parser below met nesting the caps did not foresee
            out = ToolOutcome(tool, "error: bad arguments", {
                "error": f"the arguments nest too deep to read; {_FLAT}"})
        except MemoryError:
            out = ToolOutcome(tool, "error: bad arguments", {
                "error": f"the arguments are too large to read; a kernel may be {MAX_CODE_BYTES:,} bytes"})
        except Exception as exc:  # a fault of the judge, not of the call: said, never raised at the agent
            out = ToolOutcome(tool, f"error: the tool failed: {type(exc).__name__}", {
                "error": f"the judge failed on this call ({type(exc).__name__}: {scrub(str(exc))}); the kernel "
                         "was not judged: try again, or submit"})
        out.seconds = time.perf_counter() - started
        return out

    def _answer(self, name: object, tool: str, arguments: object, deadline: float | None) -> ToolOutcome:
        if not isinstance(name, str):
            return ToolOutcome(tool, "error: unknown tool", {
                "error": f"the tool's name must be a string, not a {type(name).__name__}; the tools are "
                         f"{', '.join(TOOL_NAMES)}"})
        if name not in TOOL_NAMES:
            return ToolOutcome(tool, "error: unknown tool", {
                "error": f"there is no tool {tool!r}; the tools are {', '.join(TOOL_NAMES)}"})
        try:
            empty = arguments is None or (isinstance(arguments, str) and not arguments.strip())
            args = {} if name == "read_file" and empty else parse_arguments(arguments)
            if name in FILE_TOOLS:
                return self._file_tool(name, args)
            submission = self._submission(args, arguments)
        except ArgumentError as exc:
            return ToolOutcome(tool, "error: bad arguments", {"error": str(exc)})
        except EditError as exc:
            return ToolOutcome(tool, "error: edit not applied", {"error": str(exc), "file": self.workspace.summary()})
        if _left(deadline) <= 0:
            status = f"{SKIPPED_PREFIX}the episode's time is used up"
            return ToolOutcome(name, status, {"status": status, "file": self.workspace.summary()})
        try:
            out: ToolOutcome = getattr(self, f"_{name}")(submission, deadline)
        except RecursionError:
            raise  # said as such by call()
        except (RuntimeError, OSError) as exc:  # EngineError, ToolchainError: the tool failed, not the kernel
            return ToolOutcome(name, f"error: the tool failed: {type(exc).__name__}",
                               {"error": f"the judge could not answer this call ({type(exc).__name__}: "
                                         f"{scrub(str(exc))}); the kernel was not judged"})
        out.result.setdefault("file", self.workspace.summary())
        return out

    # -- the workspace ---------------------------------------------------------------------------------

    def _submission(self, args: dict[str, Any], arguments: object) -> Submission:
        """The candidate a judge tool acts on: `code` when given (written to the file first, with its
        language and manifest as given), else the file, with any `language` or `manifest` given."""
        code, language, manifest = _read_code(args), _read_language(args), _read_manifest(args)
        ws = self.workspace
        if code is not None:
            ws.write(code, language or "ptx", manifest, clear_manifest=True)
        else:
            if ws.empty:
                raise ArgumentError("there is no kernel yet: give `code`, or write the file first with write_file")
            if language is not None or "manifest" in args:
                ws.write(ws.code, language, manifest, clear_manifest="manifest" in args)
        raw = arguments if isinstance(arguments, str) else recorded_arguments(args)
        return Submission(ws.language, ws.code, ws.manifest, raw)

    def _file_tool(self, name: str, args: dict[str, Any]) -> ToolOutcome:
        ws = self.workspace
        if name == "write_file":
            code = _read_code(args)
            if code is None:
                raise ArgumentError("`code` must be the kernel's source text, a non-empty string")
            return ToolOutcome(name, "ok", ws.write(code, _read_language(args) or "ptx", _read_manifest(args),
                                                    clear_manifest=True))
        if name == "edit_file":
            old, new = args.get("old"), args.get("new")
            if not isinstance(old, str) or not isinstance(new, str):
                raise ArgumentError("`old` and `new` must both be text: the exact span to replace, and what replaces it")
            return ToolOutcome(name, "ok", ws.replace(old, new))
        if name == "apply_patch":
            patch = args.get("patch")
            if not isinstance(patch, str):
                raise ArgumentError("`patch` must be a unified diff, as text")
            return ToolOutcome(name, "ok", ws.patch(patch))
        start, end = args.get("start_line"), args.get("end_line")
        for key, value in (("start_line", start), ("end_line", end)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ArgumentError(f"`{key}` must be a line number (1 or more)")
        if ws.empty:
            return ToolOutcome(name, "ok", {"file": ws.summary(), "text": "", "note": "the file is empty: write_file"})
        return ToolOutcome(name, "ok", ws.read(start, end))

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

    def _static(self, sub: Submission, deadline: float | None) -> tuple[Any, dict[str, Any]]:
        from ptxbench.engine.assemble import DEFAULT_TIMEOUT_S
        from ptxbench.engine.static import judge_static

        candidate, refused = self._candidate(sub)
        if candidate is None:
            return None, refused or {}
        verdict = judge_static(candidate, self.spec, timeout=max(1.0, min(DEFAULT_TIMEOUT_S, _left(deadline))))
        return verdict, static_summary(verdict)

    def _assemble(self, sub: Submission, deadline: float | None) -> ToolOutcome:
        _verdict, summary = self._static(sub, deadline)
        return ToolOutcome("assemble", "ok", summary)

    def _gpu_ready(self, tool: str, verdict: Any, summary: dict[str, Any]) -> ToolOutcome | None:
        """The answer when the GPU stages cannot run this candidate here; None when they may try."""
        if verdict is None or verdict.cubin is None:
            return ToolOutcome(tool, "ok", {**summary, "gpu": "not run: the kernel did not assemble"})
        skipped = self.gpu.skipped(self.spec.arch)
        if skipped:
            return ToolOutcome(tool, skipped, {"status": skipped, "static": _brief(summary),
                                               "note": "nothing was run: the GPU stages need a device of the task's "
                                                       "arch; the static verdict is above"})
        return None

    def _judge(self, verdict: Any, sizes: list[tuple[str, dict[str, int]]], timing: Any,
               deadline: float | None) -> tuple[Any, float, str | None]:
        """(judgement, GPU seconds, None), or (None, 0, why not): the budget is read and charged under
        the GPU lock, so calls that wait for it never spend more than is left."""
        from ptxbench.engine.pipeline import DEFAULT_BUDGET_S, judge

        budget = self.budget
        assert budget is not None
        if not GPU_LOCK.acquire(timeout=max(0.0, min(_left(deadline), 24 * 3600.0))):
            return None, 0.0, f"{SKIPPED_PREFIX}the episode's time ran out waiting for the GPU"
        try:
            gpu_left, wall_left = budget.left(), _left(deadline)
            if gpu_left <= 0:
                return None, 0.0, f"{SKIPPED_PREFIX}the GPU-time budget of {budget.seconds:g} s is used up"
            if wall_left <= 0:
                return None, 0.0, f"{SKIPPED_PREFIX}the episode's time is used up"
            started = time.perf_counter()
            try:
                j = judge(verdict.candidate, self.spec, static=verdict, sizes=sizes, timing=timing,
                          budget_s=min(DEFAULT_BUDGET_S, gpu_left, wall_left))
            finally:
                spent = time.perf_counter() - started
                budget.spent += spent
        finally:
            GPU_LOCK.release()
        return j, spent, None

    def _skipped(self, tool: str, status: str, summary: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome(tool, status, {"status": status, "static": _brief(summary)})

    def _check(self, sub: Submission, deadline: float | None) -> ToolOutcome:
        from ptxbench.engine.gpu.protocol import TimingConfig

        verdict, summary = self._static(sub, deadline)
        early = self._gpu_ready("check", verdict, summary)
        if early is not None:
            return early
        # The headline size is one of the train sizes and is always timed; without the library here.
        quick = TimingConfig(baseline=False)
        j, spent, why = self._judge(verdict, [("train", dict(s)) for s in self.spec.train], quick, deadline)
        if j is None:
            return self._skipped("check", why or SKIPPED_PREFIX, summary)
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

    def _time(self, sub: Submission, deadline: float | None) -> ToolOutcome:
        verdict, summary = self._static(sub, deadline)
        early = self._gpu_ready("time", verdict, summary)
        if early is not None:
            return early
        headline = dict(self.spec.headline)
        j, spent, why = self._judge(verdict, [("train", headline)], None, deadline)
        if j is None:
            return self._skipped("time", why or SKIPPED_PREFIX, summary)
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

    def _submit(self, sub: Submission, deadline: float | None) -> ToolOutcome:
        return ToolOutcome("submit", "ok", {"submitted": True, "note": "the kernel is judged in full; the episode ends"},
                           submission=sub)


def _left(deadline: float | None) -> float:
    """Seconds to `deadline` (time.monotonic()); infinite without one."""
    return float("inf") if deadline is None else deadline - time.monotonic()


def _brief(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary[k] for k in ("category", "stage", "meaning", "message", "families") if k in summary}


def _size_answer(m: Any, seeds: tuple[int, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": dict(m.sizes), "category": m.category}
    if m.max_rel_err is not None:
        out["error"] = m.max_rel_err
    w = _worst(m.worst)
    if w:
        out["worst_element"] = w
    if m.category != OK:
        out.update(wrong_elements(getattr(m, "detail", None)))
    if m.category != OK and m.message:
        out["message"] = scrub(m.message, seeds)
    return out


_COUNTED = (("elements", "violations", "wrong"), ("unwritten", "elements", "unwritten"),
            ("nonfinite", "elements", "nan_or_inf"), ("inputs", "elements", "inputs_modified"))


def wrong_elements(detail: Any) -> dict[str, Any]:
    """How a size went wrong, from its trials (a measurement's `detail`): in how many trials, and per
    output how many elements are wrong, unwritten or not finite out of how many, and where the first
    is. Seeds and timing stay out."""
    trials = detail.get("trials") if isinstance(detail, dict) else None
    trials = [t for t in trials if isinstance(t, dict)] if isinstance(trials, list) else []
    failed = [t for t in trials if t.get("category") not in (None, OK)]
    if not failed:
        return {}
    out: dict[str, Any] = {"trials_failed": f"{len(failed)} of {len(trials)}"}
    first = failed[0].get("detail")
    first = first if isinstance(first, dict) else {}
    for key, count_key, label in _COUNTED:
        per = first.get(key)
        if not isinstance(per, dict):
            continue
        rows = []
        for name, v in per.items():
            if not isinstance(v, dict) or not v.get(count_key):
                continue
            row: dict[str, Any] = {"tensor": str(name)[:64], "count": v.get(count_key)}
            for k in ("of", "first_index", "got", "expected", "value"):
                if k in v:
                    row[k] = v[k]
            rows.append(row)
        if rows:
            out[label] = rows[:8]
    canaries = first.get("canaries")
    if isinstance(canaries, list) and canaries:
        out["written_outside"] = [{k: c[k] for k in ("buffer", "before_bytes", "after_bytes", "after_first")
                                   if k in c} for c in canaries[:8] if isinstance(c, dict)]
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
