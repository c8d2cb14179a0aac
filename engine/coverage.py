"""Did the requested instructions run? A copy of the candidate that leaves a mark when they do.

The static stage finds a requested family in the machine code; that proves it is there, not that it
runs. A kernel can keep its TMA copies in a branch no launch takes (`if (D < 0)`) and do the work with
plain loads (docs/hostile.md, red team round 3: `rmsnorm_families_never_run`). Nsight Compute can say
what ran, at seconds a candidate; this costs one more ptxas run and one launch per size.

`instrument` adds to the candidate's PTX a module-scope array of one 64-bit slot per requested family,
and before every instruction of a family a block that writes the family's token into its slot, under
the instruction's own guard (a load first, so a hot loop writes once). Tokens are random per build:
a kernel that writes into its neighbours' module memory cannot forge the mark of a family it never
ran. The GPU worker launches the instrumented copy once per size after the trials pass, on the
size's own input set, and reads the slots back; the pipeline compares them with the tokens.

A mark says a family ran, not how much of the work it did: one 16-byte bulk copy into a scratch word
would do (red team round 7, `rmsnorm_one_dummy_bulk_copy`). So the families that do the work also add
to a counter in a second slot each: wgmma its FLOPs (2·64·N·K a warpgroup instruction, a quarter from
lane 0 of each of its four warps), a non-tensor bulk copy its byte count (its size operand), a tensor
copy one (engine/pipeline.py multiplies by the largest box the launch's tensor maps hold). The pipeline
compares the counts with what the size needs (WORK_FLOOR there).

Plain Python (no GPU): the PTX is edited as text, with every offset found by engine.inspect.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from ptxbench.engine.families import get_family
from ptxbench.engine.inspect import HEADER_DIRECTIVE, mask_comments, ptx_statement_spans, statement_parts

SYMBOL = "__ptxbench_coverage"            # the slots' name begins so; a suffix new each build ends it
# What a family's counter adds up: flops (wgmma), bytes (non-tensor bulk copies), boxes (tensor copies).
WORK = {"wgmma": "flops", "bulk_copy": "bytes", "tma": "boxes"}
_WGMMA_SHAPE = re.compile(r"\.m64n(\d++)k(\d++)(?:\.|$)")
_IMMEDIATE = re.compile(r"(?:0[xX][0-9a-fA-F]++|\d++)[uU]?")
_REGISTER = re.compile(r"%[A-Za-z_$][\w$]*+")


@dataclass
class Instrumented:
    ptx: str
    symbol: str                              # the slots' module variable
    families: list[str]                      # slot i holds families[i]'s token once it ran
    tokens: list[int]
    sites: dict[str, int] = field(default_factory=dict)     # family → instructions marked
    work: list[str | None] = field(default_factory=list)    # slot len(families)+i counts families[i]'s WORK
    unmeasured: dict[str, int] = field(default_factory=dict)  # family → instructions whose work could not be read


def _mark(tag: str, symbol: str, slot: int, token: int, guard: str) -> str:
    # Names new each build: no name of the candidate's can collide with them or be shadowed by them.
    a, v, t, q = (f"%ptxbench_{tag}_{x}" for x in "avtq")
    cond = guard[1:]
    compare = (f"setp.ne.and.u64 {q}, {v}, {t}, {cond};" if cond else f"setp.ne.u64 {q}, {v}, {t};")
    return (f"{{ .reg .b64 {a}, {v}, {t}; .reg .pred {q}; mov.u64 {a}, {symbol}; mov.u64 {t}, {token};"
            f" ld.global.cg.u64 {v}, [{a}+{8 * slot}]; {compare} @{q} st.global.u64 [{a}+{8 * slot}], {t}; }} ")


def _operands(piece: str, start: int) -> list[str]:
    """The comma-separated operands of a statement from `start` to its `;`, split outside brackets."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in piece[start:]:
        if ch == ";" and depth == 0:
            break
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return out


def _increment(family: str, opcode: str, operands: list[str]) -> tuple[str, bool] | None:
    """What one thread's execution of this instruction adds to its family's counter (a register or an
    immediate) and whether only lane 0 adds it; None when the instruction does no counted work (a
    prefetch, a wgmma fence); "" when its work cannot be read (counted as none)."""
    kind = WORK.get(family)
    if kind is None or ".prefetch" in opcode:
        return None
    if kind == "flops":
        shape = _WGMMA_SHAPE.search(opcode)
        if not opcode.startswith("wgmma.mma_async"):
            return None
        return (str(2 * 64 * int(shape.group(1)) * int(shape.group(2)) // 4), True) if shape else ("", False)
    if kind == "boxes":
        return "1", False
    size = operands[2] if len(operands) > 2 else ""
    if _IMMEDIATE.fullmatch(size) or _REGISTER.fullmatch(size):
        return size, False
    return "", False


def _count(tag: str, symbol: str, slot: int, value: str, lane0: bool, guard: str) -> str:
    """Add `value` (a .u32 register or an immediate) to counter `slot`, under the instruction's guard (and
    from lane 0 alone for a warp-wide instruction)."""
    a, c, q, lane = (f"%ptxbench_{tag}_{x}" for x in ("ca", "cc", "cq", "cl"))
    widen = (f"cvt.u64.u32 {c}, {value};" if value.startswith("%")
             else f"mov.u64 {c}, {value.rstrip('uU')};")
    if not lane0:
        return (f"{{ .reg .b64 {a}, {c}; mov.u64 {a}, {symbol}; {widen} {guard} red.global.add.u64 "
                f"[{a}+{8 * slot}], {c}; }} ")
    cond = guard[1:]
    pick = f"setp.eq.and.u32 {q}, {lane}, 0, {cond};" if cond else f"setp.eq.u32 {q}, {lane}, 0;"
    return (f"{{ .reg .b64 {a}, {c}; .reg .b32 {lane}; .reg .pred {q}; mov.u64 {a}, {symbol}; {widen}"
            f" mov.u32 {lane}, %laneid; {pick} @{q} red.global.add.u64 [{a}+{8 * slot}], {c}; }} ")


def instrument(ptx: str, families: list[str] | tuple[str, ...]) -> Instrumented | None:
    """The marked copy, or None when there is nothing to mark (no family named, or a named one with no
    instruction in a function body) or no header to declare the slots after."""
    names = list(dict.fromkeys(families))
    if not names:
        return None
    table = [get_family(f) for f in names]
    tokens = [secrets.randbits(63) | 1 for _ in names]      # never 0: an untouched slot reads 0
    tag = secrets.token_hex(6)
    symbol = f"{SYMBOL}_{tag}"
    inserts: list[tuple[int, str]] = []
    sites = dict.fromkeys(names, 0)
    unmeasured = dict.fromkeys(names, 0)
    n = len(names)
    for at, piece, depth in ptx_statement_spans(ptx):
        if depth < 1:
            continue
        offset, guard, opcode = statement_parts(piece)
        if opcode is None:
            continue
        for slot, family in enumerate(table):
            if family.matches_ptx(opcode):          # every family it belongs to (st.async is two)
                text = _mark(tag, symbol, slot, tokens[slot], guard)
                step = _increment(family.name, opcode, _operands(piece, piece.index(opcode, offset) + len(opcode)))
                if step is not None and step[0]:
                    text += _count(tag, symbol, n + slot, step[0], step[1], guard)
                elif step is not None:
                    unmeasured[names[slot]] += 1
                inserts.append((at + offset, text))
                sites[names[slot]] += 1
    # The slots are declared after the whole header (found outside comments: a declaration put inside
    # one would declare nothing), each directive read to its operands' end as ptxas reads it, so a
    # `.address_size` whose 64 is on the next line is passed too.
    header_end = max((m.end() for m in HEADER_DIRECTIVE.finditer(mask_comments(ptx))), default=None)
    if header_end is None or not all(sites.values()):
        return None
    pieces, last = [], 0
    for pos, text in sorted(inserts):
        if last <= header_end < pos:
            pieces.append(ptx[last:header_end])
            pieces.append(f"\n.visible .global .align 8 .u64 {symbol}[{2 * n}];\n")
            last = header_end
        pieces += [ptx[last:pos], text]
        last = pos
    if last <= header_end:
        pieces += [ptx[last:header_end], f"\n.visible .global .align 8 .u64 {symbol}[{2 * n}];\n"]
        last = header_end
    pieces.append(ptx[last:])
    return Instrumented("".join(pieces), symbol, names, tokens, sites, [WORK.get(f) for f in names],
                        {f: k for f, k in unmeasured.items() if k})


_ENTRY = re.compile(r"(?<![\w.$%])\.entry\s++([A-Za-z_$%][\w$]*+)\s*+\(")
_MAXNREG = re.compile(r"\.maxnreg\s++(\d++)")


def cap_registers(ptx: str, caps: dict[str, int]) -> str:
    """The PTX with `.maxnreg N` on each entry named in `caps` (after its parameter list), so the
    marked copy needs no more registers than the candidate: the marks' few registers can otherwise
    take an entry over what its launch allows (1024 threads a block: 64), and the copy would not
    launch where the candidate does. An entry's own smaller `.maxnreg` is kept."""
    masked = mask_comments(ptx)
    inserts: list[tuple[int, str]] = []
    for m in _ENTRY.finditer(masked):
        cap = caps.get(m.group(1))
        close = masked.find(")", m.end())
        body = masked.find("{", m.end())
        if cap is None or close == -1 or body == -1 or close > body:
            continue
        own = _MAXNREG.search(masked, close, body)
        if own is not None and int(own.group(1)) <= cap:
            continue
        if own is not None:
            inserts.append((own.start(), " " * (own.end() - own.start())))     # replaced by the cap below
        inserts.append((close + 1, f" .maxnreg {cap}"))
    out, last = [], 0
    for pos, text in sorted(inserts):
        out += [ptx[last:pos], text]
        last = pos + (len(text) if text.isspace() else 0)
    out.append(ptx[last:])
    return "".join(out)


def work_done(families: list[str], kinds: list[str | None], slots: list[int]) -> dict[str, int]:
    """Each counted family's counter read back (slot len(families)+i), by its WORK kind."""
    n = len(families)
    return {f: slots[n + i] for i, (f, kind) in enumerate(zip(families, kinds)) if kind and len(slots) > n + i}


def states(families: list[str], tokens: list[int], slots: list[int]) -> dict[str, str]:
    """Each family's slot read back: `ran`, `not run` (0), or `overwritten` (neither 0 nor its token)."""
    out = {}
    for name, token, value in zip(families, tokens, slots):
        out[name] = "ran" if value == token else "not run" if value == 0 else "overwritten"
    return out
