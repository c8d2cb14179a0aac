"""Stage `assemble`: candidate code → PTX → cubin, with resources, warnings and a classified verdict.

CUDA C++ goes through `nvcc -gencode=arch=compute_XYa,code=sm_XYa -ptx` first;
the PTX that comes out is what is judged. PTX goes through `ptxas -arch=<arch>
-v`. A bad candidate never raises: it gets an assemble category and evidence.
A missing tool raises ToolchainError (that is not the candidate's fault).
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.engine.cache import Cache, content_key, source_fingerprint
from ptxbench.engine.categories import OK
from ptxbench.engine.cuda_build import DEFAULT_FLAGS as NVCC_DEFAULT_FLAGS
from ptxbench.engine.cuda_build import include_problem
from ptxbench.engine.ptxas_messages import (
    EntryResources,
    Message,
    is_warning,
    parse_nvcc,
    parse_ptxas,
    parse_resources,
    verdict,
)
from ptxbench.engine.toolchain import find_tool, host_compiler, run_tool, tool_env, tool_version

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
DEFAULT_TIMEOUT_S = 120.0
PTXAS_FLAGS: tuple[str, ...] = ("-v",)
EVIDENCE_SOURCE_CHARS = 200
# A broken 4 MB module can make ptxas print an error per line: the verdict
# reads every message, the stored report keeps the head and the tail.
MAX_LOG_CHARS = 64 << 10
MAX_MESSAGES = 200

# The classifier and this stage's own code are part of the cache key, so a
# change to either never serves a verdict that the new code would not give.
_FINGERPRINT = source_fingerprint(__file__, Path(__file__).with_name("ptxas_messages.py"),
                                  Path(__file__).with_name("cuda_build.py"))

_VERSION_RE = re.compile(r"^[ \t]*\.version[ \t]+(\d+)\.(\d+)", re.M)
_TARGET_RE = re.compile(r"^[ \t]*\.target[ \t]+([A-Za-z0-9_]+)", re.M)
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")


@dataclass
class AssembleResult:
    category: str  # "ok" or an assemble category
    language: str
    arch: str
    ptx: str = ""  # the PTX judged (nvcc's output for CUDA); "" when there is none
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
    timed_out: bool = False  # a deadline verdict depends on the machine's load: never cached

    @property
    def ok(self) -> bool:
        return self.category == OK

    def to_dict(self, *, with_ptx: bool = True) -> dict[str, Any]:
        return {
            "category": self.category,
            "language": self.language,
            "arch": self.arch,
            "ptx": self.ptx if with_ptx else None,
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
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], cubin: bytes | None) -> AssembleResult:
        return cls(
            category=d["category"],
            language=d["language"],
            arch=d["arch"],
            ptx=d.get("ptx") or "",
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
        )


def strip_comments(text: str) -> str:
    """PTX without comments, line numbers kept (a block comment keeps its newlines)."""
    text = _BLOCK_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return _LINE_COMMENT.sub("", text)


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
    if target and target in PTXAS_ARCHES and target != arch:
        return (
            "target_mismatch",
            f"the module's .target is {target}, but the task's architecture is {arch}",
            _line_of(ptx, _TARGET_RE),
        )
    return None


def _line_of(text: str, pattern: re.Pattern[str]) -> int | None:
    clean = strip_comments(text)  # keeps every newline, so line numbers agree
    m = pattern.search(clean)
    return clean.count("\n", 0, m.start()) + 1 if m else None


def _source_line(text: str, line: int | None) -> str:
    if not line:
        return ""
    lines = text.splitlines()
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
    nvcc_flags: tuple[str, ...] = NVCC_DEFAULT_FLAGS,
) -> AssembleResult:
    """Assemble one candidate for `arch` (for example "sm_90a"); cached by content hash when `cache` is given.

    `nvcc_flags` are the options nvcc gets for a CUDA candidate (engine.cuda_build.nvcc_flags)."""
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
                      nvcc_flags=list(nvcc_flags), engine=_FINGERPRINT)
    if cache is not None:
        hit = cache.get(key, blobs=("cubin",))
        if hit is not None and (hit[0].get("cubin_bytes") is None or "cubin" in hit[1]):
            report, blobs = hit
            result = AssembleResult.from_dict(report, blobs.get("cubin"))
            result.cached = True
            result.seconds = {"total": time.perf_counter() - started}
            return result

    with tempfile.TemporaryDirectory(prefix="ptxbench-asm-") as tmp:
        result = _assemble_uncached(text, language, arch, Path(tmp), timeout, versions, nvcc_flags)
    _trim(result)
    result.seconds["total"] = time.perf_counter() - started
    if cache is not None and not result.timed_out:
        blobs = {"cubin": result.cubin} if result.cubin is not None else {}
        cache.put(key, result.to_dict(), blobs)
    return result


def _trim(result: AssembleResult) -> None:
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


def _assemble_uncached(text: str, language: str, arch: str, tmp: Path, timeout: float,
                       versions: dict[str, str], nvcc_flags: tuple[str, ...]) -> AssembleResult:
    result = AssembleResult(OK, language, arch, tool_versions=dict(versions))
    log: list[str] = []
    if language == "cuda":
        ptx = _nvcc_to_ptx(text, arch, tmp, timeout, result, log, nvcc_flags)
        if ptx is None:
            result.log = "\n".join(log)
            return result
    else:
        ptx = text
    result.ptx = ptx
    result.notes = driver_notes(ptx, arch)

    problem = _header_problem(ptx, arch, versions["ptxas"])
    if problem:
        result.category, result.evidence, result.evidence_line = problem
        result.evidence_source = _source_line(ptx, result.evidence_line)
        result.log = "\n".join(log)
        return result

    ptx_path, cubin_path = tmp / "candidate.ptx", tmp / "candidate.cubin"
    ptx_path.write_text(ptx, encoding="utf-8")
    argv = [str(find_tool("ptxas")), f"-arch={arch}", *PTXAS_FLAGS, ptx_path.name, "-o", cubin_path.name]
    result.commands["ptxas"] = ["ptxas", *argv[1:]]
    run = run_tool(argv, timeout=timeout, cwd=tmp, env=tool_env())
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

    if run.timed_out:
        result.timed_out = True
        result.category = "assemble_other"
        result.evidence = f"ptxas did not finish within {timeout:g} s"
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


def _nvcc_to_ptx(text: str, arch: str, tmp: Path, timeout: float, result: AssembleResult,
                 log: list[str], flags: tuple[str, ...]) -> str | None:
    problem = include_problem(text)
    if problem is not None:
        result.category = "cuda_compile_error"
        result.evidence, result.evidence_line = problem
        result.evidence_source = _source_line(text, result.evidence_line)
        return None
    host_compiler()  # raises ToolchainError with an install hint when there is none
    src, out = tmp / "candidate.cu", tmp / "candidate.ptx"
    src.write_text(text, encoding="utf-8")
    nvcc = find_tool("nvcc")
    argv = [str(nvcc), f"-gencode=arch={compute_arch(arch)},code={arch}", "-ptx", *flags, src.name, "-o", out.name]
    result.commands["nvcc"] = ["nvcc", *argv[1:]]
    run = run_tool(argv, timeout=timeout, cwd=tmp, env=tool_env([nvcc.parent]))
    result.seconds["nvcc"] = run.seconds
    log.append(run.output)
    messages = parse_nvcc(run.output)
    result.warnings += [m for m in messages if m.severity in ("warning", "advisory")]
    if run.timed_out:
        result.timed_out = True
        result.category = "assemble_other"
        result.evidence = f"nvcc did not finish within {timeout:g} s"
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
    return out.read_text(encoding="utf-8", errors="replace")
