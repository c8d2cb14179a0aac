"""Reading CUDA C++ source without compiling it: its kernels, whether it is host code, what it defines.

Kernels are found through `__global__` and through object-like macros that
expand to it (`#define KGLOBAL __global__`, then `KGLOBAL void k(...)`); a
`#define` line itself never counts as a kernel. A function-like macro that
expands to `__global__` (`#define KERNEL(name) __global__ void name`) names its
kernel through an argument: the first identifier given to it is taken as the
name. Nothing here runs a preprocessor, so a name a macro computes (token
pasting) is not seen.
"""

from __future__ import annotations

import re

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_SPLICE = re.compile(r"\\[ \t]*\n")
_DIRECTIVE = re.compile(r"^[ \t]*#[^\n]*", re.M)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)]*\))?[ \t]*([^\n]*)", re.M)
_ATTRS = re.compile(r"__(launch_bounds|cluster_dims|maxnreg)__\s*\([^)]*\)")
_HOST_SIGNS = re.compile(r"<<<|\bint\s+main\s*\(|\bcu(da)?LaunchKernel\w*\s*\(|\bcudaMalloc\w*\s*\(|"
                         r"\bcuModuleLoad\w*\s*\(|PYBIND11_MODULE|TORCH_LIBRARY|\btorch::|\bat::Tensor\b")
_DEFINED = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)"                                   # macros
    r"|\b(?:struct|class|union|enum(?:\s+class)?)\s+([A-Za-z_]\w*)\s*(?::[^;{]*)?\{"  # types with a body
    r"|\b([A-Za-z_]\w*)\s*\([^;{)]*\)\s*(?:const\s*)?(?:noexcept\s*)?\{",           # functions with a body
    re.M)
_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "catch", "do", "else"}


def clean(code: str) -> str:
    """The source with comments removed and spliced lines joined."""
    return _COMMENTS.sub(" ", _SPLICE.sub(" ", code))


def _global_macros(text: str) -> tuple[set[str], set[str]]:
    """(object-like, function-like) macro names whose expansion reaches `__global__`."""
    defines = [(m.group(1), m.group(2) is not None, m.group(3)) for m in _DEFINE.finditer(text)]
    objects: set[str] = set()
    functions: set[str] = set()
    markers = {"__global__"}
    changed = True
    while changed:   # macros that expand to macros that expand to __global__
        changed = False
        for name, is_function, body in defines:
            if name in objects or name in functions:
                continue
            if any(re.search(rf"\b{re.escape(k)}\b", body) for k in markers):
                (functions if is_function else objects).add(name)
                if not is_function:
                    markers.add(name)
                changed = True
    return objects, functions


def cuda_kernels(code: str) -> tuple[str, ...]:
    """Names of the `__global__` functions the source declares, in order, each once."""
    text = clean(code)
    objects, functions = _global_macros(text)
    body = _ATTRS.sub(" ", _DIRECTIVE.sub(" ", text))
    markers = "|".join(re.escape(k) for k in sorted({"__global__", *objects}, key=len, reverse=True))
    found = re.findall(rf"\b(?:{markers})\b[^;{{(]*?\b([A-Za-z_]\w*)\s*\(", body)
    for name in sorted(functions):
        found += re.findall(rf"\b{re.escape(name)}\s*\(\s*([A-Za-z_]\w*)", body)
    return tuple(dict.fromkeys(n for n in found if n not in objects))


def is_host_code(code: str) -> bool:
    """Whether the source launches kernels or binds them to a host framework (never device helpers)."""
    return bool(_HOST_SIGNS.search(clean(code)))


def defined_names(code: str) -> set[str]:
    """Macros, types and functions the source defines (declarations without a body do not count)."""
    names = set()
    for m in _DEFINED.finditer(clean(code)):
        name = next(g for g in m.groups() if g)
        if name not in _KEYWORDS:
            names.add(name)
    return names
