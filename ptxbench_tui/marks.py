"""Which lines of a listing belong to the instruction families a task asks for.

The family table (patterns for PTX instruction names and SASS opcodes) is the
engine's; this module only finds the instruction on one line of text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ptxbench.engine.families import BY_NAME

_PTX_LINE = re.compile(
    r"^\s*(?:[A-Za-z_$][\w$]*\s*:(?!:)\s*)?(?:@!?%?[\w$]+\s+)?([a-z][\w]*(?:(?:\.|::)\w+)*)"
)
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:\{\s*)?(?:@!?U?P(?:[0-7]|T)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def ptx_opcode(line: str) -> str | None:
    m = _PTX_LINE.match(line)
    return m.group(1) if m else None


def sass_opcode(line: str) -> str | None:
    m = _SASS_LINE.match(line)
    return m.group(1) if m else None


def _known(families: Iterable[str]) -> list:
    return [BY_NAME[f] for f in families if f in BY_NAME]


def ptx_marker(families: Iterable[str]) -> Callable[[str], bool] | None:
    fams = _known(families)
    if not fams:
        return None

    def marks(line: str) -> bool:
        op = ptx_opcode(line)
        return bool(op) and any(f.matches_ptx(op) for f in fams)

    return marks


def sass_marker(families: Iterable[str]) -> Callable[[str], bool] | None:
    fams = [f for f in _known(families) if f.sass is not None]
    if not fams:
        return None

    def marks(line: str) -> bool:
        op = sass_opcode(line)
        return bool(op) and any(f.matches_sass(op) for f in fams)

    return marks


def family_of_sass(line: str, families: Iterable[str]) -> str | None:
    op = sass_opcode(line)
    if not op:
        return None
    return next((f.name for f in _known(families) if f.sass is not None and f.matches_sass(op)), None)
