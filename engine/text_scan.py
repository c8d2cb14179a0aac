"""Reading untrusted text in time linear in its length, whatever the text.

A model's reply or a candidate kernel (up to 4 MiB) is read with these instead of
backtracking regexes. Each function moves forward through the text: `str.find`, or a
regex whose every quantifier is possessive or bounded by a literal it cannot consume,
searched from a position that only grows. A lazy `/\\*.*?\\*/` under `finditer` is what
they replace: with many unclosed `/*` every one of them is retried to the end of the
text, which is quadratic.

- `comment_spans`, `strip_comments`: `//…` and `/*…*/` comments, read left to right as
  a C or PTX lexer reads them (a `/*` inside a line comment starts nothing, and the
  reverse). Quotes are not read: a `//` inside a string starts a comment, as the
  engine has always read it.
- `join_splices`: backslash-newline line splices.
- `string_spans`: double-quoted strings on one line, with backslash escapes.
- `remove_think`: `<think>…</think>` reasoning sections.
- `NextChar`: where the next character of a set is, for scans that ask again and again.
- `skip`: where a pattern that may match nothing stops matching.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal, NamedTuple

Fill = Literal["lines", "space", "blank"]
Unclosed = Literal["rest", "text"]

_COMMENT = re.compile(r"//[^\n]*+|/\*")      # a whole line comment, or where a block comment starts
_LINE_COMMENT = re.compile(r"//[^\n]*+")
_SPLICE = re.compile(r"\\[ \t]*+\n")
# A string's body: no quote, backslash or newline, or a backslash and the character it escapes.
_STRING_BODY = re.compile(r'[^"\\\n]*+(?:\\.[^"\\\n]*+)*+')
_THINK_OPEN = re.compile(r"<think>", re.I)
_THINK_CLOSE = re.compile(r"</think>", re.I)
_SPACE = re.compile(r"\s*+")


def skip(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where `pattern` (one that may match nothing, such as `\\s*+`) stops matching from `pos`."""
    m = pattern.match(text, pos)
    return m.end() if m is not None else pos


def comment_spans(text: str, *, unclosed: Unclosed = "rest") -> Iterator[tuple[int, int]]:
    """(start, end) of every comment, left to right; a line comment ends before its newline.

    An unclosed `/*` runs to the end of the text with `unclosed="rest"` (what a compiler
    reads). With `unclosed="text"` it is not a comment at all and reading goes on after it,
    as for prose that says `src/*.cu`; no later `/*` can be closed then either, so from
    there only line comments are looked for."""
    find = _COMMENT.search
    pos = 0
    while (m := find(text, pos)) is not None:
        start, end = m.span()
        if text[start + 1] == "/":      # a line comment, whole
            yield start, end
            pos = end
            continue
        close = text.find("*/", start + 2)
        if close >= 0:
            yield start, close + 2
            pos = close + 2
        elif unclosed == "rest":
            yield start, len(text)
            return
        else:
            find, pos = _LINE_COMMENT.search, start + 1


def _blanked(piece: str) -> str:
    """Spaces for every character but newlines: offsets and line numbers kept."""
    if "\n" not in piece:
        return " " * len(piece)
    return "\n".join(" " * len(part) for part in piece.split("\n"))


def strip_comments(text: str, *, fill: Fill = "lines", unclosed: Unclosed = "rest") -> str:
    """The text with its comments replaced (`comment_spans` says what a comment is).

    fill="lines": a comment becomes its newlines only, so line numbers stay right;
    fill="space": a comment becomes one space (what a C preprocessor does);
    fill="blank": every character of a comment but newlines becomes a space, so every
    offset stays right too."""
    if fill != "blank" and "/*" not in text:    # line comments only: one substitution, no newline in any
        return _LINE_COMMENT.sub(" " if fill == "space" else "", text) if "//" in text else text
    out: list[str] = []
    last = 0
    for start, end in comment_spans(text, unclosed=unclosed):
        out.append(text[last:start])
        if fill == "space":
            out.append(" ")
        elif fill == "blank":
            out.append(_blanked(text[start:end]))
        else:
            out.append("\n" * text.count("\n", start, end))
        last = end
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


def join_splices(text: str, joiner: str = " ") -> str:
    """Backslash-newline splices (blanks allowed between them) replaced by `joiner`."""
    return _SPLICE.sub(joiner, text) if "\\" in text else text


def string_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of every complete `"…"` string: one line, `\\` escapes the next
    character (a newline excepted). The same strings as `"(?:[^"\\\\\\n]|\\\\.)*"` under
    `finditer`, found in one pass: when a string does not close, every quote before the
    place it stopped was escaped, so none of them can start a string either."""
    n = len(text)
    pos = 0
    while (start := text.find('"', pos)) >= 0:
        end = skip(_STRING_BODY, text, start + 1)
        if end < n and text[end] == '"':
            yield start, end + 1
        # else it stopped at a newline, at a backslash before one, or at the end: not a string
        pos = end + 1


def replace_strings(text: str, *, keep_length: bool) -> str:
    """Each string's contents removed (`""`) or, with keep_length, turned to spaces."""
    out: list[str] = []
    last = 0
    for start, end in string_spans(text):
        out.append(text[last:start])
        out.append('"' + " " * (end - start - 2) + '"' if keep_length else '""')
        last = end
    if not out:
        return text
    out.append(text[last:])
    return "".join(out)


class Reasoning(NamedTuple):
    text: str          # the text without its reasoning
    sections: int      # how many <think> sections were set aside, an unclosed one included
    unclosed: bool     # the last <think> is never closed: everything after it was set aside


def remove_think(text: str, *, space_after: bool = False) -> Reasoning:
    """`<think>…</think>` sections (any case) removed, with the whitespace after each when
    `space_after`. A `<think>` that is never closed makes everything after it reasoning: a
    reply cut off while it reasons has no answer, and a kernel drafted while reasoning is not
    the answer. A `</think>` without its `<think>` is left alone."""
    out: list[str] = []
    pos = sections = 0
    while (m := _THINK_OPEN.search(text, pos)) is not None:
        out.append(text[pos:m.start()])
        sections += 1
        close = _THINK_CLOSE.search(text, m.end())
        if close is None:
            return Reasoning("".join(out), sections, True)
        pos = skip(_SPACE, text, close.end()) if space_after else close.end()
    if not sections:
        return Reasoning(text, 0, False)
    out.append(text[pos:])
    return Reasoning("".join(out), sections, False)


class NextChar:
    """Where the next character of a set is, at or after a position.

    Scans that ask this again and again from growing positions (each `f(` in `f(f(f(…`
    asking where its `)` is) search each stretch of text once: the last answer is kept and
    given again for any position between the last question and that answer."""

    def __init__(self, text: str, chars: str) -> None:
        self._text = text
        self._search = re.compile("[" + re.escape(chars) + "]").search
        self._lo, self._hi = 1, 0            # no character of the set in [lo, hi); none kept yet

    def __call__(self, pos: int) -> int:
        """The index of the first character of the set at or after `pos`, or -1."""
        if not self._lo <= pos <= self._hi:
            m = self._search(self._text, pos)
            self._lo, self._hi = pos, (m.start() if m is not None else len(self._text))
        return self._hi if self._hi < len(self._text) else -1
