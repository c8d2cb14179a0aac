"""Text from a candidate, a model or a tool, made inert before a terminal sees it.

A kernel's source, a model's reply and the assembler's messages (which quote the candidate's
lines) can hold terminal control sequences: an OSC 52 clipboard write, an OSC 0/2 window title, a
CSI screen clear or cursor move, a fake coloured "ok", a carriage return or backspaces that write
over what was printed, bidi overrides that reorder what is read. Every front end passes such text
through `inert` before it is shown.

The rule: each of these characters is written as its code point in hex, the way a Python string
literal writes it, so that it is seen and does nothing:

- C0 controls except tab and newline (ESC → `\\x1b`, BEL → `\\x07`, CR → `\\x0d`, BS → `\\x08`),
  DEL (`\\x7f`) and the C1 controls U+0080–U+009F (the one-byte CSI → `\\x9b`);
- invisible formatting characters: the bidi embeddings, overrides and isolates (U+202A–U+202E,
  U+2066–U+2069 → `\\u202e`), the marks and zero-width characters (U+200B–U+200F, U+2060–U+2064,
  U+FEFF, …: every character of Unicode's category Cf), the line and paragraph separators
  U+2028/U+2029, and lone surrogates (`\\udc1b`); beyond U+FFFF as `\\U000e0041`.

A Windows line end (CR LF) is a line end: it becomes a newline. Everything else, backslashes
included, is left as it is, so ordinary text looks the same.

`inert_markup` is the same for a value put into Textual markup (a `Static`, a `Label`); `strip`
drops these characters instead (where a renderer has already laid the line out, and a longer
escape would no longer fit). This module is the engine's vocabulary: every layer may import it,
and it imports nothing outside the standard library.
"""

from __future__ import annotations

import re

# Unicode's format characters (category Cf), by range, so that importing this costs nothing.
_FORMAT = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u202a-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
_UNSAFE_CLASS = "[\x00-\x08\x0b-\x1f\x7f-\x9f" + _FORMAT + "\u2028\u2029\ud800-\udfff]"
UNSAFE = re.compile(_UNSAFE_CLASS)
_UNSAFE_OR_CRLF = re.compile("\r\n|" + _UNSAFE_CLASS)
# With tab and newline: what may not stay in a line that is already laid out.
_UNSAFE_IN_A_LINE = re.compile("[\t\n]|" + _UNSAFE_CLASS)


def escaped(char: str) -> str:
    """One character as its code point in hex: `\\x1b`, `\\u202e`, `\\U000e0041`."""
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _replace(match: re.Match[str]) -> str:
    found = match.group()
    return "\n" if found == "\r\n" else escaped(found)


def inert(text: object) -> str:
    """`text` (made a string) with every control and invisible formatting character written out
    (the rule above); text without them is returned unchanged."""
    value = text if isinstance(text, str) else str(text)
    if UNSAFE.search(value) is None:
        return value
    return _UNSAFE_OR_CRLF.sub(_replace, value)


def is_inert(text: str) -> bool:
    """Whether `text` holds nothing `inert` would write out (tab and newline allowed)."""
    return UNSAFE.search(text) is None


def strip(text: str, *, keep_lines: bool = True) -> str:
    """`text` without those characters (and without tab and newline unless `keep_lines`): for a
    line a renderer has already measured, where they take no room and their escape would."""
    pattern = UNSAFE if keep_lines else _UNSAFE_IN_A_LINE
    if pattern.search(text) is None:
        return text
    return pattern.sub("", text)


_BRACKET = re.compile(r"\[")


def inert_markup(text: object) -> str:
    """`inert(text)` ready to go into Textual markup: every `[` escaped, so nothing in it is read
    as a tag (`[green]`, `[link=…]`, `[@click=…]`, `[$accent]`). A value that ends in a backslash
    gets a space after it: Textual reads a backslash before a tag as escaping that tag.

    (Rich's markup reads backslashes differently: for rich, escape with `rich.markup.escape`
    after `inert`.)"""
    value = _BRACKET.sub(r"\\[", inert(text))
    return value + " " if value.endswith("\\") else value
