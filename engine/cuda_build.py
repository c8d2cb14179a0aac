"""How a CUDA candidate is compiled: nvcc's default flags, and the few a manifest may add.

Real projects build with `--expt-relaxed-constexpr` (PyTorch extensions pass it
by default) and a current C++ standard (C++20 with the host g++ 12), so those
are the defaults. A candidate's manifest may add `-D` defines and flags from a
short list that change how device code is compiled, never what the compiler
may read or run: no include paths, no host-compiler options, no ptxas options
(the assembler's flags are the judge's, the same for every candidate).
What the source may `#include`, and the directives that name files, are checked here too
(`directive_problem`).
"""

from __future__ import annotations

import bisect
import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_STD = "-std=c++20"
DEFAULT_FLAGS: tuple[str, ...] = (DEFAULT_STD, "--expt-relaxed-constexpr")
MAX_DEFINES = 32

# Each flag a manifest may add, as a pattern over the whole flag.
ALLOWED_FLAGS: tuple[str, ...] = (
    r"-std=c\+\+(17|20)",
    r"--?use_fast_math",
    r"-lineinfo|--generate-line-info",
    r"--(ftz|prec-div|prec-sqrt|fmad)=(true|false)",
    r"--expt-relaxed-constexpr",
    r"--expt-extended-lambda|--extended-lambda",
    r"--restrict",
)
_ALLOWED = [re.compile(f"(?:{p})") for p in ALLOWED_FLAGS]
ALLOWED_TEXT = ("-std=c++17|c++20, --use_fast_math, -lineinfo, --ftz/--prec-div/--prec-sqrt/--fmad=true|false, "
                "--expt-relaxed-constexpr, --extended-lambda, --restrict")
# A define's name may not be reserved (`__CUDA_ARCH__`, `_Foo`); its value is a plain token or
# arithmetic, so it can never spell a header name or a directive.
_DEFINE = re.compile(r"^(?!__|_[A-Z])[A-Za-z_]\w{0,63}(=[\w.+\-*/%() ]{0,100})?$")


class BuildError(ValueError):
    """A manifest's `build` table asks for something the judge does not allow."""


@dataclass(frozen=True)
class BuildSpec:
    defines: tuple[str, ...] = ()      # "NAME" or "NAME=VALUE", as for -D
    flags: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.defines:
            out["defines"] = list(self.defines)
        if self.flags:
            out["flags"] = list(self.flags)
        return out


def parse_build(obj: Any, where: str = "build") -> BuildSpec:
    if not isinstance(obj, dict):
        raise BuildError(f"{where}: expected an object with defines and flags")
    unknown = [k for k in obj if k not in ("defines", "flags")]
    if unknown:
        raise BuildError(f"{where}: unknown field {unknown[0]!r} (allowed: defines, flags)")
    defines = _strings(obj.get("defines", []), f"{where}.defines")
    flags = _strings(obj.get("flags", []), f"{where}.flags")
    if len(defines) > MAX_DEFINES:
        raise BuildError(f"{where}.defines: {len(defines)} defines (at most {MAX_DEFINES})")
    for i, d in enumerate(defines):
        if not _DEFINE.match(d):
            raise BuildError(f"{where}.defines[{i}]: {d!r} is not NAME or NAME=VALUE (a non-reserved name; "
                             "a value of letters, digits, spaces and + - * / % ( ) .)")
    for i, f in enumerate(flags):
        if not any(p.fullmatch(f) for p in _ALLOWED):
            raise BuildError(f"{where}.flags[{i}]: {f!r} is not allowed (allowed: {ALLOWED_TEXT})")
    return BuildSpec(tuple(defines), tuple(flags))


def _strings(v: Any, where: str) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise BuildError(f"{where}: expected a list of strings")
    return list(v)


def nvcc_flags(build: BuildSpec | None) -> tuple[str, ...]:
    """nvcc's options for a candidate, in order: the defaults (a manifest's -std replaces the
    default one), the manifest's flags, then its defines."""
    extra = build.flags if build is not None else ()
    defaults = [f for f in DEFAULT_FLAGS if not (f.startswith("-std=") and any(x.startswith("-std=") for x in extra))]
    flags = list(dict.fromkeys([*defaults, *extra]))
    flags += [f"-D{d}" for d in (build.defines if build is not None else ())]
    return tuple(flags)


# The C and C++ standard library's headers, by name: a candidate may include them (device code
# uses <cstdint>, <type_traits>, <cuda/std/...>); asking for them reveals nothing of the machine.
_STANDARD_HEADERS = frozenset("""
algorithm any array atomic barrier bit bitset cassert cctype cerrno cfenv cfloat charconv chrono cinttypes
climits clocale cmath compare complex concepts cstdarg cstddef cstdint cstdio cstdlib cstring ctime cwchar
deque exception execution functional initializer_list iomanip ios iosfwd iostream istream iterator latch
limits list map memory mutex new numbers numeric optional ostream queue random ranges ratio semaphore set
source_location span sstream stack stdexcept string string_view tuple type_traits typeindex typeinfo
unordered_map unordered_set utility valarray variant vector version
assert.h ctype.h errno.h float.h inttypes.h limits.h math.h stdarg.h stdbool.h stddef.h stdint.h stdio.h
stdlib.h string.h time.h wchar.h
""".split())


@functools.lru_cache(maxsize=4)
def _toolchain_headers(nvcc: str) -> frozenset[str]:
    """Every header name under the compiler's include folders (and CCCL's), as `#include` names it."""
    root = Path(os.path.realpath(nvcc)).parent.parent
    folders = [root / "include", root / "include" / "cccl"]
    folders += [t / "include" for t in (root / "targets").glob("*")] + \
               [t / "include" / "cccl" for t in (root / "targets").glob("*")]
    names: set[str] = set()
    for folder in folders:
        if folder.is_dir():
            names.update(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return frozenset(names)


def allowed_headers() -> frozenset[str]:
    """What a CUDA candidate may include or ask about: CUDA's own headers and the standard library's."""
    from ptxbench.engine.toolchain import ToolchainError, find_tool

    try:
        return _STANDARD_HEADERS | _toolchain_headers(str(find_tool("nvcc")))
    except ToolchainError:
        return _STANDARD_HEADERS


# Where a directive starts: `#`, its digraph `%:` or its trigraph `??=`. Searched anywhere in the
# text, not only at line starts, so that no comment, string or line splice can hide one (a hit
# inside a string or a comment is checked too; that only costs a candidate a directive-looking
# string it did not need). Every scan below is linear in the text: single-character classes, no
# nested quantifiers, and the end of a block comment is looked up once per position at most.
_HASH = re.compile(r"#|%:|\?\?=")
_OPERATORS = re.compile(r"\b(__has_include_next|__has_include|_Pragma)\b")
_WORD = re.compile(r"[A-Za-z_]\w*|\d+")
_SPLICE = re.compile(r"\\[ \t]*\r?\n")
_FILE_DIRECTIVES = ("include", "include_next", "import", "embed")
_DIGITS = re.compile(r"\d{1,9}(?!\d)")      # a longer line number is out of range anyway: refused
_UCN = re.compile(r"\\u00([0-7][0-9A-Fa-f])|\\U000000([0-7][0-9A-Fa-f])")
_BASIC = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$#")
_BLANKS = re.compile(r"[ \t\f\v]*")
_HEADER_NAME = re.compile(r'<([^<>\n]*)>|"([^"\n]*)"')
_PRAGMA_STRING = re.compile(r'\(\s*"((?:[^"\\\n]|\\.)*)"')


class _Next:
    """The first place at or after a position where `needle` occurs, in amortised linear time over
    positions asked in (mostly) increasing order: each search is remembered, and a position between
    the start of the last search and what it found has the same answer."""

    def __init__(self, text: str, needle: str) -> None:
        self.text, self.needle = text, needle
        self._from, self._at = -1, -1

    def __call__(self, start: int) -> int:
        """The position of the match, or len(text) when there is none."""
        if not (0 <= self._from <= start and (self._at == -1 or start <= self._at)):
            self._from, self._at = start, self.text.find(self.needle, start)
        return len(self.text) if self._at == -1 else self._at


class _Scanner:
    """Blanks and block comments inside one logical line, and where a line ends."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._comment_close = _Next(text, "*/")
        self.line_end = _Next(text, "\n")

    def blank(self, i: int) -> int:
        text, n = self.text, len(self.text)
        while True:
            i = _BLANKS.match(text, i).end()   # type: ignore[union-attr]  # matches the empty string
            if not text.startswith("/*", i):
                return i
            i = min(self._comment_close(i + 2) + 2, n)


def _join_splices(source: str) -> tuple[str, list[int]]:
    """The text with backslash-newlines removed, as the preprocessor joins lines first, and the
    joined positions (to count lines of the original)."""
    pieces: list[str] = []
    joined: list[int] = []
    last = removed = 0
    for s in _SPLICE.finditer(source):
        pieces.append(source[last:s.start()])
        joined.append(s.start() - removed)
        removed += s.end() - s.start()
        last = s.end()
    pieces.append(source[last:])
    return "".join(pieces), joined


def directive_problem(source: str) -> tuple[str, int] | None:
    """Why CUDA source is refused before the compiler reads it, with its line; None when nothing is.

    A compiler quotes the source line of any file a `#line` or a line marker names in its
    diagnostics, reads any file an `#include` or `#pragma GCC dependency` names, and answers
    `__has_include` for any path. Those are refused here, as a first line; the tools run confined
    all the same (engine.sandbox), since macros can build forms no text check sees."""
    # Lines end as the compiler ends them: at CR LF, LF, or a lone CR (so `\` + CR is a splice too).
    text, joined = _join_splices(source.replace("\r\n", "\n").replace("\r", "\n"))
    scan = _Scanner(text)

    def line(pos: int) -> int:
        return text.count("\n", 0, pos) + bisect.bisect_right(joined, pos) + 1

    for u in _UCN.finditer(text):
        if chr(int(u.group(1) or u.group(2), 16)) in _BASIC:
            return (f"a universal character name for a plain letter or digit ({u.group(0)}) is not allowed: the "
                    "compiler reads it as that character, so it can spell a directive no check sees",
                    line(u.start()))

    # Where the word `dependency` stands (the only pragma that reads a file), found once.
    dependency = [m.start() for m in re.finditer(r"\bdependency\b", text)]
    allowed: frozenset[str] | None = None
    for m in _HASH.finditer(text):
        if text.startswith("##", m.start()) or text.startswith("#", m.end()) or \
                (m.start() > 0 and text[m.start() - 1] == "#"):
            continue            # token pasting (`a##b`), not a directive
        w = _WORD.match(text, scan.blank(m.end()))
        if w is None:
            continue
        word = w.group(0)
        if word.isdigit():
            return ("a line marker (`# N \"file\"`) is not allowed: it makes the compiler quote lines of the "
                    "file it names", line(m.start()))
        if word == "line":
            number = _DIGITS.match(text, scan.blank(w.end()))
            after = scan.blank(number.end()) if number else -1
            if number is None or not (after == len(text) or text.startswith(("\n", "//"), after)):
                return ("#line with a file name, or with operands macros compute, is not allowed: it makes the "
                        "compiler quote lines of the file it names (a plain `#line N` is fine)", line(m.start()))
        elif word == "pragma":
            k = bisect.bisect_left(dependency, w.end())
            if k < len(dependency) and dependency[k] < scan.line_end(w.end()):
                return ("#pragma GCC dependency is not allowed: it makes the compiler read the file it names",
                        line(m.start()))
        elif word in _FILE_DIRECTIVES:
            allowed = allowed if allowed is not None else allowed_headers()
            problem = _header_problem(text, scan.blank(w.end()), f"#{word}", allowed)
            if problem:
                return problem, line(m.start())
    for m in _OPERATORS.finditer(text):
        at = scan.blank(m.end())
        if m.group(1) == "_Pragma":
            # A string literal only: one that macros build (`_Pragma(STR(...))`) is out of this check's sight.
            literal = _PRAGMA_STRING.match(text, at)
            if literal is None:
                return ("the operand of _Pragma must be a string literal, such as _Pragma(\"unroll\"): one that "
                        "macros build could name a file", line(m.start()))
            if re.search(r"\bdependency\b", literal.group(1)):
                return ("_Pragma(\"GCC dependency …\") is not allowed: it makes the compiler read the file it names",
                        line(m.start()))
            continue
        if not text.startswith("(", at):
            return (f"{m.group(1)} must be followed by (<header>) or (\"header\")", line(m.start()))
        allowed = allowed if allowed is not None else allowed_headers()
        problem = _header_problem(text, scan.blank(at + 1), m.group(1), allowed)
        if problem:
            return problem, line(m.start())
    return None


def _header_problem(text: str, at: int, what: str, allowed: frozenset[str]) -> str | None:
    """What is wrong with the header name at `at`, or None when it is one of the allowed ones."""
    # A failed match stops at the next `<`, `>`, `"` or newline, so hits never rescan much.
    name = _HEADER_NAME.match(text, at)
    if name is None:
        return (f"{what} of a name computed by macros is not allowed: name one of CUDA's headers or the "
                "standard library's, as <header> or \"header\"")
    header = name.group(1) if name.group(1) is not None else name.group(2)
    parts = re.split(r"[\\/]+", header)
    if not header.strip() or header.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", header) \
            or ".." in parts:
        return (f"{what} {header!r} names a file outside the compiler's header folders: only CUDA's own "
                "headers and the standard library's are available")
    if header not in allowed:
        return (f"{what} {header!r} is not one of CUDA's headers or the standard library's, which are all a "
                "candidate may include or ask about")
    return None


