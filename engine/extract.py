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

The response is untrusted: every step is linear in its length (engine.text_scan), and
the evidence is bounded whatever it holds: at most MAX_LISTED blocks in each list, with
a `<list>_left_out` count for the rest, names, tags and reasons cut short, and the whole
under MAX_EVIDENCE_BYTES as JSON.
An unclosed `<think>` makes the rest of the response reasoning, set aside (the
evidence says so).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.engine.candidate import Candidate, Language
from ptxbench.engine.categories import OK
from ptxbench.engine.cuda_source import cuda_kernels, defined_names, is_host_code
from ptxbench.engine.manifest import Manifest, ManifestError, parse_manifest
from ptxbench.engine.text_scan import remove_think, strip_comments

MAX_RESPONSE_BYTES = 4 << 20
_BINARY_PROBE = 8000             # a NUL in the first 8000 bytes marks binary data (git's rule)
_MAX_NONPRINTABLE = 0.10

CUDA_TAGS = {"cuda", "cu", "cuh", "cpp", "c++", "cxx", "cc", "c", "h", "hpp"}
PTX_TAGS = {"ptx"}
MANIFEST_TAGS = {"json", "manifest", "jsonc"}

# Evidence bounds: a response of 500 000 empty fences must not become 500 000 summaries.
MAX_LISTED = 24                  # items of each evidence list; the rest are counted in `<list>_left_out`
MAX_LISTED_ENTRIES = 8           # kernel names in one block summary
MAX_NAME = 80                    # characters of a name or a tag kept in evidence (a first line keeps 120)
MAX_REASON = 1000                # characters of a reason (a manifest error may quote the manifest)
MAX_EVIDENCE_BYTES = 32 << 10    # the whole evidence as JSON; lists are cut further to fit
_LISTS = ("blocks", "candidates", "manifests", "blocks_used", "blocks_set_aside", "entries")

# Every quantifier possessive: a fence line is matched once and never backtracked over.
_FENCE = re.compile(r"^ {0,3}(`{3,}+|~{3,}+)[ \t]*+([^\s`{]*+)[^\n`]*+$")
_PTX_ENTRY = re.compile(r"\.entry\s++([A-Za-z_$%][\w$]*+)")
# `[^\S\n]` where `\s` was: a line's own blanks, so no line start rescans the blank lines after it.
_PTX_HEADER = re.compile(r"^[^\S\n]*+\.(version|target|address_size)\b", re.M)
_CUDA_HINTS = re.compile(r"__device__|asm\s++volatile|asm\s*+\(|#include|__shared__|threadIdx")
_ODD_CHARS = re.compile("[\x00-\x08\x0e-\x1f\x7f\ufffd]")
# Module-scope PTX a fragment may hold to serve as helpers: functions and variables
# (`.visible`/`.extern`/`.weak`, then `.func`/`.global`/`.shared`/`.const`), read by _has_ptx_decl.
_DECL_LINE = re.compile(r"^[^\S\n]*+\.", re.M)
_DECL_QUALIFIER = re.compile(r"\.(?:visible|extern|weak)\s++")
_DECL_KIND = re.compile(r"\.(?:func|global|shared|const)\b")
_MANIFEST_KEYS = re.compile(r'"(launches|tensor_maps|scratch|build)"\s*+:')


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
        d: dict[str, Any] = {"block": self.index, "tag": _short(self.tag) or None, "kind": self.kind,
                             "lines": self.text.count("\n") + 1, "first_line": first[:120]}
        if self.entries:
            d["entries"] = [_short(e) for e in self.entries[:MAX_LISTED_ENTRIES]]
            if len(self.entries) > MAX_LISTED_ENTRIES:
                d["entries_left_out"] = len(self.entries) - MAX_LISTED_ENTRIES
        if self.note:
            d["note"] = self.note
        if not self.closed:
            d["unclosed"] = True
        return d


def _short(text: str, most: int = MAX_NAME) -> str:
    """A name, tag or line for the evidence: at most `most` characters."""
    return text if len(text) <= most else text[:most - 1] + "…"


def _listed(evidence: dict[str, Any], key: str, items: list[Any], total: int | None = None) -> None:
    """evidence[key] = the first MAX_LISTED items; how many more there were (of `total`, when
    only the first ones were made) in `<key>_left_out`."""
    evidence[key] = items[:MAX_LISTED]
    left_out = (len(items) if total is None else total) - MAX_LISTED
    if left_out > 0:
        evidence[f"{key}_left_out"] = left_out


def _summaries(evidence: dict[str, Any], key: str, blocks: list[_Block]) -> None:
    """Block summaries under `key`, bounded as `_listed`; only the listed ones are made."""
    _listed(evidence, key, [b.summary() for b in blocks[:MAX_LISTED]], len(blocks))


def _within_budget(evidence: dict[str, Any]) -> dict[str, Any]:
    """The evidence, its longest list halved until its JSON fits MAX_EVIDENCE_BYTES: summaries
    of names in any script (six bytes a character as JSON) cannot make it large either."""
    while len(json.dumps(evidence)) > MAX_EVIDENCE_BYTES:
        key = max((k for k in _LISTS if evidence.get(k)), key=lambda k: len(json.dumps(evidence[k])), default=None)
        if key is None:
            break
        items = evidence[key]
        evidence[key] = items[:len(items) // 2]
        evidence[f"{key}_left_out"] = evidence.get(f"{key}_left_out", 0) + len(items) - len(evidence[key])
    return evidence


def _fail(category: str, evidence: dict[str, Any], reason: str) -> ExtractResult:
    return ExtractResult(False, category, None, _within_budget({**evidence, "reason": _short(reason, MAX_REASON)}))


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


def _fence(line: str) -> re.Match[str] | None:
    # A fence has a backtick or a tilde in its first four characters: most lines are let go unmatched.
    head = line[:4]
    return _FENCE.match(line) if "`" in head or "~" in head else None


def _closes(line: str, closer: str) -> bool:
    """Whether the line closes a fence opened by `closer` (as long a run of the same character)."""
    stripped = line.strip()
    return stripped.startswith(closer) and not stripped.strip(closer[0])


def _scan_blocks(text: str) -> list[_Block]:
    blocks: list[_Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _fence(lines[i])
        if not m:
            i += 1
            continue
        closer, tag = m.group(1), m.group(2).lower()
        j, closed = i + 1, False
        while j < len(lines):
            if _closes(lines[j], closer):
                closed = True
                break
            j += 1
        blocks.append(_Block(len(blocks) + 1, tag, "\n".join(lines[i + 1:j]), closed))
        i = j + 1
    return blocks


def _ptx_entries(code: str) -> tuple[str, ...]:
    if ".entry" not in code:     # removing comments never makes one
        return ()
    code = strip_comments(code, fill="space", unclosed="text")
    return tuple(dict.fromkeys(_PTX_ENTRY.findall(code)))


def _has_ptx_decl(text: str) -> bool:
    """A line that begins (after blanks) with `.visible`/`.extern`/`.weak` words, then `.func`,
    `.global`, `.shared` or `.const`. The qualifiers may run over several lines; the lines they
    cover give the same answer as the line they start on, so each is read once."""
    pos = 0
    while (m := _DECL_LINE.search(text, pos)) is not None:
        at = m.end() - 1
        while (q := _DECL_QUALIFIER.match(text, at)) is not None:
            at = q.end()
        if _DECL_KIND.match(text, at):
            return True
        pos = max(at, m.end())
    return False


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
        if not _PTX_HEADER.search(text) and _has_ptx_decl(text):
            block.helper = "ptx"
    elif tag in CUDA_TAGS or _CUDA_HINTS.search(text):
        if is_host_code(text):
            launches = "<<<" in text or "cuLaunchKernel" in text or "cuModuleLoad" in text
            block.note = "host code that launches a kernel" if launches else "host code (main, bindings, runtime calls)"
        else:
            block.note, block.helper = "C/C++ without a __global__ kernel", "cuda"


def _trim_whole(text: str, language: Language) -> tuple[str, int]:
    """Drop prose before the code of an unfenced response; returns (code, lines dropped)."""
    start = re.compile(r"^\s*+(//|/\*|\.version|\.target|\.visible|\.entry|\.global|\.shared|\.const)"
                       if language == "ptx" else
                       r'^\s*+(//|/\*|#|extern\s++"C"|__global__|__device__|template|static|struct|namespace|using|typedef)')
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
    reasoning = remove_think(text)
    if reasoning.sections:
        text = reasoning.text
        evidence["reasoning_removed"] = f"{reasoning.sections} <think> section(s) set aside" + (
            "; the last <think> is never closed, so everything after it is taken as reasoning"
            if reasoning.unclosed else "")
        if not text.strip():
            return _fail("no_candidate", evidence, "the response is only reasoning (<think> sections)")

    blocks = _scan_blocks(text)
    for b in blocks:
        _classify(b)
    if blocks:
        _summaries(evidence, "blocks", blocks)
    if any(not b.closed for b in blocks):
        evidence["unclosed_fence"] = "the last fenced block is not closed (truncated response?)"

    code_blocks = _distinct([b for b in blocks if b.kind in ("ptx", "cuda")])
    manifests = _distinct([b for b in blocks if b.kind == "manifest"])
    if code_blocks:
        chosen, note = _choose(code_blocks)
        if chosen is None:
            _summaries(evidence, "candidates", code_blocks)
            return _fail("ambiguous_candidate", evidence,
                         f"{len(code_blocks)} different kernels; cannot tell which one to judge")
        if note:
            evidence["note"] = note
        evidence["chosen_block"] = chosen.index
        language: Language = "ptx" if chosen.kind == "ptx" else "cuda"
        helpers, aside = _helpers(blocks, chosen)
        code = _join(helpers, chosen, language)
        used = [*helpers, chosen]
        origin = (f"response: block{'s' if helpers else ''} {_block_list(used)}"
                  + (f" (```{_short(chosen.tag)})" if chosen.tag else ""))
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
        _summaries(evidence, "manifests", manifests)
        return _fail("ambiguous_candidate", evidence, f"{len(manifests)} different launch manifests")
    if code_blocks:
        roles = {**{b.index: "helpers" for b in helpers}, chosen.index: "kernel"}
        if manifests:
            roles[manifests[0].index] = "manifest"
        _listed(evidence, "blocks_used", [{"block": i, "as": r} for i, r in sorted(roles.items())])
        _set_aside(evidence, blocks, roles, aside)
    manifest: Manifest | None = None
    if manifests:
        evidence["manifest_block"] = manifests[0].index
        try:
            manifest = parse_manifest(manifests[0].text)
        except ManifestError as exc:
            return _fail("bad_manifest", evidence, str(exc))
    return ExtractResult(True, OK, Candidate(language, code, manifest, origin), _within_budget(evidence))


def _outside_fences(text: str, blocks: list[_Block]) -> str:
    if not blocks:
        return text
    out, inside, closer = [], False, ""
    for line in text.split("\n"):
        if not inside:
            m = _fence(line)
            if m:
                inside, closer = True, m.group(1)
                continue
            out.append(line)
        elif _closes(line, closer):
            inside = False
    return "\n".join(out)


def _block_list(used: list[_Block]) -> str:
    """`1+2+3` for the blocks a candidate is made of; the first and last few of a long list."""
    if len(used) <= 8:
        return "+".join(str(b.index) for b in used)
    return ("+".join(str(b.index) for b in used[:4]) + "+…+" + "+".join(str(b.index) for b in used[-2:])
            + f" ({len(used)} blocks)")


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
            aside[b.index] = (f"the kernel block defines {', '.join(_short(n) for n in again[:3])} again; "
                              "its own definition is used")
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


def _set_aside(evidence: dict[str, Any], blocks: list[_Block], roles: dict[int, str], why: dict[int, str]) -> None:
    """evidence["blocks_set_aside"]: each block not used and why, bounded as `_listed`."""
    out = []
    left_out = 0
    for b in blocks:
        if b.index in roles:
            continue
        if len(out) == MAX_LISTED:
            left_out += 1
            continue
        reason = why.get(b.index) or b.note
        if not reason:
            reason = {"ptx": "a copy of a kernel block", "cuda": "the CUDA source of the PTX block that is judged",
                      "manifest": "a copy of the manifest block"}.get(b.kind, "")
        if not reason:
            reason = f"not kernel code ({'```' + _short(b.tag) if b.tag else 'untagged'})"
        out.append({"block": b.index, "kind": b.kind, "why": reason})
    evidence["blocks_set_aside"] = out
    if left_out:
        evidence["blocks_set_aside_left_out"] = left_out


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
    if len(ptx) == 1 and cuda:
        judged = set(ptx[0].entries)
        if all(set(b.entries) <= judged for b in cuda):
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
        _listed(evidence, "entries", [_short(e) for e in entries[:MAX_LISTED]], len(entries))
    else:
        evidence["note"] = "no .entry found" if language == "ptx" else "no __global__ kernel found"
    return ExtractResult(True, OK, Candidate(language, text, None, f"file:{path}"), _within_budget(evidence))
