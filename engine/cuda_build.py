"""How a CUDA candidate is compiled: nvcc's default flags, and the few a manifest may add.

Real projects build with `--expt-relaxed-constexpr` (PyTorch extensions pass it
by default) and a current C++ standard (C++20 with the host g++ 12), so those
are the defaults. A candidate's manifest may add `-D` defines and flags from a
short list that change how device code is compiled, never what the compiler
may read or run: no include paths, no host-compiler options, no ptxas options
(the assembler's flags are the judge's, the same for every candidate).
What the source may `#include` is checked here too (`include_problem`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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


# A directive that reads another file: `#`, its digraph `%:` or trigraph `??=`, comments allowed
# around it. Searched anywhere in the text, not only at line starts, so that no comment or line
# splice can hide one (a match inside a string or a comment is checked too; that only costs a
# candidate a harmless-looking include it did not need).
_FILE_DIRECTIVE = re.compile(r"(?:#|%:|\?\?=)(?:\s|/\*.*?\*/)*(include_next|include|import|embed)\b", re.S)
_HEADER_NAME = re.compile(r"(?:\s|/\*.*?\*/)*(?:<([^<>\n]*)>|\"([^\"\n]*)\")", re.S)
_SPLICE = re.compile(r"\\[ \t]*\r?\n")


def include_problem(source: str) -> tuple[str, int] | None:
    """Why an include in CUDA source is refused, with its line; None when each names a header.

    Candidates may include CUDA's headers (and the C++ headers they use) by name. An absolute
    path, a `..`, or a name that macros compute could read any file of the judging machine into
    the compile, where nvcc prints its lines back into the stored log, or read an endless file
    (/dev/zero) until memory runs out."""
    # Join spliced lines first, as the preprocessor does, remembering where lines were joined.
    pieces: list[str] = []
    joined: list[int] = []
    last = removed = 0
    for s in _SPLICE.finditer(source):
        pieces.append(source[last:s.start()])
        joined.append(s.start() - removed)
        removed += s.end() - s.start()
        last = s.end()
    pieces.append(source[last:])
    text = "".join(pieces)
    for m in _FILE_DIRECTIVE.finditer(text):
        pos = m.start()
        line = text.count("\n", 0, pos) + sum(1 for j in joined if j <= pos) + 1
        name = _HEADER_NAME.match(text, m.end())
        if name is None:
            return (f"#{m.group(1)} of a name computed by macros is not allowed: "
                    "include CUDA's headers by name, as <header> or \"header\"", line)
        header = name.group(1) if name.group(1) is not None else name.group(2)
        parts = re.split(r"[\\/]+", header)
        if not header.strip() or header.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", header) \
                or ".." in parts:
            return (f"#{m.group(1)} {header!r} names a file outside the compiler's header folders: "
                    "only CUDA's own headers are available", line)
    return None
