"""Stage `assemble`: candidate code → PTX → cubin, with resources, warnings and a classified verdict.

CUDA C++ goes through `nvcc -gencode=arch=compute_XYa,code=sm_XYa -ptx` first;
the PTX that comes out is what is judged. PTX goes through `ptxas -arch=<arch>
-v`. A bad candidate never raises: it gets an assemble category and evidence.
A missing tool raises ToolchainError (that is not the candidate's fault).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.engine import text_scan
from ptxbench.engine.cache import Cache, content_key, source_fingerprint
from ptxbench.engine.categories import OK
from ptxbench.engine.cuda_build import DEFAULT_FLAGS as NVCC_DEFAULT_FLAGS
from ptxbench.engine.cuda_build import directive_problem
from ptxbench.engine.ptxas_messages import (
    EntryResources,
    Message,
    is_warning,
    parse_nvcc,
    parse_ptxas,
    parse_resources,
    verdict,
)
from ptxbench.engine.sandbox import DEFAULT_LIMITS, Deadline, describe, job_dir
from ptxbench.engine.toolchain import ToolchainError, ToolRun, find_tool, host_compiler, run_tool, tool_version

LANGUAGES = ("ptx", "cuda")

# What ptxas 13.5 accepts for -arch (checked one by one; sm_70/72/101/102 are refused).
PTXAS_ARCHES: tuple[str, ...] = (
    "sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_90a",
    "sm_100", "sm_100a", "sm_100f", "sm_103", "sm_103a", "sm_103f", "sm_107", "sm_107a", "sm_107f",
    "sm_110", "sm_110a", "sm_110f", "sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f",
)

# Newest PTX ISA each ptxas release accepts (major.minor of ptxas → .version), read off
# "Unsupported .version 9.6; current version is '9.5'".
MAX_PTX_VERSION: dict[str, tuple[int, int]] = {"13.0": (9, 0), "13.5": (9, 5)}

# The GPU machine's driver (580) is CUDA 13.0. It loads cubins from the newer ptxas (CUDA
# minor-version compatibility, seen on an H200 for sm_90a), but it knows PTX only up to 9.0
# and no architecture newer than its release: those facts go with every verdict they touch.
DRIVER_CUDA = "13.0"
DRIVER_MAX_PTX_VERSION = (9, 0)
DRIVER_UNKNOWN_ARCHES = ("sm_107", "sm_107a", "sm_107f")

MAX_CODE_BYTES = 4 << 20
MAX_GENERATED_PTX_BYTES = 8 << 20     # what nvcc may make of a CUDA candidate (the experts make 13-130 KB)
DEFAULT_TIMEOUT_S = 120.0
PTXAS_FLAGS: tuple[str, ...] = ("-v",)
EVIDENCE_SOURCE_CHARS = 200
# A broken 4 MB module can make ptxas print an error per line: the verdict
# reads every message, the stored report keeps the head and the tail.
MAX_LOG_CHARS = 64 << 10
MAX_MESSAGES = 200
MAX_TEXT_CHARS = 2000     # one message, or the evidence line

# The classifier and this stage's own code are part of the cache key, so a
# change to either never serves a verdict that the new code would not give.
_FINGERPRINT = source_fingerprint(__file__, Path(__file__).with_name("ptxas_messages.py"),
                                  Path(__file__).with_name("cuda_build.py"))

_VERSION_RE = re.compile(r"^[ \t]*\.version[ \t]+(\d{1,4})\.(\d{1,4})\b", re.M)   # longer: left to ptxas
_TARGET_RE = re.compile(r"^[ \t]*\.target[ \t]+([A-Za-z0-9_]+)", re.M)


@dataclass
class AssembleResult:
    category: str  # "ok" or an assemble category
    language: str
    arch: str
    ptx: str = ""  # the PTX judged (nvcc's output for CUDA); "" when there is none
    generic_target: str | None = None  # an earlier .target than `arch` that its GPU runs (generic_target())
    cubin: bytes | None = None
    resources: dict[str, EntryResources] = field(default_factory=dict)
    warnings: list[Message] = field(default_factory=list)
    errors: list[Message] = field(default_factory=list)
    evidence: str = ""
    evidence_line: int | None = None  # line in the PTX (or the CUDA source for nvcc errors)
    evidence_source: str = ""  # the text of that line
    log: str = ""  # nvcc's and ptxas's output, as printed
    notes: list[str] = field(default_factory=list)  # facts about where the cubin can run (driver_notes)
    commands: dict[str, list[str]] = field(default_factory=dict)  # tool → the argv it was given
    tool_versions: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cached: bool = False
    timed_out: bool = False
    # A verdict that depends on the machine (a deadline, a CPU-seconds cap, a crash) is never cached.
    transient: bool = False
    sandbox: str = ""  # the confinement the tools ran under (engine.sandbox.describe)

    @property
    def ok(self) -> bool:
        return self.category == OK

    def to_dict(self, *, with_ptx: bool = True) -> dict[str, Any]:
        return {
            "category": self.category,
            "language": self.language,
            "arch": self.arch,
            "ptx": self.ptx if with_ptx else None,
            "generic_target": self.generic_target,
            "cubin_bytes": len(self.cubin) if self.cubin is not None else None,
            "resources": {k: v.to_dict() for k, v in self.resources.items()},
            "warnings": [m.to_dict() for m in self.warnings],
            "errors": [m.to_dict() for m in self.errors],
            "evidence": self.evidence,
            "evidence_line": self.evidence_line,
            "evidence_source": self.evidence_source,
            "log": self.log,
            "notes": list(self.notes),
            "commands": {k: list(v) for k, v in self.commands.items()},
            "tool_versions": dict(self.tool_versions),
            "seconds": dict(self.seconds),
            "cached": self.cached,
            "sandbox": self.sandbox,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], cubin: bytes | None) -> AssembleResult:
        return cls(
            category=d["category"],
            language=d["language"],
            arch=d["arch"],
            ptx=d.get("ptx") or "",
            generic_target=d.get("generic_target"),
            cubin=cubin,
            resources={k: EntryResources(**{**v}) for k, v in d.get("resources", {}).items()},
            warnings=[Message(**m) for m in d.get("warnings", [])],
            errors=[Message(**m) for m in d.get("errors", [])],
            evidence=d.get("evidence", ""),
            evidence_line=d.get("evidence_line"),
            evidence_source=d.get("evidence_source", ""),
            log=d.get("log", ""),
            notes=list(d.get("notes", [])),
            commands={k: list(v) for k, v in d.get("commands", {}).items()},
            tool_versions=d.get("tool_versions", {}),
            seconds=d.get("seconds", {}),
            sandbox=d.get("sandbox", ""),
        )


def strip_comments(text: str) -> str:
    """PTX without comments, line numbers kept (a block comment keeps its newlines); linear in the text.
    The last few are kept: the header, the driver's notes, the generic target and the module-data bound
    all read the same module."""
    return _uncommented(text)


@functools.lru_cache(maxsize=4)
def _uncommented(text: str) -> str:
    return text_scan.strip_comments(text)


def ptx_header(ptx: str) -> tuple[tuple[int, int] | None, str | None]:
    """The first .version and .target of a module (comments ignored)."""
    clean = strip_comments(ptx)
    v = _VERSION_RE.search(clean)
    t = _TARGET_RE.search(clean)
    return ((int(v.group(1)), int(v.group(2))) if v else None, t.group(1) if t else None)


def driver_notes(ptx: str, arch: str) -> list[str]:
    """What the GPU machine's driver (CUDA 13.0) makes of a module assembled by the newer ptxas."""
    notes = []
    version, _ = ptx_header(ptx)
    if version is not None and version > DRIVER_MAX_PTX_VERSION:
        notes.append(
            f"PTX ISA {version[0]}.{version[1]} is newer than the GPU machine's driver (CUDA {DRIVER_CUDA}) knows "
            f"(at most {DRIVER_MAX_PTX_VERSION[0]}.{DRIVER_MAX_PTX_VERSION[1]}): the cubin made here runs there "
            "through CUDA minor-version compatibility, and the driver could not compile this PTX itself")
    if arch in DRIVER_UNKNOWN_ARCHES:
        notes.append(f"{arch} is newer than CUDA {DRIVER_CUDA}: the GPU machine's driver cannot load a cubin for it")
    return notes


def compute_arch(arch: str) -> str:
    return "compute_" + arch.removeprefix("sm_")


def _decode(code: str | bytes, language: str) -> tuple[str | None, str, str, int | None]:
    """Text, or (None, category, evidence, line) for input that is not source text at all."""
    bad = "syntax" if language == "ptx" else "cuda_compile_error"
    size = len(code.encode("utf-8", "surrogatepass")) if isinstance(code, str) else len(code)
    if size > MAX_CODE_BYTES:
        return None, "assemble_other", f"the candidate is {size} bytes; the limit is {MAX_CODE_BYTES} bytes", None
    if isinstance(code, bytes):
        try:
            text = code.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = code[: exc.start].count(b"\n") + 1
            return None, bad, f"not UTF-8 text: byte 0x{code[exc.start]:02x} at offset {exc.start} (line {line})", line
    else:
        text = code
        if any(0xD800 <= ord(ch) <= 0xDFFF for ch in text):
            return None, bad, "not UTF-8 text: it holds unpaired surrogate characters", None
    if "\0" in text:
        at = text.index("\0")
        line = text.count("\n", 0, at) + 1
        return None, bad, f"binary data: a NUL byte at offset {at} (line {line})", line
    if not text.strip():
        if language == "ptx":
            return None, "bad_header", "the module is empty: no .version, .target or .entry", None
        return None, "cuda_compile_error", "the source is empty: no __global__ function", None
    return text, "", "", None


def _header_problem(ptx: str, arch: str, ptxas_version: str) -> tuple[str, str, int | None] | None:
    """ptx_version / target_mismatch found by reading the header, before ptxas runs.

    A missing or unknown header is left to ptxas, whose own message is clear."""
    version, target = ptx_header(ptx)
    limit = MAX_PTX_VERSION.get(".".join(ptxas_version.split(".")[:2]))
    if version and limit and version > limit:
        return (
            "ptx_version",
            f".version {version[0]}.{version[1]} is newer than ptxas {ptxas_version} accepts "
            f"(at most .version {limit[0]}.{limit[1]})",
            _line_of(ptx, _VERSION_RE),
        )
    if target and target in PTXAS_ARCHES and not runs_on(target, arch):
        return (
            "target_mismatch",
            f"the module's .target is {target}, which a GPU of the task's architecture ({arch}) cannot run",
            _line_of(ptx, _TARGET_RE),
        )
    return None


_ARCH = re.compile(r"sm_(\d+)([af]?)$")


def runs_on(target: str, arch: str) -> bool:
    """Whether a module for `.target target` runs on a GPU of `arch`: the same target, a plain earlier one
    (sm_80 or sm_90 code on an sm_90a GPU), or an earlier member of the GPU's family (sm_100f on sm_103a).
    An arch-specific target (sm_90a) runs on that architecture alone."""
    if target == arch:
        return True
    t, a = _ARCH.match(target), _ARCH.match(arch)
    if t is None or a is None or t.group(2) == "a":
        return False
    tn, an = int(t.group(1)), int(a.group(1))
    if t.group(2) == "f":
        return tn // 10 == an // 10 and tn <= an
    return tn <= an


def generic_target(ptx: str, arch: str) -> str | None:
    """The module's .target when it is an earlier architecture than the task's that the task's GPU runs:
    the kernel falls back to generic code (it is assembled for `arch` and judged all the same)."""
    _, target = ptx_header(ptx)
    return target if target and target != arch and target in PTXAS_ARCHES and runs_on(target, arch) else None


# Module-scope data a module declares: `.global`/`.const` variables with their array extents, however
# many a line or a statement holds (`.global .b8 a[1], b[1 << 40];`). ptxas builds initialised data in
# memory and writes it into the cubin, and a load reserves all of it on the device: a 3-line module can
# ask for gigabytes. Each declaration statement is read once, at most its first 4 KiB (extents come
# first), so the check is linear in the module.
MAX_MODULE_DATA_BYTES = 1 << 30
_DATA_SPACE = re.compile(r"(?<![\w.$%])\.(?:global|const)(?![\w$])")
_DATA_TYPE = re.compile(r"(?:\s*\.(?:align\s+\d{1,9}|v2|v4|v8|[a-z][a-z0-9]*))*")
_VECTOR = re.compile(r"\.v([248])\b")
_SCALAR = re.compile(r"\.(?:[a-z]+)(8|16|32|64|128)(x2)?\b")
_EXTENT = re.compile(r"\[\s*(\d*)\s*\]")
_DECL_WINDOW = 4096


def module_data_problem(ptx: str) -> tuple[str, str, int | None] | None:
    """`resource_limit` when the module's declared `.global`/`.const` data adds up to more than
    MAX_MODULE_DATA_BYTES (checked before ptxas spends memory and time building it)."""
    total = 0
    clean = strip_comments(ptx)
    read_to = 0
    for m in _DATA_SPACE.finditer(clean):
        if m.start() < read_to:
            continue                        # inside a statement already read
        end = clean.find(";", m.end(), m.end() + _DECL_WINDOW)
        read_to = end if end != -1 else m.end() + _DECL_WINDOW
        statement = clean[m.end():read_to]
        kinds = _DATA_TYPE.match(statement)
        head = kinds.group(0) if kinds else ""
        vector = _VECTOR.search(head)
        scalar = _SCALAR.search(head)
        unit = (int(scalar.group(1)) // 8 if scalar else 1) * (2 if scalar and scalar.group(2) else 1) \
            * (int(vector.group(1)) if vector else 1)
        for declarator in _declarators(statement[len(head):]):
            size = unit
            for e in _EXTENT.findall(declarator):
                size *= int(e) if e and len(e) <= 12 else (1 << 40 if e else 1)
            total += size
        if total > MAX_MODULE_DATA_BYTES:
            line = clean.count("\n", 0, m.start()) + 1
            return ("resource_limit",
                    f"the module declares more than {MAX_MODULE_DATA_BYTES >> 30} GiB of .global/.const data "
                    f"({total} bytes by this line); the judge does not assemble or load modules that large "
                    "(scratch memory comes from the launch manifest, docs/candidate.md)", line)
    return None


def _declarators(text: str) -> list[str]:
    """The names (with their extents) of one declaration: split at commas outside an initializer's
    braces, each cut at its `=`."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [d.split("=", 1)[0] for d in out if d.split("=", 1)[0].strip()]


def _line_of(text: str, pattern: re.Pattern[str]) -> int | None:
    clean = strip_comments(text)  # keeps every newline, so line numbers agree
    m = pattern.search(clean)
    return clean.count("\n", 0, m.start()) + 1 if m else None


def _source_line(text: str, line: int | None) -> str:
    if not line:
        return ""
    lines = text.split("\n")      # as ptxas and nvcc count lines: \r, \f and U+2028 do not end one
    if 1 <= line <= len(lines):
        return lines[line - 1].strip()[:EVIDENCE_SOURCE_CHARS]
    return ""


def assemble(
    code: str | bytes,
    language: str,
    arch: str,
    *,
    cache: Cache | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    deadline: Deadline | None = None,
    nvcc_flags: tuple[str, ...] = NVCC_DEFAULT_FLAGS,
) -> AssembleResult:
    """Assemble one candidate for `arch` (for example "sm_90a"); cached by content hash when `cache` is given.

    nvcc and ptxas share one deadline: `deadline` when the caller holds one for the whole candidate,
    else `timeout` seconds from now. Each runs confined (engine.sandbox). `nvcc_flags` are the
    options nvcc gets for a CUDA candidate (engine.cuda_build.nvcc_flags)."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, not {language!r}")
    if arch not in PTXAS_ARCHES:
        raise ValueError(f"ptxas does not know the architecture {arch!r} (known: {', '.join(PTXAS_ARCHES)})")
    started = time.perf_counter()
    text, category, evidence, line = _decode(code, language)
    if text is None:
        return AssembleResult(category, language, arch, evidence=evidence, evidence_line=line,
                              seconds={"total": time.perf_counter() - started})

    versions = {"ptxas": tool_version("ptxas")}
    if language == "cuda":
        versions["nvcc"] = tool_version("nvcc")
    nvcc_flags = tuple(nvcc_flags) if language == "cuda" else ()
    key = content_key(text, language=language, arch=arch, versions=versions, flags=PTXAS_FLAGS, stage="assemble",
                      nvcc_flags=list(nvcc_flags), engine=_FINGERPRINT, limits=DEFAULT_LIMITS.to_dict(),
                      sandbox=describe())
    if cache is not None:
        hit = cache.get(key, blobs=("cubin",))
        if hit is not None and (hit[0].get("cubin_bytes") is None or "cubin" in hit[1]):
            report, blobs = hit
            result = AssembleResult.from_dict(report, blobs.get("cubin"))
            result.cached = True
            result.seconds = {"total": time.perf_counter() - started}
            return result

    with job_dir("ptxbench-asm-") as tmp:
        result = _assemble_uncached(text, language, arch, Path(tmp), deadline or Deadline(timeout), versions,
                                    nvcc_flags)
    _trim(result)
    result.seconds["total"] = time.perf_counter() - started
    if cache is not None and not result.transient:
        blobs = {"cubin": result.cubin} if result.cubin is not None else {}
        cache.put(key, result.to_dict(), blobs)
    return result


def _trim(result: AssembleResult) -> None:
    """Bound what a verdict keeps of the tools' output, whatever the candidate made them print."""
    if len(result.evidence) > MAX_TEXT_CHARS:
        result.evidence = result.evidence[:MAX_TEXT_CHARS] + " […]"
    for msgs in (result.errors, result.warnings):
        for i, m in enumerate(msgs):
            if len(m.text) > MAX_TEXT_CHARS or (m.file is not None and len(m.file) > MAX_TEXT_CHARS):
                msgs[i] = dataclasses.replace(m, text=m.text[:MAX_TEXT_CHARS], file=(m.file or "")[:MAX_TEXT_CHARS] or None)
    if len(result.log) > MAX_LOG_CHARS:
        half = MAX_LOG_CHARS // 2
        cut = len(result.log) - 2 * half
        result.log = f"{result.log[:half]}\n[... {cut} characters of tool output left out ...]\n{result.log[-half:]}"
    for name in ("errors", "warnings"):
        msgs: list[Message] = getattr(result, name)
        if len(msgs) > MAX_MESSAGES:
            left = len(msgs) - MAX_MESSAGES
            setattr(result, name, msgs[:MAX_MESSAGES] + [
                Message(tool="ptxbench", severity="info", text=f"{left} more {name} left out")])


def _assemble_uncached(text: str, language: str, arch: str, tmp: Path, deadline: Deadline,
                       versions: dict[str, str], nvcc_flags: tuple[str, ...]) -> AssembleResult:
    result = AssembleResult(OK, language, arch, tool_versions=dict(versions))
    log: list[str] = []
    if language == "cuda":
        ptx = _nvcc_to_ptx(text, arch, tmp, deadline, result, log, nvcc_flags)
        if ptx is None:
            result.log = "\n".join(log)
            return result
    else:
        ptx = text
    result.ptx = ptx
    result.notes = driver_notes(ptx, arch)
    result.generic_target = generic_target(ptx, arch)
    if result.generic_target:
        result.notes.append(f"generic fallback: the module targets {result.generic_target}, an earlier architecture "
                            f"than the task's {arch} that its GPU runs; it is assembled for {arch} and judged, and "
                            f"the {arch}-only instructions it could not use count as not used")

    problem = _header_problem(ptx, arch, versions["ptxas"]) or module_data_problem(ptx)
    if problem:
        result.category, result.evidence, result.evidence_line = problem
        result.evidence_source = _source_line(ptx, result.evidence_line)
        result.log = "\n".join(log)
        return result

    ptx_path, cubin_path = tmp / "candidate.ptx", tmp / "candidate.cubin"
    ptx_path.write_text(ptx, encoding="utf-8")
    argv = [str(find_tool("ptxas")), f"-arch={arch}", *PTXAS_FLAGS, ptx_path.name, "-o", cubin_path.name]
    result.commands["ptxas"] = ["ptxas", *argv[1:]]
    run = run_tool(argv, timeout=deadline.left(), cwd=tmp)
    result.sandbox = run.sandbox
    result.seconds["ptxas"] = run.seconds
    log.append(run.output)
    result.log = "\n".join(x for x in log if x)
    messages = parse_ptxas(run.output)
    result.errors = [m for m in messages if m.is_error]
    result.warnings += [m for m in messages if is_warning(m)]
    result.resources = parse_resources(run.output)
    for entry in result.resources.values():
        if entry.spills:
            result.warnings.append(Message(
                tool="ptxas", severity="warning",
                text=f"'{entry.name}' spills registers: {entry.spill_store_bytes} bytes spill stores, "
                     f"{entry.spill_load_bytes} bytes spill loads",
            ))

    if _tool_ended_badly(run, "ptxas", deadline, result):
        return result
    category, first = verdict(messages)
    if category is not None and first is not None:
        result.category = category
        result.evidence = first.text
        result.evidence_line = first.line
        result.evidence_source = _source_line(ptx, first.line)
        return result
    if run.returncode != 0:
        result.category = "assemble_other"
        how = f"was killed by signal {-run.returncode}" if (run.returncode or 0) < 0 else f"exited with {run.returncode}"
        tail = run.output.strip().splitlines()[-1:] or ["no output"]
        result.evidence = f"ptxas {how}: {tail[0]}"
        return result
    if not cubin_path.is_file():
        result.category = "assemble_other"
        result.evidence = "ptxas reported success but wrote no cubin"
        return result
    result.cubin = cubin_path.read_bytes()
    return result


# Outside the job's folder, a file the sandbox shuts out reads "Permission denied" and a missing one "No
# such file or directory": told apart, they would say which paths exist on the judging machine to a
# candidate that gets a compiler to open one by a route no text check sees (a pragma built by macros).
_OPEN_FAILED = re.compile(r": (?:Permission denied|No such file or directory)\b")


def _no_oracle(text: str) -> str:
    return _OPEN_FAILED.sub(": cannot be opened", text)


def _tool_ended_badly(run: ToolRun, tool: str, deadline: Deadline, result: AssembleResult) -> bool:
    """Fill `result` when a tool hit the deadline or a cap, or was killed from outside; True then.

    A cap the candidate drove the tool into is its verdict (`resource_limit`); a deadline or a
    CPU-seconds cap depends on the machine's speed and load, so that verdict is never cached; a
    SIGKILL the judge did not send (the kernel's out-of-memory killer) is not the candidate's doing
    and raises ToolchainError."""
    if run.timed_out:
        result.timed_out = result.transient = True
        result.category = "assemble_other"
        result.evidence = f"{tool} did not finish within the candidate's {deadline.seconds:g} s"
        return True
    if run.cap_hit == "killed":
        raise ToolchainError(tool, "it, or a compiler it ran, was killed from outside the judge (SIGKILL: the "
                                   "system's out-of-memory killer?); the candidate was not judged", "")
    if run.cap_hit:
        result.category = "resource_limit"
        result.transient = run.cap_hit == "cpu_seconds"
        result.evidence = f"{tool} ran into the judge's cap on {_CAPS[run.cap_hit]} for one tool process " \
                          f"({_cap_value(run.cap_hit)}; docs/security.md)"
        return True
    if run.returncode is not None and run.returncode < 0:
        result.transient = True      # a crash: said as the candidate's verdict, never cached
    return False


_CAPS = {"address_space": "memory (address space)", "cpu_seconds": "CPU time", "file_size": "the size of a file "
         "it writes (the PTX or the cubin)"}


def _cap_value(cap: str) -> str:
    value = getattr(DEFAULT_LIMITS, cap)
    return f"{value} s" if cap == "cpu_seconds" else f"{value / (1 << 20):g} MiB"


def _nvcc_to_ptx(text: str, arch: str, tmp: Path, deadline: Deadline, result: AssembleResult,
                 log: list[str], flags: tuple[str, ...]) -> str | None:
    problem = directive_problem(text)
    if problem is not None:
        result.category = "forbidden_directive"
        result.evidence, result.evidence_line = problem
        result.evidence_source = _source_line(text, result.evidence_line)
        return None
    host_compiler()  # raises ToolchainError with an install hint when there is none
    src, out = tmp / "candidate.cu", tmp / "candidate.ptx"
    src.write_text(text, encoding="utf-8")
    nvcc = find_tool("nvcc")
    argv = [str(nvcc), f"-gencode=arch={compute_arch(arch)},code={arch}", "-ptx", *flags, src.name, "-o", out.name]
    result.commands["nvcc"] = ["nvcc", *argv[1:]]
    run = run_tool(argv, timeout=deadline.left(), cwd=tmp)
    run.stdout, run.stderr = _no_oracle(run.stdout), _no_oracle(run.stderr)
    result.sandbox = run.sandbox
    result.seconds["nvcc"] = run.seconds
    log.append(run.output)
    messages = parse_nvcc(run.output)
    result.warnings += [m for m in messages if m.severity in ("warning", "advisory")]
    if _tool_ended_badly(run, "nvcc", deadline, result):
        return None
    errors = [m for m in messages if m.is_error]
    if run.returncode != 0 or not out.is_file():
        result.errors = errors
        result.category = "cuda_compile_error"
        if errors:
            first = errors[0]
            result.evidence = first.text
            result.evidence_line = first.line
            result.evidence_source = _source_line(text, first.line)
        else:
            tail = run.output.strip().splitlines()[-1:] or [f"nvcc exited with {run.returncode}"]
            result.evidence = tail[0]
        return None
    made = out.stat().st_size
    if made > MAX_GENERATED_PTX_BYTES:
        # Constexpr tables and macros can make a few hundred bytes of source into tens of MB of PTX, which
        # would be assembled, stored with every evaluation and cached: bounded as the candidate itself is.
        result.category = "resource_limit"
        result.evidence = (f"nvcc made {made / (1 << 20):.1f} MiB of PTX from this source; the judge assembles "
                           f"and keeps at most {MAX_GENERATED_PTX_BYTES >> 20} MiB")
        return None
    return out.read_text(encoding="utf-8", errors="replace")
