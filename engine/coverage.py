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

Plain Python (no GPU): the PTX is edited as text, with every offset found by engine.inspect.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field

from ptxbench.engine.families import get_family
from ptxbench.engine.inspect import HEADER_DIRECTIVE, mask_comments, ptx_statement_spans, statement_parts

SYMBOL = "__ptxbench_coverage"            # the slots' name begins so; a suffix new each build ends it


@dataclass
class Instrumented:
    ptx: str
    symbol: str                              # the slots' module variable
    families: list[str]                      # slot i holds families[i]'s token once it ran
    tokens: list[int]
    sites: dict[str, int] = field(default_factory=dict)     # family → instructions marked


def _mark(tag: str, symbol: str, slot: int, token: int, guard: str) -> str:
    # Names new each build: no name of the candidate's can collide with them or be shadowed by them.
    a, v, t, q = (f"%ptxbench_{tag}_{x}" for x in "avtq")
    cond = guard[1:]
    compare = (f"setp.ne.and.u64 {q}, {v}, {t}, {cond};" if cond else f"setp.ne.u64 {q}, {v}, {t};")
    return (f"{{ .reg .b64 {a}, {v}, {t}; .reg .pred {q}; mov.u64 {a}, {symbol}; mov.u64 {t}, {token};"
            f" ld.global.cg.u64 {v}, [{a}+{8 * slot}]; {compare} @{q} st.global.u64 [{a}+{8 * slot}], {t}; }} ")


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
    for at, piece, depth in ptx_statement_spans(ptx):
        if depth < 1:
            continue
        offset, guard, opcode = statement_parts(piece)
        if opcode is None:
            continue
        for slot, family in enumerate(table):
            if family.matches_ptx(opcode):          # every family it belongs to (st.async is two)
                inserts.append((at + offset, _mark(tag, symbol, slot, tokens[slot], guard)))
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
            pieces.append(f"\n.visible .global .align 8 .u64 {symbol}[{len(names)}];\n")
            last = header_end
        pieces += [ptx[last:pos], text]
        last = pos
    if last <= header_end:
        pieces += [ptx[last:header_end], f"\n.visible .global .align 8 .u64 {symbol}[{len(names)}];\n"]
        last = header_end
    pieces.append(ptx[last:])
    return Instrumented("".join(pieces), symbol, names, tokens, sites)


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


def states(families: list[str], tokens: list[int], slots: list[int]) -> dict[str, str]:
    """Each family's slot read back: `ran`, `not run` (0), or `overwritten` (neither 0 nor its token)."""
    out = {}
    for name, token, value in zip(families, tokens, slots):
        out[name] = "ran" if value == token else "not run" if value == 0 else "overwritten"
    return out
