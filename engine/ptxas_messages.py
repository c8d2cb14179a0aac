"""ptxas and nvcc output → messages → assemble categories.

ptxas prints one line per message:

    ptxas k.ptx, line 4; error   : Arguments mismatch for instruction 'mov'
    ptxas fatal   : Unresolved extern function 'f'
    ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; ...

and one file often yields several errors, so the verdict is the
highest-priority category present (engine/categories.BY_STAGE["assemble"]),
not the category of the first line. The patterns below were checked against
ptxas 13.0.88 on the PTX files in tests/data/ptx/.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ptxbench.engine.categories import BY_STAGE

ASSEMBLE_PRIORITY: tuple[str, ...] = BY_STAGE["assemble"]

ERROR_SEVERITIES = frozenset({"error", "fatal"})


@dataclass
class Message:
    tool: str  # "ptxas" or "nvcc"
    severity: str  # "error", "fatal", "warning", "info", "advisory", "remark"
    text: str
    file: str | None = None
    line: int | None = None
    code: str | None = None  # ptxas's (C75xx) performance-note number, nvcc's diagnostic number
    category: str | None = None  # for errors only

    @property
    def is_error(self) -> bool:
        return self.severity in ERROR_SEVERITIES

    def where(self) -> str:
        if self.line is None:
            return self.tool
        return f"{self.tool} line {self.line}"

    def render(self) -> str:
        return f"{self.where()}: {self.severity}: {self.text}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# (category, pattern) in the order they are tried; the first match names a
# message's category. Some texts would match a later, looser pattern too
# ("Illegal value for .address_size" is a header problem, not an operand).
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (cat, re.compile(pat, re.IGNORECASE))
    for cat, pat in (
        ("bad_header", r"Missing \.(version|target|address_size) directive"),
        ("bad_header", r"Unsupported \.target"),
        ("bad_header", r"Illegal value for \.address_size"),
        ("bad_header", r"32-Bit ABI|32-Bit addressing"),     # .address_size 32 on sm_90 and newer
        ("bad_header", r"Unknown \.target|Illegal \.target|\.target directive"),
        ("ptx_version", r"Unsupported \.version"),
        ("ptx_version", r"requires PTX ISA \.version"),
        ("ptx_version", r"PTX \.version \S+ does not support \.target"),
        ("target_mismatch", r"^(PTX|Program) with \.target '[^']*' cannot be compiled"),
        ("target_mismatch", r"SM version specified by \.target is higher"),
        ("target_mismatch", r"cannot be compiled to future architecture"),
        ("arch_unsupported", r"not supported on \.target"),
        ("arch_unsupported", r"cannot be compiled for architecture"),
        ("arch_unsupported", r"requires \.target sm_|not supported (on|for) (this|the target) arch"),
        ("syntax", r"Parsing error|syntax error|Unexpected end of file|Unterminated"),
        ("syntax", r"non-ASCII character|(Illegal|Invalid|Unexpected) character"),
        ("unknown_instruction", r"Not a name of any known instruction"),
        ("unknown_instruction", r"Unknown (modifier|directive|instruction|qualifier)"),
        ("unknown_instruction", r"Unexpected modifier|Illegal modifier|Invalid modifier"),
        ("undefined_symbol", r"Unknown symbol|Unresolved extern|Undefined (symbol|label|function|variable)"),
        ("undefined_symbol", r"(function|variable|label) '[^']*' (is )?not (defined|declared)"),
        ("redeclaration", r"Duplicate definition|Multiple definition|redefin|already (been )?(defined|declared)"),
        ("operand_mismatch", r"Arguments mismatch|Argument vector size mismatch|Unexpected instruction types"),
        ("operand_mismatch", r"wrong number of (parameters|arguments|operands)"),
        ("operand_mismatch", r"State space (incorrect|mismatch)|(type|size) mismatch|Illegal operand type"),
        ("invalid_operand", r"Illegal matrix shape|unexpected value|out of range|Illegal (value|vector|shape)"),
        ("invalid_operand", r"must be (a )?(multiple|power|constant|immediate|aligned|between)|Invalid (value|operand|alignment)"),
        ("resource_limit", r"uses too much|too many (resources|registers)|exceeds? (the )?(maximum|limit)"),
        ("resource_limit", r"Insufficient (shared|register)|out of (shared|local|constant) memory"),
    )
)

# ptxas's closing summary after any error: it carries no information of its own.
_SUMMARY = re.compile(r"^Ptx assembly aborted due to errors$", re.IGNORECASE)


# A message quotes the candidate ("Parsing error near '…'"), as long as the candidate makes it: what is
# read and kept of one is bounded, so no rule's search costs more than a constant per message.
MAX_MESSAGE_CHARS = 2000


_VERSION_WORD = re.compile(r"\.version ", re.IGNORECASE)
_VERSION_VERDICT = re.compile(r" (not supported|too (old|new|high|low))", re.IGNORECASE)


def _version_unsupported(text: str) -> bool:
    r"""`.version … not supported` / `… too old`, read as two searches, not `\.version .* (…)`: that
    pattern retries from every `.version` in a message that quotes the candidate, quadratic in it."""
    first = _VERSION_WORD.search(text)
    return first is not None and _VERSION_VERDICT.search(text, first.end() - 1) is not None


def classify(text: str) -> str:
    """The assemble category of one ptxas error text (assemble_other when nothing matches)."""
    text = text[:MAX_MESSAGE_CHARS]
    for category, pattern in _RULES:
        if pattern.search(text):
            return category
        if category == "ptx_version" and pattern.pattern.startswith("PTX") and _version_unsupported(text):
            return "ptx_version"
    return "assemble_other"


_PTXAS_LINE = re.compile(
    r"^ptxas(?:\s+(?P<file>.+?),\s+line\s+(?P<line>\d{1,9});)?\s+"
    r"(?P<sev>error|fatal|warning|info|Advisory|advisory)\s*:\s*(?P<text>.*)$"
)
_PTXAS_ADVISORY = re.compile(r"^ptxas(?:\s+(?P<file>.+?),\s+line\s+(?P<line>\d{1,9});)?\s+Advisory:\s*(?P<text>.*)$")
_NOTE_CODE = re.compile(r"^\((C\d{4})\)\s*")
_ON_LINE = re.compile(r"\bon line (\d{1,9})\b")


def parse_ptxas(output: str) -> list[Message]:
    """Every message line of ptxas's output; `-v` resource lines come back as info messages."""
    messages: list[Message] = []
    for raw in output.splitlines():
        line = raw.rstrip()
        m = _PTXAS_LINE.match(line) or _PTXAS_ADVISORY.match(line)
        if not m:
            continue
        groups = m.groupdict()
        sev = (groups.get("sev") or "advisory").lower()
        text = groups["text"].strip()[:MAX_MESSAGE_CHARS]
        code = None
        c = _NOTE_CODE.match(text)
        if c:
            code = c.group(1)
            text = text[c.end():]
        line_no = int(groups["line"]) if groups.get("line") else None
        if line_no is None and (on := _ON_LINE.search(text)):
            line_no = int(on.group(1))  # "Unexpected non-ASCII character encountered on line 5"
        msg = Message(
            tool="ptxas",
            severity=sev,
            text=text,
            file=groups.get("file"),
            line=line_no,
            code=code,
        )
        if msg.is_error:
            if _SUMMARY.match(text):
                continue
            msg.category = classify(text)
        messages.append(msg)
    return messages


# nvcc / EDG front end:   k.cu(3): error: identifier "x" is undefined
#                         k.cu(1): warning #177-D: variable "u" was declared but never referenced
# host preprocessor:      k.cu:1:10: fatal error: cute/tensor.hpp: No such file or directory
# driver:                 nvcc fatal   : Unsupported gpu architecture 'compute_95a'
_NVCC_EDG = re.compile(r"^(?P<file>[^\s(][^(]*)\((?P<line>\d{1,9})\):\s+(?P<sev>error|warning|remark|catastrophic error)(?:\s+#(?P<code>[\w-]+))?:\s*(?P<text>.*)$")
_NVCC_GCC = re.compile(r"^(?P<file>[^:\s][^:]*):(?P<line>\d{1,9}):(?:\d+:)?\s+(?P<sev>fatal error|error|warning|note):\s*(?P<text>.*)$")
_NVCC_DRIVER = re.compile(r"^nvcc (?P<sev>fatal|error|warning)\s*:\s*(?P<text>.*)$")


def parse_nvcc(output: str) -> list[Message]:
    """Diagnostics of an nvcc -ptx run; every error is a cuda_compile_error.

    ptxas lines are never in this output: -ptx stops before the assembler."""
    messages: list[Message] = []
    for raw in output.splitlines():
        line = raw.rstrip()
        m = _NVCC_EDG.match(line) or _NVCC_GCC.match(line) or _NVCC_DRIVER.match(line)
        if not m:
            continue
        g = m.groupdict()
        sev = g["sev"]
        if sev in ("catastrophic error", "fatal error"):
            sev = "fatal"
        elif sev == "note":
            sev = "info"
        msg = Message(
            tool="nvcc",
            severity=sev,
            text=g["text"].strip()[:MAX_MESSAGE_CHARS],
            file=(g.get("file") or "")[:MAX_MESSAGE_CHARS] or None,
            line=int(g["line"]) if g.get("line") else None,
            code=g.get("code"),
        )
        if msg.is_error:
            msg.category = "cuda_compile_error"
        messages.append(msg)
    return messages


def verdict(messages: list[Message]) -> tuple[str | None, Message | None]:
    """The highest-priority category among the errors, and its first message.

    (None, None) when there is no error message at all."""
    errors = [m for m in messages if m.is_error and m.category]
    if not errors:
        return None, None
    best = min(errors, key=lambda m: ASSEMBLE_PRIORITY.index(m.category or "assemble_other"))
    first = next(m for m in errors if m.category == best.category)
    return best.category, first


def is_warning(msg: Message) -> bool:
    """Messages worth showing on an assembled kernel: warnings, advisories and
    ptxas's numbered performance notes ((C75xx): setmaxnreg ignored, wgmma
    serialized, warpgroup.arrive injected)."""
    if msg.severity in ("warning", "advisory"):
        return True
    return msg.severity == "info" and msg.code is not None


# -v report ---------------------------------------------------------------

_COMPILING = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>[^']+)'")
_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"^\s*(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
)
_USED = re.compile(r"Used (?P<regs>\d+) registers(?P<rest>.*)$")
_BARRIERS = re.compile(r"used (\d+) barriers")
_BYTES = re.compile(r"(\d+) bytes (smem|lmem|cmem\[\d+\]|cumulative stack size)")


@dataclass
class EntryResources:
    name: str
    registers: int | None = None
    barriers: int | None = None
    shared_bytes: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    local_bytes: int = 0
    constant_bytes: dict[str, int] = field(default_factory=dict)  # per bank: {"cmem[0]": 380}
    cumulative_stack_bytes: int = 0

    @property
    def spills(self) -> bool:
        return bool(self.spill_store_bytes or self.spill_load_bytes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_resources(output: str) -> dict[str, EntryResources]:
    """Per-entry resources from `ptxas -v`. Non-entry functions (`.func`) appear
    only in stack-frame lines; they are reported too, without register counts."""
    found: dict[str, EntryResources] = {}
    entry: str | None = None
    props: str | None = None
    for raw in output.splitlines():
        if m := _COMPILING.search(raw):
            entry = m.group("name")
            found.setdefault(entry, EntryResources(entry))
            continue
        if m := _PROPERTIES.search(raw):
            props = m.group("name")
            found.setdefault(props, EntryResources(props))
            continue
        if (m := _FRAME.match(raw)) and props:
            r = found[props]
            r.stack_frame_bytes = int(m.group("stack"))
            r.spill_store_bytes = int(m.group("stores"))
            r.spill_load_bytes = int(m.group("loads"))
            continue
        if (m := _USED.search(raw)) and entry:
            r = found[entry]
            r.registers = int(m.group("regs"))
            rest = m.group("rest")
            if b := _BARRIERS.search(rest):
                r.barriers = int(b.group(1))
            for amount, kind in _BYTES.findall(rest):
                if kind == "smem":
                    r.shared_bytes = int(amount)
                elif kind == "lmem":
                    r.local_bytes = int(amount)
                elif kind == "cumulative stack size":
                    r.cumulative_stack_bytes = int(amount)
                else:
                    r.constant_bytes[kind] = int(amount)
    return found
