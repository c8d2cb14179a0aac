"""engine/inert.py: the one rule that makes text from a candidate, a model or a tool inert before a
terminal sees it, and its markup form for Textual."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from ptxbench.engine.inert import UNSAFE, escaped, inert, inert_markup, is_inert, strip

HOSTILE = [
    "\x1b]52;c;cm0gLXJmIH4K\x07",  # the clipboard
    "\x1b]0;title\x07\x1b]2;title\x1b\\",  # the window title
    "\x1b[2J\x1b[H\x1b[5A\x1b[20C",  # clear, cursor moves
    "\x1b[32mok\x1b[0m",  # a fake green ok
    "\x9b2J",  # C1 CSI
    "fine\roverwritten",
    "safe\x08\x08\x08\x08evil\x7f",
    "\u202eexe.txt\u202c \u2066iso\u2069 \u200e\u200f\u061c",
    "pay\u200bpal\u200c\u200d\u2060\ufeff",
    "\u2028\u2029\x85\x0b\x0c\x1c",  # what str.splitlines() also breaks at
    "\udc1b",  # a lone surrogate (from bytes decoded with surrogateescape)
    "\U000e0041\U000e007f",  # tag characters
]


@pytest.mark.parametrize("text", HOSTILE)
def test_nothing_a_terminal_would_act_on_is_left(text):
    out = inert(text)
    assert is_inert(out) and UNSAFE.search(out) is None
    assert out.encode("utf-8")  # a lone surrogate no longer stops the write
    assert inert(out) == out  # once is enough
    assert len(out.splitlines()) <= 1  # no line break appears where a newline was not


def test_the_escape_is_the_code_point_in_hex():
    assert inert("\x1b]52;c;aGk=\x07") == "\\x1b]52;c;aGk=\\x07"
    assert inert("a\rb\x08c\x7fd\x9be") == "a\\x0db\\x08c\\x7fd\\x9be"
    assert inert("\u202eabc\u202c") == "\\u202eabc\\u202c"
    assert inert("\U000e0041") == "\\U000e0041"
    assert [escaped(c) for c in "\x00\u2028\ud800"] == ["\\x00", "\\u2028", "\\ud800"]


def test_ordinary_text_is_unchanged():
    text = "ld.global.f32 %f1, [%rd4+0];\t// é ✓ 漢字 [green] \\ $x\n\nline three\n"
    assert inert(text) is text or inert(text) == text
    assert inert("a\r\nb\r\n") == "a\nb\n"  # a Windows line end is a line end
    assert inert(42) == "42" and inert(None) == "None"


def test_every_control_and_format_character_is_caught():
    """C0 (but tab and newline), DEL, C1, Unicode's format characters (Cf), the line and paragraph
    separators and the surrogates: all of them, whatever this Python's Unicode version adds."""
    missed = [hex(c) for c in range(sys.maxunicode + 1)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp", "Cs") and chr(c) not in "\t\n"
              and UNSAFE.match(chr(c)) is None]
    assert missed == []
    # Nothing else is: letters, marks, symbols, spaces, private use stay as they are (U+13439–U+1343F
    # are format characters from Unicode 15 on).
    extra = [hex(c) for c in range(sys.maxunicode + 1)
             if UNSAFE.match(chr(c)) and unicodedata.category(chr(c)) not in ("Cc", "Cf", "Zl", "Zp", "Cs")
             and not 0x13430 <= c <= 0x1343F]
    assert extra == []


def test_strip_drops_them_and_keeps_the_width():
    assert strip("a\x1b[2Jb\u202ec\x07") == "a[2Jbc"
    assert strip("a\tb\nc") == "a\tb\nc" and strip("a\tb\nc", keep_lines=False) == "abc"
    clean = "nothing to drop"
    assert strip(clean) is clean


MARKUP = ["[green]ok[/]", "[link=file:///etc/passwd]x[/link]", "[@click=app.quit]q[/]", "[$accent]v[/]", "[B]x[/B]",
          "[_x]y", "a[0] = b[1]", "\\[1]", "\\[green]x[/green]", "C:\\dir\\", "x\\\\", "[[b]]", "[", "]",
          "\x1b[32mok\x1b[0m [red]"]


@pytest.mark.parametrize("text", MARKUP)
def test_a_markup_value_is_shown_as_written_in_textual(text):
    from textual.content import Content

    for template in ("{}", "[b]{}[/b]", "{}[b]after[/b]", "[dim]{} · {}[/]"):
        markup = template.format(*[inert_markup(text)] * template.count("{}"))
        shown = Content.from_markup(markup)
        expected = template.replace("[b]", "").replace("[/b]", "").replace("[dim]", "").replace("[/]", "")
        assert shown.plain.replace(" ", "") == expected.format(*[inert(text)] * template.count("{}")).replace(" ", "")
        assert all(span.start >= 0 for span in shown.spans)
    assert not Content.from_markup(inert_markup(text)).spans  # no style, no link, no action


def test_rich_markup_takes_rich_s_own_escape_after_inert():
    from rich.markup import escape, render

    for text in MARKUP:
        assert not render(escape(inert(text))).spans, text
