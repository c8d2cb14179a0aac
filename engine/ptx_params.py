"""A kernel's `.param` signature versus what a resolved launch manifest will pass.

`parse_entry_params` reads every `.entry` of a PTX module; `ptx_param_kinds`
says what each manifest argument needs; `param_problems` compares the two and
names `entry_missing` or `param_mismatch`. Re-exported by
`ptxbench.engine.manifest`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from ptxbench.engine.text_scan import NextChar, strip_comments

if TYPE_CHECKING:
    from ptxbench.engine.manifest import ResolvedManifest

class EntryParam(NamedTuple):
    type: str        # PTX type without the dot: u64, s32, b8, f32 …
    size: int        # bytes (array length × element size)
    align: int       # bytes (explicit .align, else the element size)


@dataclass(frozen=True)
class ParamKind:
    """What one manifest argument needs from the matching `.param`."""

    arg: str
    types: tuple[str, ...]
    size: int
    min_align: int = 1

    def accepts(self, p: EntryParam) -> bool:
        return p.type in self.types and p.size == self.size and p.align >= self.min_align

    def describe(self) -> str:
        align = f", .align {self.min_align}" if self.min_align > 1 else ""
        return f"{'/'.join('.' + t for t in self.types)} of {self.size} bytes{align}"


_PARAM_KIND = {
    "ptr": (("u64", "s64", "b64"), 8),
    "i32": (("s32", "u32", "b32"), 4),
    "u32": (("u32", "s32", "b32"), 4),
    "i64": (("s64", "u64", "b64"), 8),
    "u64": (("u64", "s64", "b64"), 8),
    "f32": (("f32", "b32"), 4),
}


def ptx_param_kinds(resolved: ResolvedManifest) -> list[list[ParamKind]]:
    """For each launch (same order), what each `.param` of its entry must be."""
    out = []
    for launch in resolved.launches:
        kinds = []
        for a in launch.args:
            if a.kind == "tmap":
                # A CUtensorMap is 128 bytes and TMA needs it 64-byte aligned.
                kinds.append(ParamKind(a.text, ("b8",), 128, 64))
            else:
                types, size = _PARAM_KIND["ptr" if a.kind == "ptr" else a.dtype]
                kinds.append(ParamKind(a.text, types, size))
        out.append(kinds)
    return out


_TYPE_BYTES = {"b8": 1, "s8": 1, "u8": 1, "b16": 2, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
               "b32": 4, "s32": 4, "u32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4,
               "b64": 8, "s64": 8, "u64": 8, "f64": 8, "b128": 16}
_ENTRY = re.compile(r"\.entry\s++([A-Za-z_$%][\w$]*+)\s*+(\()?")
# Possessive throughout: a declaration is matched once, never backtracked over.
_PARAM = re.compile(
    r"\.param\s++(?:\.align\s++(\d++)\s++)?\.(\w++)\s++"
    r"(?:\.ptr\s++(?:\.(?:global|shared|const|local)\s++)?(?:\.align\s++\d++\s++)?)?"
    r"[A-Za-z_$%][\w$]*+\s*+(?:\[\s*+(\d++)\s*+\])?$")
_MAX_DIGITS = 18     # a count or an alignment longer than this is nonsense; int() of a long one is slow


def _number(digits: str) -> int:
    return int(digits) if len(digits) <= _MAX_DIGITS else 10 ** _MAX_DIGITS


def parse_entry_params(ptx_text: str) -> dict[str, list[EntryParam]]:
    """Each `.entry` of a PTX module → its parameters in order. Unparseable params get type '?'.

    A parameter list ends at its `)`, or where the next `.entry` begins when that comes first
    (only in a module ptxas would refuse), so no text is read for two entries."""
    text = strip_comments(ptx_text, fill="space")
    closing = NextChar(text, ")")
    out: dict[str, list[EntryParam]] = {}
    entries = _ENTRY.finditer(text)      # read one ahead, never all kept: a module may hold 10⁵ of them
    following = next(entries, None)
    while (m := following) is not None:
        following = next(entries, None)
        params: list[EntryParam] = []
        if m.group(2):
            end = closing(m.end())
            end = len(text) if end < 0 else end
            if following is not None:
                end = min(end, following.start())
            for decl in (d.strip() for d in text[m.end():end].split(",")):
                if not decl:
                    continue
                pm = _PARAM.match(" ".join(decl.split()))
                if not pm or pm.group(2) not in _TYPE_BYTES:
                    params.append(EntryParam("?", 0, 0))
                    continue
                elem = _TYPE_BYTES[pm.group(2)]
                count = _number(pm.group(3)) if pm.group(3) else 1
                params.append(EntryParam(pm.group(2), elem * count, _number(pm.group(1)) if pm.group(1) else elem))
        out[m.group(1)] = params
    return out


def param_problems(resolved: ResolvedManifest, ptx_text: str) -> list[tuple[str, str]]:
    """(category, message) for every launch whose entry is missing or whose params do not fit; [] if all fit."""
    entries = parse_entry_params(ptx_text)
    problems: list[tuple[str, str]] = []
    for launch, kinds in zip(resolved.launches, ptx_param_kinds(resolved)):
        if launch.entry not in entries:
            problems.append(("entry_missing", f"no .entry {launch.entry!r} in the module "
                                              f"(entries: {', '.join(entries) or 'none'})"))
            continue
        params = entries[launch.entry]
        if len(params) != len(kinds):
            problems.append(("param_mismatch", f"{launch.entry}: the manifest passes {len(kinds)} arguments, "
                                               f"the .entry declares {len(params)} parameters"))
            continue
        for i, (p, k) in enumerate(zip(params, kinds)):
            if not k.accepts(p):
                problems.append(("param_mismatch", f"{launch.entry}: argument {i} {k.arg!r} needs {k.describe()}; "
                                                   f"the .entry declares .{p.type} of {p.size} bytes, .align {p.align}"))
    return problems
