"""A PTX module's functions and who can reach whom: what a launched entry can run.

Every `.entry` and `.func` with a body is a function. A function reaches every
other function whose name appears in its body: a `call` names its target, and
a function whose address is taken (`mov.u64 %rd1, f;`) may be called through
that pointer, so an indirect call is covered too (more reached, never less).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_HEADER = re.compile(r"\.(entry|func)\b\s*(?:\([^)]*\)\s*)?([A-Za-z_$%][\w$]*)")
_NAME = re.compile(r"[A-Za-z_$%][\w$]*")
_PUNCT = re.compile(r"[(){};]")


@dataclass(frozen=True)
class PtxFunction:
    name: str
    kind: str            # entry | func
    body: str            # the text between the body's braces, comments removed
    calls: frozenset[str]
    head: str = ""       # between the name and the body: parameters and directives (.maxntid, …)


def ptx_functions(ptx: str) -> dict[str, PtxFunction]:
    """Each function with a body, by name (a declaration without a body is left out)."""
    text = _STRING.sub('""', _COMMENTS.sub(" ", ptx))
    bodies: dict[str, tuple[str, str, str]] = {}
    pos = 0
    while m := _HEADER.search(text, pos):
        kind, name = m.group(1), m.group(2)
        start, end = _body(text, m.end())
        pos = max(end, m.end())
        if start is not None:
            bodies[name] = (kind, text[start:end], text[m.end():start - 1])
    names = set(bodies)
    out = {}
    for name, (kind, body, head) in bodies.items():
        calls = frozenset(n for n in set(_NAME.findall(body)) & names if n != name)
        out[name] = PtxFunction(name, kind, body, calls, head)
    return out


def _body(text: str, at: int) -> tuple[int | None, int]:
    """(start, end) of the brace-delimited body after a function header; (None, at) for a
    declaration that ends in `;` first. Parameter lists and directives may come between."""
    parens = 0
    start: int | None = None
    level = 0
    for m in _PUNCT.finditer(text, at):
        ch = m.group(0)
        if start is None:
            if ch == "(":
                parens += 1
            elif ch == ")":
                parens -= 1
            elif parens <= 0 and ch == ";":
                return None, m.end()
            elif parens <= 0 and ch == "{":
                start, level = m.end(), 1
        elif ch == "{":
            level += 1
        elif ch == "}":
            level -= 1
            if level == 0:
                return start, m.start()
    return start, len(text)


def reachable(functions: dict[str, PtxFunction], root: str) -> list[str]:
    """`root` and every function it can reach, root first, the rest in name order."""
    seen = {root}
    todo = [root]
    while todo:
        f = functions.get(todo.pop())
        if f is None:
            continue
        for callee in f.calls:
            if callee not in seen:
                seen.add(callee)
                todo.append(callee)
    return [root] + sorted(seen - {root})
