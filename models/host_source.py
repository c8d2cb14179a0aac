"""The shape of a CUDA file that holds kernels and the host code that launches them.

Read without a compiler and in time linear in the text (it is untrusted, up to 4 MiB): comments
are blanked and the brackets inside string and character literals hidden, so that every bracket
left pairs with its partner; then the top level is walked (namespaces and `extern "C"` blocks
are entered, everything else is one item) into functions, declarations and other items. A
function is device code when its head says `__global__`, `__device__` or `constexpr`; any other
function is host code. models/host_wrapper.py reads the launches from one host function and
builds the device code from the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ptxbench.engine.text_scan import skip

_LITERAL_OR_COMMENT = re.compile(r"""//|/\*|"|'""")
_HIDDEN = str.maketrans({c: " " for c in "{}()[];,<>#=\\"})
_DIRECTIVE = re.compile(r"^[ \t]*+#(?:[^\\\n]++|\\(?:\n|.))*+", re.M)     # with its continued lines
_WS = re.compile(r"\s*+")
_NEXT = re.compile(r"[;{(\[]")
_NAMESPACE_HEAD = re.compile(r"(?:inline\s++)?namespace(?:\s++[\w:]++)?\s*+")
_EXTERN_C_HEAD = re.compile(r'extern\s*+"C"\s*+')
_FUNCTION_TAIL = re.compile(r"\)\s*+(?:(?:const|noexcept|override|final|volatile)\b\s*+|->\s*+[\w:<>*&\s]+)*+$")
_NAME_BEFORE_PAREN = re.compile(r"([A-Za-z_]\w*+)\s*+$")
_DEVICE_WORDS = re.compile(r"\b(?:__global__|__device__|constexpr|consteval)\b")
_DEFINE = re.compile(r"^[ \t]*+#[ \t]*+define[ \t]++([A-Za-z_]\w*+)(?![\w(])[ \t]*+([^\n]*+)", re.M)
_CONSTANT = re.compile(
    r"\b(?:static\s++|inline\s++)*+(?:constexpr|const)\s++(?:static\s++)?(?:[\w:]++\s++){1,3}?"
    r"([A-Za-z_]\w*+)\s*+(?:=\s*+([^;{}]++)|\{([^;{}]*+)\})\s*+;"
)
HOST_INCLUDE = re.compile(r'^[ \t]*+#[ \t]*+include[ \t]*+[<"](?:tvm/|torch/|ATen/|c10/|pybind11/|dlpack/|Python\.h)[^\n]*+',
                           re.M)
HOST_ONLY = re.compile(r"\b(?:tvm|torch|at|c10|pybind11|py)::|\bTVM_FFI_\w+|\bTVMFFI\w+|\bPYBIND11_\w+|\bTORCH_\w+")
_CONTROL = re.compile(r"(?:if|for|while|switch|do|else|try|catch)\b")
_USING = re.compile(r"\busing\s++([A-Za-z_]\w*+)\s*+=\s*+([^;{}]++);")
_TYPEDEF = re.compile(r"\btypedef\s++([^;{}]+?)\s++([A-Za-z_]\w*+)\s*+;")


def mask(code: str) -> str:
    """`code` with comments blanked and the brackets, semicolons, commas and `#` inside string and
    character literals turned to spaces; every offset and line stays where it was."""
    out: list[str] = []
    pos, n = 0, len(code)
    while (m := _LITERAL_OR_COMMENT.search(code, pos)) is not None:
        start = m.start()
        out.append(code[pos:start])
        kind = m.group()
        if kind == "//":
            end = code.find("\n", start)
            end = n if end < 0 else end
            out.append(" " * (end - start))
        elif kind == "/*":
            end = code.find("*/", start + 2)
            end = n if end < 0 else end + 2
            piece = code[start:end]
            out.append("\n".join(" " * len(part) for part in piece.split("\n")))
        else:                                   # a string or character literal, on one line
            end = start + 1
            while end < n and code[end] not in (kind, "\n"):
                end += 2 if code[end] == "\\" else 1
            end = min(end + 1, n)
            out.append(kind + code[start + 1:end - 1].translate(_HIDDEN) + code[end - 1:end] if end - start > 1
                       else code[start:end])
        pos = end
    out.append(code[pos:])
    return "".join(out)


def structure_text(masked: str) -> str:
    """The masked text with preprocessor lines blanked too (a `#define` may hold an unpaired brace)."""
    return _DIRECTIVE.sub(lambda m: "\n".join(" " * len(p) for p in m.group().split("\n")), masked)


def brackets(text: str) -> dict[int, int] | str:
    """Every opening bracket's partner, or why they do not pair."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    close_of = {")": "(", "]": "[", "}": "{"}
    for m in re.finditer(r"[()\[\]{}]", text):
        c, at = m.group(), m.start()
        if c in "([{":
            stack.append(at)
        else:
            if not stack or text[stack[-1]] != close_of[c]:
                line = text.count("\n", 0, at) + 1
                return f"an unpaired {c!r} on line {line}"
            pairs[stack.pop()] = at
    if stack:
        return f"an unclosed {text[stack[-1]]!r} on line {text.count(chr(10), 0, stack[-1]) + 1}"
    return pairs


@dataclass
class Item:
    kind: str                      # function, declaration, other
    start: int                     # where its head begins (after blanks)
    end: int                       # one past its last character
    head: str = ""                 # for a function: the text before its body
    name: str = ""                 # for a function: its name
    params: tuple[int, int] = (0, 0)   # for a function: the span inside its parameter parentheses
    body: tuple[int, int] = (0, 0)     # for a function: the span inside its braces
    extern_c: bool = False         # inside an `extern "C" { … }` block

    @property
    def device(self) -> bool:
        return bool(_DEVICE_WORDS.search(self.head))

    @property
    def kernel(self) -> bool:
        return "__global__" in self.head

    @property
    def template(self) -> bool:
        return self.head.lstrip().startswith("template")


@dataclass
class Source:
    code: str
    masked: str                    # comments and literal brackets hidden
    text: str                      # masked, preprocessor lines blanked too
    pairs: dict[int, int]
    items: list[Item] = field(default_factory=list)
    open_of: dict[int, int] = field(default_factory=dict)   # a `)`'s `(`

    def functions(self) -> list[Item]:
        return [i for i in self.items if i.kind == "function"]


def read_source(code: str) -> Source | str:
    """The items of a CUDA file, or why it cannot be read (brackets that do not pair)."""
    masked = mask(code)
    text = structure_text(masked)
    pairs = brackets(text)
    if isinstance(pairs, str):
        return pairs
    source = Source(code, masked, text, pairs, open_of={c: o for o, c in pairs.items() if text[o] == "("})
    _walk(source, 0, len(text), extern_c=False)
    return source


def _walk(src: Source, start: int, end: int, *, extern_c: bool) -> None:
    text, pairs = src.text, src.pairs
    head = skip(_WS, text, start)
    pos = head
    while pos < end:
        m = _NEXT.search(text, pos, end)
        if m is None:
            break
        at, c = m.start(), m.group()
        if c in "([":
            pos = pairs[at] + 1
            continue
        if c == ";":
            src.items.append(Item("declaration", head, at + 1, extern_c=extern_c))
            head = pos = skip(_WS, text, at + 1)
            continue
        close = pairs[at]
        words = text[head:at].strip()
        if _NAMESPACE_HEAD.fullmatch(words) or _EXTERN_C_HEAD.fullmatch(words):
            _walk(src, at + 1, close, extern_c=extern_c or words.startswith("extern"))
            head = pos = skip(_WS, text, close + 1)
            continue
        tail = _FUNCTION_TAIL.search(text, head, at)
        if tail is not None and not re.match(r"\s*+(?:struct|class|union|enum)\b", text[head:at]):
            opener = src.open_of.get(tail.start())
            name = _NAME_BEFORE_PAREN.search(text, head, opener) if opener is not None else None
            if opener is not None and name is not None and name.group(1) not in ("if", "for", "while", "switch", "return"):
                src.items.append(Item("function", head, close + 1, head=src.code[head:at], name=name.group(1),
                                      params=(opener + 1, tail.start()), body=(at + 1, close), extern_c=extern_c))
                head = pos = skip(_WS, text, close + 1)
                continue
        # a struct, an enum, an initialiser list: one item up to the `;` after its braces
        semi = text.find(";", close + 1, end)
        stop = end if semi < 0 else semi + 1
        src.items.append(Item("other", head, stop, extern_c=extern_c))
        head = pos = skip(_WS, text, stop)


def split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` outside any bracket (and outside `<…>` of a template argument list)."""
    parts, depth, last = [], 0, 0
    angle = 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "<" and depth == 0 and re.search(r"[A-Za-z_]\s*$", text[max(0, i - 40):i]) and "<<" not in text[i:i + 2]:
            angle += 1
        elif c == ">" and angle and depth == 0 and text[i - 1:i + 1] != "->":
            angle -= 1
        elif c == sep and depth == 0 and angle == 0:
            parts.append(text[last:i])
            last = i + 1
    parts.append(text[last:])
    return [p.strip() for p in parts]


def constants(src: Source) -> dict[str, str | None]:
    """Names the file defines once as a constant (`#define N 128`, `constexpr int BM = 128;`,
    `static const int T{256};`) → their expression text; a name defined twice maps to None."""
    found: dict[str, str | None] = {}

    def add(name: str, value: str) -> None:
        value = value.strip()
        found[name] = value if name not in found or found[name] == value else None

    for m in _DEFINE.finditer(src.masked):
        if m.group(2).strip():
            add(m.group(1), m.group(2))
    for item in src.items:
        if item.kind == "function":       # a function's locals are not the file's constants
            continue
        for m in _CONSTANT.finditer(src.text, item.start, item.end):
            add(m.group(1), m.group(2) if m.group(2) is not None else m.group(3))
    return found


def aliases(src: Source) -> dict[str, str]:
    """`using X = T;` and `typedef T X;` → {X: T}."""
    out: dict[str, str] = {}
    for m in _USING.finditer(src.text):
        out[m.group(1)] = m.group(2).strip()
    for m in _TYPEDEF.finditer(src.text):
        out[m.group(2)] = m.group(1).strip()
    return out


@dataclass(frozen=True)
class Param:
    type: str
    name: str

    @property
    def pointer(self) -> bool:
        return "*" in self.type


def params(src: Source, item: Item) -> list[Param]:
    """A function's parameters (defaults dropped)."""
    inside = src.text[item.params[0]:item.params[1]].strip()
    if not inside or inside == "void":
        return []
    out = []
    for part in split_top(inside):
        part = part.split("=", 1)[0].strip()
        m = re.search(r"([A-Za-z_]\w*+)\s*+(?:\[[^\]]*+\]\s*+)*+$", part)
        if m is None or m.start() == 0:
            out.append(Param(part, ""))
        else:
            out.append(Param(part[:m.start()].strip(), m.group(1)))
    return out


def statements(text: str, start: int, end: int, pairs: dict[int, int]) -> list[tuple[int, int, bool]]:
    """(start, end, is it a branch, loop or block) of each statement in [start, end)."""
    out: list[tuple[int, int, bool]] = []
    pos = start
    next_char = _NEXT
    while pos < end:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos >= end:
            break
        first = pos
        control = bool(_CONTROL.match(text, first)) or text[first] == "{"
        scan = first
        while True:
            m = next_char.search(text, scan, end)
            if m is None:
                out.append((first, end, control))
                return out
            at, c = m.start(), m.group()
            if c in "([":
                scan = pairs[at] + 1
                continue
            if c == ";":
                out.append((first, at, control))
                pos = at + 1
                break
            close = pairs[at]                         # `{`
            if control and not re.match(r"\s*+(?:else\b|while\b|catch\b)", text[close + 1:end]):
                out.append((first, close + 1, True))
                pos = close + 1
                break
            scan = close + 1                          # an initialiser, a lambda, or the branch goes on
    return out


def device_code(src: Source, kernels: dict[str, Item]) -> tuple[str, str | None]:
    """The file without its host-only functions, host declarations and host includes; each nameable kernel
    declared `extern "C"`. Also why the rest cannot stand alone, if it cannot."""
    edits: list[tuple[int, int, str]] = []          # (start, end, replacement)
    for item in src.items:
        head = src.text[item.start:item.end] if item.kind != "function" else item.head
        template = head.lstrip().startswith("template")
        if item.kind == "function" and not item.device:
            edits.append((item.start, item.end, _lines_of(src.code[item.start:item.end])))
        elif item.kind == "declaration" and HOST_ONLY.search(src.text[item.start:item.end]):
            edits.append((item.start, item.end, _lines_of(src.code[item.start:item.end])))
        elif (item.kind in ("function", "declaration") and "__global__" in head and not template
              and not item.extern_c and 'extern "C"' not in head):
            name = item.name if item.kind == "function" else ""
            if item.kind == "function" and (name not in kernels or kernels[name] is not item):
                continue                               # a name declared twice (overloads): left as it is
            static = re.search(r"\bstatic\s++(?=[^;]*\b__global__)", src.text[item.start:item.end])
            if static:
                edits.append((item.start + static.start(), item.start + static.end(), ""))
            edits.append((item.start, item.start, 'extern "C" '))
    for m in HOST_INCLUDE.finditer(src.masked):
        edits.append((m.start(), m.end(), ""))
    edits.sort(key=lambda e: (e[0], e[1]))              # an insertion before a removal that starts there
    out, last = [], 0
    for start, end, new in edits:
        if start < last:
            continue
        out.append(src.code[last:start])
        out.append(new)
        last = end
    out.append(src.code[last:])
    code = "".join(out)
    kept = read_source(code)
    remaining = HOST_ONLY.search(kept.text if isinstance(kept, Source) else code)
    why = None
    if remaining:
        line = code.count("\n", 0, remaining.start()) + 1
        why = (f"the device code uses {remaining.group()} (line {line}): only CUDA's own headers are there to "
               "compile it")
    return code, why


def _lines_of(text: str) -> str:
    """What a removed piece leaves: its newlines, so the lines after it keep their numbers."""
    return "\n" * text.count("\n")
