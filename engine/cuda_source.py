"""Reading CUDA C++ source without compiling it: its kernels, whether it is host code, what it defines.

Kernels are found through `__global__` and through object-like macros that
expand to it (`#define KGLOBAL __global__`, then `KGLOBAL void k(...)`); a
`#define` line itself never counts as a kernel. A function-like macro that
expands to `__global__` (`#define KERNEL(name) __global__ void name`) names its
kernel through an argument: the first identifier given to it is taken as the
name. Nothing here runs a preprocessor, so a name a macro computes (token
pasting) is not seen.

The source is untrusted (up to 4 MiB), so every function here is linear in its
length: the text is read once into word tokens, and what the patterns used to ask
of every start position is answered by dictionary look-ups and by `NextChar`
(engine.text_scan). A name both `#define`d as an object-like and as a function-like
macro that reach `__global__` counts as the object-like one.
"""

from __future__ import annotations

import re

from ptxbench.engine.text_scan import NextChar, join_splices, skip, strip_comments

_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r"\w+|[;{(]")
_WS = re.compile(r"\s*+")
_BLANKS = re.compile(r"[ \t]*+")
_DIRECTIVE = re.compile(r"^[ \t]*+#[^\n]*+", re.M)
_DEFINE_HEAD = re.compile(r"^[ \t]*+#[ \t]*+define[ \t]++([A-Za-z_]\w*+)", re.M)
_ATTR_HEAD = re.compile(r"__(?:launch_bounds|cluster_dims|maxnreg)__\s*+\(")
# Host code shows itself by one of these; each is looked for only when its word is in the text
# (a single alternation of them all is tried at every position, several times slower).
_HOST_SIGNS = (("<<<", None), ("main", re.compile(r"\bint\s++main\s*+\(")),
               ("LaunchKernel", re.compile(r"\bcu(?:da)?LaunchKernel\w*+\s*+\(")),
               ("cudaMalloc", re.compile(r"\bcudaMalloc\w*+\s*+\(")),
               ("cuModuleLoad", re.compile(r"\bcuModuleLoad\w*+\s*+\(")), ("PYBIND11_MODULE", None),
               ("TORCH_LIBRARY", None), ("torch::", re.compile(r"\btorch::")),
               ("at::Tensor", re.compile(r"\bat::Tensor\b")))
# defined_names: where a definition may begin: a line starting `#`, a type keyword, a name and its `(`.
_DEF_START = re.compile(r"(?P<macro>^[ \t]*+#)|(?P<type>\b(?:struct|class|union|enum)\s)"
                        r"|\b(?P<function>[A-Za-z_]\w*+)\s*+\(", re.M)
_DEF_MACRO = re.compile(r"[ \t]*+#[ \t]*+define[ \t]++([A-Za-z_]\w*+)")
_TYPE_HEADS = (re.compile(r"enum\s++class\s++([A-Za-z_]\w*+)\s*+"),       # `enum class` first, then plain
               re.compile(r"(?:struct|class|union|enum)\s++([A-Za-z_]\w*+)\s*+"))
_FUNC_HEAD = re.compile(r"(?P<function>[A-Za-z_]\w*+)\s*+\(")
_FUNC_TAIL = re.compile(r"\s*+(?:const\s*+)?(?:noexcept\s*+)?\{")
_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "catch", "do", "else"}
_IDENT_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")


def clean(code: str) -> str:
    """The source with comments removed and spliced lines joined. An unclosed `/*` is read as
    text, not as a comment to the end: prose around the code may say `src/*.cu`."""
    return strip_comments(join_splices(code, " "), fill="space", unclosed="text")


def _defines(text: str) -> list[tuple[str, bool, str]]:
    """(name, function-like, body) of every `#define`. A parameter list runs to the next `)`,
    on a later line if need be; the body is the rest of the line it ends on."""
    out = []
    close = NextChar(text, ")")
    pos = 0
    while (m := _DEFINE_HEAD.search(text, pos)) is not None:
        at, function_like = m.end(), False
        if text.startswith("(", at) and (end := close(at + 1)) >= 0:
            at, function_like = end + 1, True
        start = skip(_BLANKS, text, at)
        stop = text.find("\n", start)
        stop = len(text) if stop < 0 else stop
        out.append((m.group(1), function_like, text[start:stop]))
        pos = stop
    return out


def _global_macros(text: str) -> tuple[set[str], set[str]]:
    """(object-like, function-like) macro names whose expansion reaches `__global__`: from
    `__global__`, through each define whose body names a name already known to reach it."""
    defines = _defines(text)
    naming: dict[str, list[int]] = {}          # word → the defines whose body names it
    for i, (_name, _fn, body) in enumerate(defines):
        for word in set(_WORD.findall(body)):
            naming.setdefault(word, []).append(i)
    objects: set[str] = set()
    functions: set[str] = set()
    todo = ["__global__"]
    while todo:
        for i in naming.get(todo.pop(), ()):
            name, function_like, _body = defines[i]
            if name in objects:
                continue
            if function_like:
                functions.add(name)
            else:
                objects.add(name)
                functions.discard(name)
                todo.append(name)
    return objects, functions


def _strip_attributes(text: str) -> str:
    """`__launch_bounds__(…)`, `__cluster_dims__(…)`, `__maxnreg__(…)` turned to one space."""
    out: list[str] = []
    last = pos = 0
    while (m := _ATTR_HEAD.search(text, pos)) is not None:
        close = text.find(")", m.end())
        if close < 0:            # no `)` after this one, so after none of the later ones either
            break
        out += [text[last:m.start()], " "]
        last = pos = close + 1
    out.append(text[last:])
    return "".join(out)


def cuda_kernels(code: str) -> tuple[str, ...]:
    """Names of the `__global__` functions the source declares, in order, each once.

    After a marker (`__global__` or a macro reaching it), the kernel is the word just before
    the first `(`, unless a `;` or `{` comes first; after a function-like macro reaching
    `__global__` and its `(`, the first word is the kernel."""
    if "__global__" not in code:     # nothing can reach it: comments and splices only take away
        return ()
    text = clean(code)
    objects, functions = _global_macros(text)
    body = _strip_attributes(_DIRECTIVE.sub(" ", text))
    markers = {"__global__", *objects}
    found: list[str] = []
    by_macro: dict[str, list[str]] = {name: [] for name in functions}
    used_up: dict[str, int] = {}     # per function-like macro: where its last use ended
    marker_at = -1                   # where the marker that waits for its `(` began
    word_start = word_end = -1       # the last token, when it is a word
    word = ""
    macro_paren = ("", -1)           # a function-like macro and the end of its `(`, awaiting a word
    for tok in _TOKEN.finditer(body):
        t, start, end = tok.group(0), tok.start(), tok.end()
        macro, paren_end = macro_paren
        macro_paren = ("", -1)
        if t == "(":
            if marker_at >= 0:
                if (word_end >= 0 and word_start != marker_at and word[0] in _IDENT_START
                        and skip(_WS, body, word_end) == start):
                    found.append(word)
                marker_at = -1
            if (word_end >= 0 and word in by_macro and word_start >= used_up.get(word, 0)
                    and skip(_WS, body, word_end) == start):
                macro_paren = (word, end)
            word_start = word_end = -1
        elif t in ";{":
            marker_at = word_start = word_end = -1
        else:
            if macro and t[0] in _IDENT_START and skip(_WS, body, paren_end) == start:
                by_macro[macro].append(t)
                used_up[macro] = end
            if marker_at < 0 and t in markers:
                marker_at = start
            word, word_start, word_end = t, start, end
    for name in sorted(by_macro):
        found += by_macro[name]
    return tuple(dict.fromkeys(n for n in found if n not in objects))


def is_host_code(code: str) -> bool:
    """Whether the source launches kernels or binds them to a host framework (never device helpers)."""
    text = clean(code)
    return any(word in text and (pattern is None or pattern.search(text)) for word, pattern in _HOST_SIGNS)


def defined_names(code: str) -> set[str]:
    """Macros, types and functions the source defines (declarations without a body do not count).

    Read left to right, as one regex alternation would: at a line starting `#`, a `#define`;
    at a word, a struct, class, union or enum with a body, else a function with a body (its
    parameter list ends at the first `)`, unless a `;` or `{` comes first). A definition's
    text is skipped once read. Only where one of them can begin is looked at (`_DEF_START`)."""
    text = clean(code)
    n = len(text)
    to_brace = NextChar(text, ";{")
    to_close = NextChar(text, ";{)")
    bodies: dict[int, int] = {}          # `)` position → end of the `{` that follows it, or -1
    names: set[str] = set()
    pos = 0
    while (c := _DEF_START.search(text, pos)) is not None:
        p = c.start()
        if c.lastgroup == "macro":
            if (m := _DEF_MACRO.match(text, p)) is not None:
                names.add(m.group(1))
                pos = m.end()
            else:
                pos = p + 1
            continue
        found = _type_at(text, p, n, to_brace) if c.lastgroup == "type" else None
        if found is None:
            # a keyword not followed by a type with a body may still be a function's name
            head = c if c.lastgroup == "function" else _FUNC_HEAD.match(text, p)
            found = _function_at(text, head, to_close, bodies) if head is not None else None
        if found is None:
            pos = p + 1
            continue
        name, pos = found
        names.add(name)
    return names - _KEYWORDS


def _type_at(text: str, p: int, n: int, to_brace: NextChar) -> tuple[str, int] | None:
    for head in _TYPE_HEADS:
        m = head.match(text, p)
        if m is None:
            continue
        at = m.end()
        if at < n and text[at] == "{":
            return m.group(1), at + 1
        if at < n and text[at] == ":" and (brace := to_brace(at + 1)) >= 0 and text[brace] == "{":
            return m.group(1), brace + 1
    return None


def _function_at(text: str, head: re.Match[str], to_close: NextChar, bodies: dict[int, int]) -> tuple[str, int] | None:
    """A function with a body whose `name (` is `head`: (its name, where its `{` ends), or None."""
    close = to_close(head.end())
    if close < 0 or text[close] != ")":
        return None
    if close not in bodies:      # several names may share this `)`: read what follows it once
        tail = _FUNC_TAIL.match(text, close + 1)
        bodies[close] = tail.end() if tail is not None else -1
    end = bodies[close]
    return (head.group("function"), end) if end >= 0 else None
