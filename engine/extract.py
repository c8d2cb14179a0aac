"""Stage `extract`: a free-form model response (or a file) → a candidate, or a category.

Fenced blocks are classified by their tag and, for untagged or loosely tagged
blocks, by their content. A complete kernel is a PTX module with an `.entry`
or CUDA C++ with a `__global__` function; a JSON object with `launches`,
`tensor_maps` or `scratch` is a manifest; everything else (host launchers,
prose, fragments) is noted in the evidence and set aside.

Outcomes: one kernel → ok; none → no_candidate; several different kernels or
manifests → ambiguous_candidate; a manifest that does not parse →
bad_manifest. Input that is empty, binary, over the size cap or not UTF-8 is
reported, never raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.engine.candidate import Candidate, Language
from ptxbench.engine.categories import OK
from ptxbench.engine.cuda_source import cuda_kernels, defined_names, is_host_code
from ptxbench.engine.manifest import Manifest, ManifestError, parse_manifest

MAX_RESPONSE_BYTES = 4 << 20
_BINARY_PROBE = 8000             # a NUL in the first 8000 bytes marks binary data (git's rule)
_MAX_NONPRINTABLE = 0.10

CUDA_TAGS = {"cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp"}
PTX_TAGS = {"ptx"}
MANIFEST_TAGS = {"json", "manifest", "jsonc"}

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`{]*)[^\n`]*$")
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_PTX_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$]*)")
_PTX_HEADER = re.compile(r"^\s*\.(version|target|address_size)\b", re.M)
_CUDA_HINTS = re.compile(r"__device__|asm\s+volatile|asm\s*\(|#include|__shared__|threadIdx")
_ODD_CHARS = re.compile("[\x00-\x08\x0e-\x1f\x7f\ufffd]")
# Module-scope PTX a fragment may hold to serve as helpers: functions and variables.
_PTX_DECL = re.compile(r"^\s*(?:\.(?:visible|extern|weak)\s+)*\.(?:func|global|shared|const)\b", re.M)
_MANIFEST_KEYS = re.compile(r'"(launches|tensor_maps|scratch|build)"\s*:')


@dataclass(frozen=True)
class ExtractResult:
    ok: bool
    category: str                    # "ok" or an extract category of engine/categories.py
    candidate: Candidate | None
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Block:
    index: int
    tag: str
    text: str
    closed: bool = True
    kind: str = "other"              # ptx | cuda | manifest | other
    entries: tuple[str, ...] = ()
    note: str = ""
    helper: str = ""                 # "cuda" | "ptx": code a kernel block of that language may build on

    def summary(self) -> dict[str, Any]:
        first = next((ln.strip() for ln in self.text.splitlines() if ln.strip()), "")
        d: dict[str, Any] = {"block": self.index, "tag": self.tag or None, "kind": self.kind,
                             "lines": self.text.count("\n") + 1, "first_line": first[:120]}
        if self.entries:
            d["entries"] = list(self.entries)
        if self.note:
            d["note"] = self.note
        if not self.closed:
            d["unclosed"] = True
        return d


def _fail(category: str, evidence: dict[str, Any], reason: str) -> ExtractResult:
    return ExtractResult(False, category, None, {**evidence, "reason": reason})


def _decode(data: bytes, evidence: dict[str, Any]) -> str | None:
    """UTF-8 text, or None for binary junk (evidence says why)."""
    if b"\x00" in data[:_BINARY_PROBE]:
        evidence["binary"] = f"NUL bytes in the first {min(len(data), _BINARY_PROBE)} bytes"
        return None
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - data.decode("utf-8", errors="ignore").count("\ufffd")
    if bad:
        evidence["decode"] = f"{bad} undecodable byte sequence(s) replaced with U+FFFD (input is not valid UTF-8)"
    return _check_printable(text, evidence)


def _check_printable(text: str, evidence: dict[str, Any]) -> str | None:
    if "\x00" in text[:_BINARY_PROBE]:
        evidence["binary"] = "NUL characters in the text"
        return None
    odd = len(_ODD_CHARS.findall(text))
    if text and odd / len(text) > _MAX_NONPRINTABLE:
        evidence["binary"] = f"{odd} of {len(text)} characters are control characters or undecodable"
        return None
    return text


def _scan_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, tag = m.group(1), m.group(2).lower()
        body: list[str] = []
        j, closed = i + 1, False
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) <= {fence[0]}:
                closed = True
                break
            body.append(lines[j])
            j += 1
        blocks.append(_Block(len(blocks) + 1, tag, "\n".join(body), closed))
        i = j + 1
    return blocks


def _ptx_entries(code: str) -> tuple[str, ...]:
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", code, flags=re.S)
    return tuple(dict.fromkeys(_PTX_ENTRY.findall(code)))


def _classify(block: _Block) -> None:
    text, tag = block.text, block.tag
    if tag in MANIFEST_TAGS or (not tag and text.lstrip().startswith("{")):
        if tag == "manifest" or _MANIFEST_KEYS.search(text):
            block.kind = "manifest"
        return
    ptx_entries = _ptx_entries(text)
    kernels = cuda_kernels(text)
    if ptx_entries and (tag in PTX_TAGS or _PTX_HEADER.search(text) or not kernels):
        block.kind, block.entries = "ptx", ptx_entries
    elif kernels:
        block.kind, block.entries = "cuda", kernels
    elif tag in PTX_TAGS or _PTX_HEADER.search(text):
        block.note = "PTX without an .entry (a fragment, not a kernel)"
        if not _PTX_HEADER.search(text) and _PTX_DECL.search(text):
            block.helper = "ptx"
    elif tag in CUDA_TAGS or _CUDA_HINTS.search(text):
        if is_host_code(text):
            launches = "<<<" in text or "cuLaunchKernel" in text or "cuModuleLoad" in text
            block.note = "host code that launches a kernel" if launches else "host code (main, bindings, runtime calls)"
        else:
            block.note, block.helper = "C/C++ without a __global__ kernel", "cuda"


def _trim_whole(text: str, language: Language) -> tuple[str, int]:
    """Drop prose before the code of an unfenced response; returns (code, lines dropped)."""
    start = re.compile(r"^\s*(//|/\*|\.version|\.target|\.visible|\.entry|\.global|\.shared|\.const)"
                       if language == "ptx" else
                       r'^\s*(//|/\*|#|extern\s+"C"|__global__|__device__|template|static|struct|namespace|using|typedef)')
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if start.match(line):
            return "\n".join(lines[i:]).strip("\n"), i
    return text, 0


def extract(response: str | bytes) -> ExtractResult:
    """Find the candidate in a model response. Never raises for bad input."""
    evidence: dict[str, Any] = {}
    size = len(response) if isinstance(response, bytes) else len(response.encode("utf-8", "replace"))
    evidence["size_bytes"] = size
    if size > MAX_RESPONSE_BYTES:
        return _fail("no_candidate", evidence,
                     f"the response is {size} bytes, over the {MAX_RESPONSE_BYTES}-byte (4 MiB) limit")
    text = _decode(response, evidence) if isinstance(response, bytes) else _check_printable(response, evidence)
    if text is None:
        return _fail("no_candidate", evidence, "the response is binary data, not text")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        return _fail("no_candidate", evidence, "the response is empty" if not text else "the response is only whitespace")
    thoughts = _THINK.findall(text)
    if thoughts:
        text = _THINK.sub("", text)
        evidence["reasoning_removed"] = f"{len(thoughts)} <think> section(s) set aside"

    blocks = _scan_blocks(text)
    for b in blocks:
        _classify(b)
    if blocks:
        evidence["blocks"] = [b.summary() for b in blocks]
    if any(not b.closed for b in blocks):
        evidence["unclosed_fence"] = "the last fenced block is not closed (truncated response?)"

    code_blocks = _distinct([b for b in blocks if b.kind in ("ptx", "cuda")])
    manifests = _distinct([b for b in blocks if b.kind == "manifest"])
    if code_blocks:
        chosen, note = _choose(code_blocks)
        if chosen is None:
            evidence["candidates"] = [b.summary() for b in code_blocks]
            return _fail("ambiguous_candidate", evidence,
                         f"{len(code_blocks)} different kernels; cannot tell which one to judge")
        if note:
            evidence["note"] = note
        evidence["chosen_block"] = chosen.index
        language: Language = "ptx" if chosen.kind == "ptx" else "cuda"
        helpers, aside = _helpers(blocks, chosen)
        code = _join(helpers, chosen, language)
        used = [*helpers, chosen]
        origin = (f"response: block{'s' if helpers else ''} {'+'.join(str(b.index) for b in used)}"
                  + (f" (```{chosen.tag})" if chosen.tag else ""))
    else:
        # No kernel in a fence: the response may itself be the code (a manifest may still be fenced).
        found = _whole(_outside_fences(text, blocks), evidence)
        if found is None:
            reason = ("no fenced block holds a PTX .entry or a CUDA __global__ kernel" if blocks else
                      "no fenced code block and no PTX .entry or CUDA __global__ kernel")
            return _fail("no_candidate", evidence, reason)
        language, code = found
        origin = "response: whole text"

    if len(manifests) > 1:
        evidence["manifests"] = [b.summary() for b in manifests]
        return _fail("ambiguous_candidate", evidence, f"{len(manifests)} different launch manifests")
    if code_blocks:
        roles = {**{b.index: "helpers" for b in helpers}, chosen.index: "kernel"}
        if manifests:
            roles[manifests[0].index] = "manifest"
        evidence["blocks_used"] = [{"block": i, "as": r} for i, r in sorted(roles.items())]
        evidence["blocks_set_aside"] = _set_aside(blocks, roles, aside)
    manifest: Manifest | None = None
    if manifests:
        evidence["manifest_block"] = manifests[0].index
        try:
            manifest = parse_manifest(manifests[0].text)
        except ManifestError as exc:
            return _fail("bad_manifest", evidence, str(exc))
    return ExtractResult(True, OK, Candidate(language, code, manifest, origin), evidence)


def _outside_fences(text: str, blocks: list[_Block]) -> str:
    if not blocks:
        return text
    out, inside, fence = [], False, ""
    for line in text.split("\n"):
        if not inside:
            m = _FENCE.match(line)
            if m:
                inside, fence = True, m.group(1)
                continue
            out.append(line)
        else:
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) <= {fence[0]}:
                inside = False
    return "\n".join(out)


def _helpers(blocks: list[_Block], kernel: _Block) -> tuple[list[_Block], dict[int, str]]:
    """The blocks before the kernel block that it builds on (same language), in order, and why
    other helper-like blocks are not used."""
    language = "ptx" if kernel.kind == "ptx" else "cuda"
    kernel_lines = {ln.strip() for ln in kernel.text.splitlines() if ln.strip()}
    kernel_names = defined_names(kernel.text) if language == "cuda" else set()
    used: list[_Block] = []
    aside: dict[int, str] = {}
    seen: set[str] = set()
    for b in blocks:
        if not b.helper:
            continue
        if b.index > kernel.index:
            aside[b.index] = "comes after the kernel block (only helpers before it are used)"
            continue
        if b.helper != language:
            aside[b.index] = f"{b.helper.upper()} helpers do not fit a {language.upper()} kernel"
            continue
        lines = [ln.strip() for ln in b.text.splitlines() if ln.strip()]
        key = "\n".join(lines)
        if key in seen:
            aside[b.index] = "the same as an earlier helper block"
            continue
        if lines and all(ln in kernel_lines for ln in lines):
            aside[b.index] = "already in the kernel block"
            continue
        again = sorted(defined_names(b.text) & kernel_names) if language == "cuda" else []
        if again:
            aside[b.index] = f"the kernel block defines {', '.join(again[:3])} again; its own definition is used"
            continue
        seen.add(key)
        used.append(b)
    return used, aside


def _join(helpers: list[_Block], kernel: _Block, language: Language) -> str:
    """Helpers then the kernel; PTX helpers go after the kernel module's header directives."""
    code = kernel.text.strip("\n")
    if not helpers:
        return code + "\n"
    extra = "\n\n".join(b.text.strip("\n") for b in helpers)
    if language == "cuda":
        return f"{extra}\n\n{code}\n"
    lines = code.split("\n")
    header_end = max((i + 1 for i, ln in enumerate(lines) if _PTX_HEADER.match(ln)), default=0)
    return "\n".join(lines[:header_end] + ["", extra, ""] + lines[header_end:]) + "\n"


def _set_aside(blocks: list[_Block], roles: dict[int, str], why: dict[int, str]) -> list[dict[str, Any]]:
    out = []
    for b in blocks:
        if b.index in roles:
            continue
        reason = why.get(b.index) or b.note
        if not reason:
            reason = {"ptx": "a copy of a kernel block", "cuda": "the CUDA source of the PTX block that is judged",
                      "manifest": "a copy of the manifest block"}.get(b.kind, "")
        if not reason:
            reason = f"not kernel code ({'```' + b.tag if b.tag else 'untagged'})"
        out.append({"block": b.index, "kind": b.kind, "why": reason})
    return out


def _distinct(blocks: list[_Block]) -> list[_Block]:
    """Identical blocks (ignoring surrounding whitespace and trailing spaces) count once."""
    seen: dict[str, _Block] = {}
    for b in blocks:
        key = "\n".join(ln.rstrip() for ln in b.text.strip().splitlines())
        seen.setdefault(key, b)
    return list(seen.values())


def _choose(code_blocks: list[_Block]) -> tuple[_Block | None, str]:
    if len(code_blocks) == 1:
        return code_blocks[0], ""
    ptx = [b for b in code_blocks if b.kind == "ptx"]
    cuda = [b for b in code_blocks if b.kind == "cuda"]
    # The same kernels shown as CUDA source and as the PTX it compiles to: the PTX is what is judged.
    if len(ptx) == 1 and cuda and all(set(b.entries) <= set(ptx[0].entries) for b in cuda):
        return ptx[0], "CUDA block(s) define the same kernels as the PTX block; the PTX is judged"
    return None, ""


def _whole(text: str, evidence: dict[str, Any]) -> tuple[Language, str] | None:
    """An unfenced response that is itself a PTX module or CUDA source: (language, code), or None."""
    entries, kernels = _ptx_entries(text), cuda_kernels(text)
    language: Language
    if entries and (_PTX_HEADER.search(text) or not kernels):
        language = "ptx"
    elif kernels:
        language = "cuda"
    else:
        return None
    code, dropped = _trim_whole(text, language)
    if dropped:
        evidence["trimmed"] = f"{dropped} line(s) of prose before the code set aside"
    evidence["whole_response"] = language
    return language, code.strip("\n") + "\n"


# -- files ----------------------------------------------------------------------

def _read_capped(path: Path) -> bytes:
    try:
        with path.open("rb") as fh:
            return fh.read(MAX_RESPONSE_BYTES + 1)
    except OSError as exc:
        raise OSError(f"cannot read {path}: {exc.strerror or exc}") from None


def _sidecar(path: Path) -> Path | None:
    for candidate in (path.with_name(path.stem + ".manifest.json"), path.with_name("manifest.json")):
        if candidate.is_file() and candidate.resolve() != path.resolve():
            return candidate
    return None


def load_candidate_file(path: str | Path, manifest_path: str | Path | None = None) -> ExtractResult:
    """Read a candidate from disk: .ptx → PTX, .cu/.cuh → CUDA, anything else → a model response.

    A manifest comes from `manifest_path`, else `<stem>.manifest.json` or
    `manifest.json` beside the file, else from the response itself.
    """
    path = Path(path)
    data = _read_capped(path)
    suffix = path.suffix.lower()
    if suffix in (".ptx", ".cu", ".cuh"):
        result = _load_code(path, data, "ptx" if suffix == ".ptx" else "cuda")
    else:
        result = extract(data)
        if result.candidate is not None:
            result = ExtractResult(result.ok, result.category,
                                   Candidate(result.candidate.language, result.candidate.code,
                                             result.candidate.manifest, f"file:{path} ({result.candidate.origin})"),
                                   result.evidence)
    if not result.ok or result.candidate is None:
        return result
    mpath = Path(manifest_path) if manifest_path is not None else _sidecar(path)
    if mpath is None:
        return result
    evidence = {**result.evidence, "manifest_file": str(mpath)}
    mdata = _read_capped(mpath)
    try:
        manifest = parse_manifest(mdata)
    except ManifestError as exc:
        return _fail("bad_manifest", evidence, f"{mpath}: {exc}")
    if result.candidate.manifest is not None:
        evidence["note"] = f"the manifest in {mpath.name} replaces the one in the response"
    c = result.candidate
    return ExtractResult(True, OK, Candidate(c.language, c.code, manifest, c.origin), evidence)


def _load_code(path: Path, data: bytes, language: Language) -> ExtractResult:
    evidence: dict[str, Any] = {"size_bytes": len(data), "file": str(path)}
    if len(data) > MAX_RESPONSE_BYTES:
        return _fail("no_candidate", evidence, f"the file is over the {MAX_RESPONSE_BYTES}-byte (4 MiB) limit")
    text = _decode(data, evidence)
    if text is None:
        return _fail("no_candidate", evidence, "the file is binary data, not text")
    if not text.strip():
        return _fail("no_candidate", evidence, "the file is empty" if not text else "the file is only whitespace")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    entries = _ptx_entries(text) if language == "ptx" else cuda_kernels(text)
    if entries:
        evidence["entries"] = list(entries)
    else:
        evidence["note"] = "no .entry found" if language == "ptx" else "no __global__ kernel found"
    return ExtractResult(True, OK, Candidate(language, text, None, f"file:{path}"), evidence)
