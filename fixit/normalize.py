"""PTX normalised for comparing candidates: near-identical pairs are found here.

Two kernels that differ only in comments, `.loc`/`.file` debug lines,
whitespace or register numbering are the same kernel. `normalize_ptx`
strips the noise and renumbers registers in order of first use (`%r12` →
`%r0`), so an exact duplicate has the same hash; `abstract_lines` goes
further and drops register numbers altogether (`%r#`), which keeps one
inserted instruction from renumbering every line after it — the basis of the
near-duplicate test (shingle Jaccard).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"//[^\n]*")
_DEBUG_LINE = re.compile(r"^\s*\.(loc|file)\b[^\n]*$", re.M)
_SPACE = re.compile(r"[ \t]+")
# A register: %name followed by digits (%r12, %rd3, %f7, %p1, %fd2, %rs4, %hh1 …).
# Special registers (%tid.x, %ctaid.y, %laneid) have no trailing digits and are left alone.
_REG = re.compile(r"%([A-Za-z_]+)(\d+)\b")
_TOKEN = re.compile(r"%?[A-Za-z_.$][\w.$:]*|\d+(?:\.\d+)?|[^\s\w]")

SHINGLE = 5  # tokens per shingle


def strip_noise(code: str) -> str:
    """Comments, debug lines and blank lines gone; runs of spaces collapsed; lines trimmed."""
    text = _BLOCK_COMMENT.sub(" ", code.replace("\r\n", "\n"))
    text = _LINE_COMMENT.sub("", text)
    text = _DEBUG_LINE.sub("", text)
    lines = (_SPACE.sub(" ", ln).strip() for ln in text.split("\n"))
    return "\n".join(ln for ln in lines if ln)


def renumber_registers(text: str) -> str:
    """Registers renumbered per class in order of first use: `%rd7, %rd3` → `%rd0, %rd1`."""
    seen: dict[str, dict[str, int]] = {}

    def sub(m: re.Match[str]) -> str:
        cls, num = m.group(1), m.group(2)
        table = seen.setdefault(cls, {})
        if num not in table:
            table[num] = len(table)
        return f"%{cls}{table[num]}"

    return _REG.sub(sub, text)


def manifest_lines(manifest: dict[str, Any] | None) -> list[str]:
    """The launch manifest as stable text lines (it is part of the candidate)."""
    if not manifest:
        return []
    return ["@manifest " + json.dumps(manifest, sort_keys=True, separators=(",", ":"))]


def normalize_ptx(code: str, manifest: dict[str, Any] | None = None) -> str:
    """Comments and debug lines gone, whitespace collapsed, registers renumbered, manifest appended."""
    body = renumber_registers(strip_noise(code))
    return "\n".join([body, *manifest_lines(manifest)]) if manifest else body


def abstract_lines(code: str, manifest: dict[str, Any] | None = None) -> list[str]:
    """Normalised lines with register numbers dropped (`%r#`)."""
    text = _REG.sub(lambda m: f"%{m.group(1)}#", strip_noise(code))
    return text.split("\n") + manifest_lines(manifest) if text else manifest_lines(manifest)


def content_key(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def shingles(lines: Iterable[str], k: int = SHINGLE) -> frozenset[int]:
    """Hashes of every run of k tokens (the whole text as one shingle when it is shorter)."""
    tokens = [t for ln in lines for t in _TOKEN.findall(ln)]
    if not tokens:
        return frozenset()
    if len(tokens) <= k:
        return frozenset({hash(tuple(tokens))})
    return frozenset(hash(tuple(tokens[i:i + k])) for i in range(len(tokens) - k + 1))


def jaccard(a: frozenset[int] | set[Any], b: frozenset[int] | set[Any]) -> float:
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def could_reach(a: int, b: int, threshold: float) -> bool:
    """Jaccard(A, B) ≤ min/max of the sizes: a cheap test before counting the intersection."""
    if a == 0 and b == 0:
        return True
    return min(a, b) / max(a, b) >= threshold


def edit_signature(failed_lines: list[str], fixed_lines: list[str]) -> frozenset[str]:
    """What the fix changes, as a set: `-line#k` for each line it removes and `+line#k` for
    each it adds (k counts repeats). Order-free, so it costs one pass over each side."""
    before, after = Counter(failed_lines), Counter(fixed_lines)
    out: set[str] = set()
    for line, n in (before - after).items():
        out.update(f"-{line}#{i}" for i in range(n))
    for line, n in (after - before).items():
        out.update(f"+{line}#{i}" for i in range(n))
    return frozenset(out)
