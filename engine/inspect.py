"""Stage `inspect`: which instruction families the PTX and the SASS use, and a verdict for every requested one.

The PTX census reads instruction names with all their qualifiers (`::` ones
included), past predicate guards and labels, ignoring comments, strings and
directives. The SASS census reads each function's listing (engine.sass). Presence
counts, never numbers: ptxas unrolls and deletes.

Requested families are judged on what runs: given the launched entries, only
their code and the functions they can reach (engine.ptx_calls) count, in the
PTX and in the SASS; the module-wide census stays as information, and a family
found only in code no launch runs is reported as missing, with where it is.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ptxbench.engine.cache import Cache
from ptxbench.engine.categories import OK
from ptxbench.engine.families import ALL_FAMILIES, BY_NAME, get_family, ptx_families, sass_families
from ptxbench.engine.ptx_calls import ptx_functions, reachable
from ptxbench.engine.sass import DISASSEMBLE_TIMEOUT_S, disassemble, sass_census
from ptxbench.engine.text_scan import replace_strings, skip, strip_comments

# The PTX is untrusted: every pattern here is matched at a position (never on a slice that is
# cut again and again), with possessive quantifiers, so reading is linear in the text.
# Directives without a semicolon. Each ends where its operands end, as ptxas reads it (whitespace,
# newlines included, separates them), not at the line's end: `.loc 1 41 9 cp.async.bulk …` is a
# directive and then an instruction, and `.address_size` may have its 64 on the next line.
# `.section` (DWARF data in braces) is left whole to its line's end.
HEADER_DIRECTIVE = re.compile(
    r"(?<![\w.$%])\.(?:version\s++\d++\.\d++|target\s++\w++(?:\s*+,\s*+\w++)*+|address_size\s++\d++)")
_LINE_DIRECTIVE = re.compile(
    r"(?<![\w.$%])(?:"
    r"\.loc\s++\d++\s++\d++\s++\d++(?:\s*+,\s*+function_name\s++[\w$.]++(?:\s*+\+\s*+\d++)?+)?+"
    r"(?:\s*+,\s*+inlined_at\s++\d++\s++\d++\s++\d++)?+"
    r"|\.file\s++\d++\s++\"[^\"\n]*+\"(?:\s*+,\s*+\d++\s*+,\s*+\d++)?+"
    r"|\.(?:version\s++\d++\.\d++|target\s++\w++(?:\s*+,\s*+\w++)*+|address_size\s++\d++)"
    r"|^[ \t]*+\.section\b[^\n]*+)", re.M)
_SPACE = re.compile(r"\s*+")
_LABEL = re.compile(r"[A-Za-z_$%][\w$]*+\s*+:(?!:)\s*+")
_GUARD = re.compile(r"@\s*+(?:!\s*+)?[%\w$]++\s++")    # ptxas reads `@ %p` and `@! %p` as well
_OPCODE = re.compile(r"[a-z]\w*+(?:(?:\.|::)\w++)*+")
_PUNCT = re.compile(r"[;{}]")


def _statement_opcode(stmt: str) -> str | None:
    return statement_parts(stmt)[2]


def statement_parts(stmt: str) -> tuple[int, str, str | None]:
    """Where a statement's instruction begins (past its labels), its guard (`@%p`, `@!%p` or ""), its opcode."""
    at = skip(_SPACE, stmt, 0)
    while (m := _LABEL.match(stmt, at)) is not None:
        at = m.end()
    guard = _GUARD.match(stmt, at)
    op = _OPCODE.match(stmt, guard.end() if guard else at)
    return at, "".join(guard.group(0).split()) if guard else "", op.group(0) if op else None


def _blank(m: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", m.group(0))     # newlines kept: every offset and line number stays


def mask_comments(ptx: str) -> str:
    """The PTX with comments and string contents turned to spaces: every offset kept. Comments
    are read left to right as ptxas reads them (engine.text_scan), an unclosed `/*` running to
    the end."""
    return replace_strings(strip_comments(ptx, fill="blank"), keep_length=True)


def _masked(ptx: str) -> str:
    """mask_comments, and the line directives too."""
    return _LINE_DIRECTIVE.sub(_blank, mask_comments(ptx))


def ptx_statement_spans(ptx: str) -> list[tuple[int, str, int]]:
    """The PTX cut into statements: (offset in `ptx`, text with comments blanked, block depth). A `{`
    opens a block unless it follows an instruction name (or an `=`) in the same statement, where it
    opens a vector operand or an initializer; depth 1 is a function's body."""
    text = _masked(ptx)
    spans: list[tuple[int, str, int]] = []
    start = begin = 0           # where the piece being read starts; where the statement began
    operand_depth = depth = 0

    def close(end: int, at_depth: int) -> None:
        piece = text[begin:end]
        if piece.strip():
            spans.append((begin, piece, at_depth))

    # Whether the statement begun at `begin` opened an operand `{`. A later `{` of the same statement
    # finds the same: what decides it is read before the first `{`, where every pattern stops.
    operand_statement = False
    for m in _PUNCT.finditer(text):
        start = m.end()
        ch = m.group(0)
        if ch == ";" and operand_depth == 0:
            close(m.start(), depth)
            begin, operand_statement = start, False
        elif ch == "{":
            if operand_depth or operand_statement:
                operand_depth += 1
                continue
            so_far = text[begin:m.start()]
            if "=" in so_far or _statement_opcode(so_far):
                operand_depth, operand_statement = 1, True
            else:
                close(m.start(), depth)
                depth += 1
                begin = start
        elif ch == "}":
            if operand_depth:
                operand_depth -= 1
            else:
                close(m.start(), depth)
                depth = max(0, depth - 1)
                begin, operand_statement = start, False
    close(len(text), depth)
    return spans


def ptx_statements(ptx: str) -> list[str]:
    """The PTX cut into statements, comments and strings gone (ptx_statement_spans)."""
    return [" ".join(piece.split()) for _at, piece, _depth in ptx_statement_spans(ptx)]


def ptx_census(ptx: str) -> Counter[str]:
    """Instruction name (opcode with qualifiers) → occurrences in the PTX text."""
    found: Counter[str] = Counter()
    for stmt in ptx_statements(ptx):
        op = _statement_opcode(stmt)
        if op:
            found[op] += 1
    return found


@dataclass
class FamilyRow:
    family: str
    kind: str  # distinctive / generic / none
    in_ptx: bool
    in_sass: bool | None  # None: the family has no SASS signature (kind "none") or there is no SASS
    ok: bool
    missing: str | None  # "ptx" or "sass" when not ok
    elsewhere: list[str] = field(default_factory=list)  # entries no launch runs that have the family

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class EntryFamilies:
    """What one entry can run: itself and the functions it reaches, with their families."""

    entry: str
    launched: bool
    reaches: list[str]
    ptx_families: list[str]
    sass_families: list[str] | None  # None: no SASS

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def family_row(name: str, ptx_found: set[str], sass_found: set[str] | None) -> FamilyRow:
    """The rule of ptx-facts.md: distinctive → the SASS decides; generic → PTX, confirmed by SASS; none → PTX."""
    fam = get_family(name)
    in_ptx = name in ptx_found
    in_sass = None if (fam.kind == "none" or sass_found is None) else name in sass_found
    if fam.kind == "distinctive":
        ok = bool(in_sass)
        missing = None if ok else ("sass" if in_ptx else "ptx")
    elif fam.kind == "generic":
        ok = in_ptx and bool(in_sass)
        missing = None if ok else ("ptx" if not in_ptx else "sass")
    else:
        ok = in_ptx
        missing = None if ok else "ptx"
    return FamilyRow(name, fam.kind, in_ptx, in_sass, ok, missing)


@dataclass
class InspectResult:
    category: str  # ok, required_missing_ptx or required_missing_sass
    ptx_opcodes: dict[str, int] = field(default_factory=dict)
    sass_opcodes: dict[str, dict[str, int]] = field(default_factory=dict)  # per function
    ptx_families: list[str] = field(default_factory=list)
    sass_families: list[str] = field(default_factory=list)
    rows: list[FamilyRow] = field(default_factory=list)
    required_missing: list[dict[str, str]] = field(default_factory=list)  # {"family", "missing": ptx|sass}
    entries: list[EntryFamilies] = field(default_factory=list)
    launched: list[str] | None = None  # the entries the verdict is about; None: the whole module
    sass: str = ""
    evidence: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.category == OK

    def to_dict(self, *, with_sass: bool = False) -> dict[str, Any]:
        return {
            "category": self.category,
            "ptx_families": list(self.ptx_families),
            "sass_families": list(self.sass_families),
            "families": [r.to_dict() for r in self.rows],
            "required_missing": [dict(x) for x in self.required_missing],
            "entries": [e.to_dict() for e in self.entries],
            "launched": list(self.launched) if self.launched is not None else None,
            "ptx_opcodes": dict(self.ptx_opcodes),
            "sass_opcodes": {k: dict(v) for k, v in self.sass_opcodes.items()},
            "sass": self.sass if with_sass else None,
            "evidence": self.evidence,
            "seconds": dict(self.seconds),
        }


def inspect(ptx: str, cubin: bytes | None, require: list[str] | tuple[str, ...] = (), *,
            sass: str | None = None, cache: Cache | None = None,
            launched: list[str] | tuple[str, ...] | None = None,
            timeout: float = DISASSEMBLE_TIMEOUT_S) -> InspectResult:
    """Census of the PTX and (when there is a cubin) the SASS, and one row per requested family.

    `launched` names the entries that run (the launch manifest's); without it the whole module
    counts. Unknown family names raise ValueError: they are the caller's mistake, not the candidate's."""
    unknown = [f for f in require if f not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown families: {', '.join(unknown)} (known: {', '.join(BY_NAME)})")
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    ptx_ops = ptx_census(ptx)
    seconds["ptx_census"] = time.perf_counter() - t0
    if sass is None and cubin is not None:
        t1 = time.perf_counter()
        sass = disassemble(cubin, cache=cache, timeout=timeout)
        seconds["nvdisasm"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    per_function = sass_census(sass) if sass is not None else {}
    found_ptx = ptx_families(set(ptx_ops))
    found_sass = sass_families({op for ops in per_function.values() for op in ops}) if sass is not None else []
    entries, outside = _entry_families(ptx, per_function if sass is not None else None, launched)
    if launched is None:
        judged_ptx, judged_sass = set(found_ptx), (set(found_sass) if sass is not None else None)
    else:
        runs = [e for e in entries if e.launched]
        judged_ptx = {f for e in runs for f in e.ptx_families}
        judged_sass = {f for e in runs for f in (e.sass_families or [])} if sass is not None else None
    rows = []
    for name in dict.fromkeys(require):
        row = family_row(name, judged_ptx, judged_sass)
        if not row.ok and launched is not None:
            row.elsewhere = [fn for fn, fams in outside.items() if name in fams]
            if name in found_ptx and row.kind != "none":
                row.missing = "sass"   # in the module's PTX, but not in the machine code that runs
        rows.append(row)
    missing = [{"family": r.family, "missing": r.missing} for r in rows if not r.ok and r.missing]
    if any(m["missing"] == "ptx" for m in missing):
        category = "required_missing_ptx"
    elif missing:
        category = "required_missing_sass"
    else:
        category = OK
    evidence = "; ".join(_missing_sentence(r, launched) for r in rows if not r.ok and r.missing)
    seconds["sass_census"] = time.perf_counter() - t2
    return InspectResult(
        category=category,
        ptx_opcodes=dict(sorted(ptx_ops.items())),
        sass_opcodes={k: dict(sorted(v.items())) for k, v in per_function.items()},
        ptx_families=found_ptx,
        sass_families=found_sass,
        rows=rows,
        required_missing=missing,
        entries=entries,
        launched=list(launched) if launched is not None else None,
        sass=sass or "",
        evidence=evidence,
        seconds=seconds,
    )


def _entry_families(ptx: str, per_function: dict[str, Counter[str]] | None,
                    launched: list[str] | tuple[str, ...] | None
                    ) -> tuple[list[EntryFamilies], dict[str, set[str]]]:
    """Each entry's reach and families; and, when `launched` is given, the families of every
    function that no launched entry reaches (by name)."""
    functions = ptx_functions(ptx)
    # Each function's families, found once: many entries may reach the same large function.
    ptx_of: dict[str, set[str]] = {}
    sass_of: dict[str, set[str]] = {}

    def families_of(names: list[str]) -> tuple[list[str], list[str] | None]:
        in_ptx: set[str] = set()
        in_sass: set[str] = set()
        for n in names:
            if n in functions:
                if n not in ptx_of:
                    ptx_of[n] = set(ptx_families(set(ptx_census(functions[n].body))))
                in_ptx |= ptx_of[n]
            if per_function is not None:
                if n not in sass_of:
                    sass_of[n] = set(sass_families(set(per_function.get(n, ()))))
                in_sass |= sass_of[n]
        in_order = [f for f in ALL_FAMILIES if f in in_ptx]
        if per_function is None:
            return in_order, None
        return in_order, [f for f in ALL_FAMILIES if f in in_sass]

    entries = []
    for name, f in functions.items():
        if f.kind == "entry":
            reach = reachable(functions, name)
            in_ptx, in_sass = families_of(reach)
            entries.append(EntryFamilies(name, launched is None or name in launched, reach, in_ptx, in_sass))
    outside: dict[str, set[str]] = {}
    if launched is not None:
        run = {n for e in entries if e.launched for n in e.reaches}
        for name in functions:
            if name not in run:
                in_ptx, in_sass = families_of([name])
                outside[name] = set(in_ptx) | set(in_sass or ())
    return entries, outside


def _missing_sentence(row: FamilyRow, launched: list[str] | tuple[str, ...] | None) -> str:
    fam = get_family(row.family)
    if row.elsewhere:
        where = ", ".join(row.elsewhere)
        runs = ", ".join(launched or ()) or "none"
        return (f"{row.family}: only in {where}, which no launch runs or reaches; the launched code ({runs}) has no "
                + (f"{fam.sass_text} in its SASS" if row.missing == "sass" else f"{fam.ptx_text} in its PTX"))
    if row.missing == "ptx":
        return f"{row.family}: no {fam.ptx_text} in the PTX" + (" of the launched code" if launched else "")
    return (f"{row.family}: {fam.ptx_text} is in the PTX but no {fam.sass_text} in the SASS "
            "(dead code, or dropped by ptxas)")
