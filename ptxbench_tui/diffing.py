"""Diffs of two kernels (or their launch manifests, SASS, assembler logs, evidence), noise first.

Pure functions, run in a worker thread: the event loop never waits on difflib.
Before comparing, lines can be cleaned the way Compiler Explorer does it:
debug directives (`.loc`, `.file`) and comment lines dropped, SASS addresses
and encodings dropped, registers renumbered in order of first use (so a
kernel that only renamed `%r12` to `%r7` diffs as equal), whitespace ignored.
With the noise shown, the code lines are matched first, as with the noise
hidden, and the noise lines between two matched code lines are matched with
each other (`anchored_opcodes`): the GEMM expert has 3 206 identical `// begin/
end inline asm` lines, and one difflib pass over every line spent half a
second of CPU (seconds on a busy machine) matching them with each other.

Inside a changed line the tokens that differ are found too (a second difflib
pass over the line's tokens: `setmaxnreg.inc.sync.aligned.u32 244` against
`… 240` marks only the number), and the rows where a run of changes starts
are kept as hunks for the next/previous-change keys.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ptxbench.db.browse import SampleDetail
from ptxbench.engine.inert import inert

TARGETS = ("ptx", "manifest", "sass", "log", "evidence")
TARGET_NAMES = {"ptx": "PTX", "manifest": "launch manifest", "sass": "SASS", "log": "assembler log",
                "evidence": "evidence"}


@dataclass(frozen=True)
class DiffOptions:
    target: str = "ptx"
    noise: bool = True  # drop .loc/.file/comment lines, SASS addresses and encodings, timings
    registers: bool = False  # renumber registers in order of first use
    whitespace: bool = True  # ignore whitespace differences
    context: int = 3  # lines of context around changes; -1 shows everything


Spans = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class DiffRow:
    kind: str  # equal | delete | insert | replace | skip
    left_no: int | None = None  # the line's number in its kernel (1-based)
    left: str = ""  # the line as shown: cleaned, tabs expanded
    right_no: int | None = None
    right: str = ""
    left_index: int | None = None  # the line's index in DiffResult.left_lines (for highlighting)
    right_index: int | None = None

    def changed(self, *, whitespace: bool = True) -> tuple[Spans, Spans]:
        """The spans of each side that differ from the other (a replace row's tokens), else none."""
        return changed_spans(self.left, self.right, whitespace=whitespace) if self.kind == "replace" else ((), ())


@dataclass
class DiffResult:
    """The rows to paint; a changed row's tokens are found when it is painted (DiffRow.changed)."""

    rows: list[DiffRow] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    changed: int = 0
    left_lines: list[str] = field(default_factory=list)  # every kept line of each side, as shown
    right_lines: list[str] = field(default_factory=list)
    hunks: list[int] = field(default_factory=list)  # indices of rows where a run of changes starts
    whitespace: bool = True  # whether whitespace was ignored (token changes follow it)

    @property
    def stats(self) -> str:
        if not (self.added or self.removed or self.changed):
            return "identical after filtering"
        return f"+{self.added} −{self.removed} ~{self.changed}"


def text_of(detail: SampleDetail, target: str) -> str:
    """What is diffed of a sample, as shown: its control characters written out (engine/inert.py)."""
    return inert(_raw_text_of(detail, target))


def _raw_text_of(detail: SampleDetail, target: str) -> str:
    latest = detail.latest
    if target == "ptx":
        return detail.ptx
    if target == "manifest":
        # Pretty-printed with sorted keys, so a fix that changes one launch field is one line.
        if not detail.manifest:
            return ""
        try:
            return json.dumps(json.loads(detail.manifest), indent=2, sort_keys=True)
        except ValueError:
            return detail.manifest
    if target == "sass":
        return (latest.sass if latest else None) or ""
    if target == "log":
        return (latest.assembler_log if latest else None) or ""
    if target == "evidence":
        if not latest:
            return ""
        body = {"category": latest.category, "status": latest.status, "evidence": latest.evidence,
                "required_missing": latest.required_missing, "warnings": latest.warnings}
        return json.dumps(body, indent=2, sort_keys=True, default=str)
    raise ValueError(f"unknown diff target {target!r}")


_PTX_NOISE = re.compile(r"^\s*(?:\.loc\b|\.file\b|//|$)")
_SASS_ENCODING = re.compile(r"^\s*/\* 0x[0-9a-f]+ \*/\s*$")
_SASS_ADDRESS = re.compile(r"/\*[0-9a-f]{4,}\*/\s*")
_SASS_TRAILING_ENCODING = re.compile(r"\s*/\* 0x[0-9a-f]+ \*/\s*$")
_LOG_NOISE = re.compile(r"Compile time = |^\s*$")
_PTX_REGISTER = re.compile(r"%([a-z]+)(\d+)\b")
_SASS_REGISTER = re.compile(r"\b(U?R|U?P)(\d+)\b")


def is_noise(line: str, target: str) -> bool:
    """A line the noise filter drops: a debug directive or comment (PTX), an encoding or blank
    line (SASS), a compile time or blank line (assembler log)."""
    if target == "ptx":
        return bool(_PTX_NOISE.match(line))
    if target == "sass":
        return bool(_SASS_ENCODING.match(line)) or not line.strip()
    if target == "log":
        return bool(_LOG_NOISE.search(line))
    return False


def clean_lines(text: str, opts: DiffOptions) -> list[tuple[int, str]]:
    """(1-based line number, shown text) of the lines kept."""
    out: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if opts.noise:
            if is_noise(line, opts.target):
                continue
            if opts.target == "sass":
                line = _SASS_TRAILING_ENCODING.sub("", _SASS_ADDRESS.sub("", line))
        out.append((number, line))
    if opts.registers:
        out = renumber_registers(out, _SASS_REGISTER if opts.target == "sass" else _PTX_REGISTER)
    return out


def renumber_registers(lines: list[tuple[int, str]], pattern: re.Pattern[str]) -> list[tuple[int, str]]:
    """Rename registers of each class in order of first use: %r12, %r7 → %r1, %r2."""
    names: dict[str, dict[str, int]] = {}

    def rename(m: re.Match[str]) -> str:
        cls, num = m.group(1), m.group(2)
        table = names.setdefault(cls, {})
        if num not in table:
            table[num] = len(table) + 1
        prefix = "%" if pattern is _PTX_REGISTER else ""
        return f"{prefix}{cls}{table[num]}"

    # Declarations like `.reg .b32 %r<16>;` carry no number and are left alone.
    return [(n, pattern.sub(rename, line)) for n, line in lines]


def _key(line: str, opts: DiffOptions) -> str:
    return " ".join(line.split()) if opts.whitespace else line


TAB = 4
# Letters, digits and single marks apart, so `m64n250k16` against `m64n256k16` marks `250`/`256`.
_TOKEN = re.compile(r"[A-Za-z_$%]+|\d+|\s+|[^\sA-Za-z_$%\d]")


# Above this many token pairs the middle of two lines is marked whole: difflib is quadratic, and a
# `wgmma` with 128 accumulator registers against an unrelated line is not worth 10 ms a row.
MAX_TOKEN_PAIRS = 40_000


def changed_spans(a: str, b: str, *, whitespace: bool = True) -> tuple[Spans, Spans]:
    """The character spans of `a` and of `b` that differ, token by token."""
    ta = [m.span() for m in _TOKEN.finditer(a)]
    tb = [m.span() for m in _TOKEN.finditer(b)]

    def keys(text: str, spans: list[tuple[int, int]]) -> list[str]:
        words = [text[i:j] for i, j in spans]
        return [" " if whitespace and w.isspace() else w for w in words]

    ka, kb = keys(a, ta), keys(b, tb)
    # The common head and tail first: most changed lines differ in one place.
    head = 0
    while head < min(len(ka), len(kb)) and ka[head] == kb[head]:
        head += 1
    tail = 0
    while tail < min(len(ka), len(kb)) - head and ka[-1 - tail] == kb[-1 - tail]:
        tail += 1
    ma, mb = ka[head:len(ka) - tail], kb[head:len(kb) - tail]
    if len(ma) * len(mb) > MAX_TOKEN_PAIRS:
        opcodes = [("replace", 0, len(ma), 0, len(mb))]
    else:
        opcodes = difflib.SequenceMatcher(None, ma, mb, autojunk=False).get_opcodes()
    left: list[tuple[int, int]] = []
    right: list[tuple[int, int]] = []
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            continue
        if i2 > i1:
            left.append((ta[head + i1][0], ta[head + i2 - 1][1]))
        if j2 > j1:
            right.append((tb[head + j1][0], tb[head + j2 - 1][1]))
    return tuple(left), tuple(right)


Opcode = tuple[str, int, int, int, int]
# Above this many line pairs a run between two anchors is one change, not matched line by line.
MAX_RUN_PAIRS = 40_000


def anchored_opcodes(a: list[str], b: list[str], noise: Callable[[str], bool]) -> list[Opcode]:
    """difflib's opcodes for `a` against `b`, anchored on the lines that are not noise: those are
    matched as they would be alone, and each run between two anchors (noise lines, or a changed
    stretch with the noise in it) is matched on its own, its common ends first."""
    code_a = [i for i, line in enumerate(a) if not noise(line)]
    code_b = [j for j, line in enumerate(b) if not noise(line)]
    if len(code_a) == len(a) and len(code_b) == len(b):
        return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    ops: list[Opcode] = []

    def add(tag: str, i1: int, i2: int, j1: int, j2: int) -> None:
        if i1 == i2 and j1 == j2:
            return
        if ops and (ops[-1][0] == "equal") == (tag == "equal"):  # one run of equal, or of changed, lines
            _, p1, _, q1, _ = ops.pop()
            i1, j1 = p1, q1
            if tag != "equal":
                tag = "replace" if i2 > i1 and j2 > j1 else ("delete" if i2 > i1 else "insert")
        ops.append((tag, i1, i2, j1, j2))

    def run(i1: int, i2: int, j1: int, j2: int) -> None:
        """a[i1:i2] against b[j1:j2]: common ends equal, the middle matched when small."""
        head = 0
        while i1 + head < i2 and j1 + head < j2 and a[i1 + head] == b[j1 + head]:
            head += 1
        tail = 0
        while i2 - tail > i1 + head and j2 - tail > j1 + head and a[i2 - 1 - tail] == b[j2 - 1 - tail]:
            tail += 1
        add("equal", i1, i1 + head, j1, j1 + head)
        m1, m2, n1, n2 = i1 + head, i2 - tail, j1 + head, j2 - tail
        if (m2 - m1) * (n2 - n1) <= MAX_RUN_PAIRS:
            for tag, p1, p2, q1, q2 in difflib.SequenceMatcher(None, a[m1:m2], b[n1:n2], autojunk=False).get_opcodes():
                add(tag, m1 + p1, m1 + p2, n1 + q1, n1 + q2)
        else:
            add("replace", m1, m2, n1, n2)
        add("equal", i2 - tail, i2, j2 - tail, j2)

    i = j = 0  # where the next run starts on each side
    code = difflib.SequenceMatcher(None, [a[k] for k in code_a], [b[k] for k in code_b], autojunk=False)
    for tag, c1, c2, d1, d2 in code.get_opcodes():
        if tag != "equal":
            continue  # part of the run up to the next anchor
        for ca, cb in zip(code_a[c1:c2], code_b[d1:d2]):
            run(i, ca, j, cb)
            add("equal", ca, ca + 1, cb, cb + 1)
            i, j = ca + 1, cb + 1
    run(i, len(a), j, len(b))
    return ops


class _Found(difflib.SequenceMatcher):
    """difflib's grouping into hunks with context (get_grouped_opcodes) over opcodes found elsewhere."""

    def __init__(self, opcodes: list[Opcode]) -> None:
        super().__init__(None, [], [], autojunk=False)
        self.found = opcodes

    def get_opcodes(self) -> list[Opcode]:
        return list(self.found)  # a copy: get_grouped_opcodes trims the ends in place


def diff(left_text: str, right_text: str, opts: DiffOptions = DiffOptions()) -> DiffResult:
    left = [(n, t.expandtabs(TAB)) for n, t in clean_lines(left_text, opts)]
    right = [(n, t.expandtabs(TAB)) for n, t in clean_lines(right_text, opts)]
    # With the noise hidden there is none left, and this is one difflib pass.
    matcher = _Found(anchored_opcodes([_key(t, opts) for _, t in left], [_key(t, opts) for _, t in right],
                                      lambda key: is_noise(key, opts.target)))
    result = DiffResult(left_lines=[t for _, t in left], right_lines=[t for _, t in right], whitespace=opts.whitespace)
    rows = result.rows

    def row(kind: str, a: int | None, b: int | None) -> None:
        la, lb = (left[a] if a is not None else (None, "")), (right[b] if b is not None else (None, ""))
        if kind != "equal" and (not rows or rows[-1].kind in ("equal", "skip")):
            result.hunks.append(len(rows))
        rows.append(DiffRow(kind, la[0], la[1], lb[0], lb[1], a, b))

    groups = [matcher.get_opcodes()] if opts.context < 0 else list(matcher.get_grouped_opcodes(opts.context))
    for gi, group in enumerate(groups):
        if gi:
            rows.append(DiffRow("skip"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for a, b in zip(range(i1, i2), range(j1, j2)):
                    row("equal", a, b)
            elif tag == "delete":
                result.removed += i2 - i1
                for a in range(i1, i2):
                    row("delete", a, None)
            elif tag == "insert":
                result.added += j2 - j1
                for b in range(j1, j2):
                    row("insert", None, b)
            else:  # replace: pair lines up, the longer side's rest stands alone
                n = max(i2 - i1, j2 - j1)
                result.changed += min(i2 - i1, j2 - j1)
                result.removed += max(0, (i2 - i1) - (j2 - j1))
                result.added += max(0, (j2 - j1) - (i2 - i1))
                for k in range(n):
                    a, b = i1 + k, j1 + k
                    kind = "replace" if a < i2 and b < j2 else ("delete" if a < i2 else "insert")
                    row(kind, a if a < i2 else None, b if b < j2 else None)
    return result
