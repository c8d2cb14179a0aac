"""A PTX module's functions and who can reach whom: what a launched entry can run.

Every `.entry` and `.func` with a body is a function. A function reaches every
other function whose name appears in its body: a `call` names its target, and
a function whose address is taken (`mov.u64 %rd1, f;`) may be called through
that pointer, so an indirect call is covered too (more reached, never less).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ptxbench.engine.text_scan import NextChar, replace_strings, skip, strip_comments

# A header is `.entry`/`.func`, an optional parenthesised return list, then the name; the list is
# read by hand (`NextChar`) so that many unclosed `(` do not each search to the end of the text.
_HEADER_WORD = re.compile(r"\.(entry|func)\b\s*+")
_SPACE = re.compile(r"\s*+")
_NAME = re.compile(r"[A-Za-z_$%][\w$]*+")
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
    text = replace_strings(strip_comments(ptx, fill="space"), keep_length=False)
    bodies: dict[str, tuple[str, str, str]] = {}
    closing = NextChar(text, ")")
    pos = 0
    while (found := _header(text, pos, closing)) is not None:
        kind, name, at, head_end = found
        start, end = _body(text, head_end)
        pos = max(end, head_end)
        if start is not None:
            bodies[name] = (kind, text[start:end], text[head_end:start - 1])
    names = set(bodies)
    out = {}
    for name, (kind, body, head) in bodies.items():
        calls = frozenset(n for n in set(_NAME.findall(body)) & names if n != name)
        out[name] = PtxFunction(name, kind, body, calls, head)
    return out


def _header(text: str, pos: int, closing: NextChar) -> tuple[str, str, int, int] | None:
    """The first function header at or after `pos`: (kind, name, where it starts, where it ends),
    the first match of `\\.(entry|func)\\b\\s*(?:\\([^)]*\\)\\s*)?NAME` as a regex search finds it."""
    after: dict[int, re.Match[str] | None] = {}    # `)` → the name after it: headers may share one `)`
    while (m := _HEADER_WORD.search(text, pos)) is not None:
        at = m.end()
        if text.startswith("(", at) and (close := closing(at + 1)) >= 0:
            if close not in after:
                after[close] = _NAME.match(text, skip(_SPACE, text, close + 1))
            if (name := after[close]) is not None:
                return m.group(1), name.group(0), m.start(), name.end()
        if (name := _NAME.match(text, at)) is not None:
            return m.group(1), name.group(0), m.start(), name.end()
        pos = m.start() + 1
    return None


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
