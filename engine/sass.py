"""Machine code: the SASS of cubins, one nvdisasm process for a whole batch, and its census.

nvdisasm spends about 0.4 s starting, whatever it reads, and `cuobjdump -sass`
starts one nvdisasm per cubin. So the code sections of every cubin to
disassemble (read from its ELF) are laid end to end and disassembled as one raw
binary (`nvdisasm -b SM90a`), then cut back into functions by address; each
function's addresses, and the targets of its branches and calls, are made
relative to its start again. On the fixtures and every expert solution this
gives, line for line, the instructions `cuobjdump -sass` prints
(tests/test_sass.py). A failure here is the toolchain's, never the candidate's:
the cubin came out of ptxas.
"""

from __future__ import annotations

import functools
import re
import struct
from collections import Counter
from pathlib import Path

from ptxbench.engine.cache import Cache, content_key
from ptxbench.engine.sandbox import job_dir
from ptxbench.engine.toolchain import ToolchainError, find_tool, run_tool, tool_version

DISASSEMBLE_TIMEOUT_S = 120.0

_SASS_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_SASS_INSN = re.compile(
    r"^\s*/\*[0-9a-fA-F]+\*/\s+(?:\{\s*)?(?:@!?U?P(?:[0-7]|T)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)"
)
_LISTING_LINE = re.compile(r"^(\s*/\*)([0-9a-f]+)(\*/\s+)(.*)$")
# Instructions whose hexadecimal operands are code addresses (a target in the function).
_FLOW = re.compile(r"^(?:\{\s*)?(?:@!?U?P(?:[0-7]|T)\s+)?(BRA|BRX|BSSY|CALL|JMP|JMX|RET|LEPC|WARPSYNC\.COLLECTIVE)\b")
_HEX = re.compile(r"\b0x([0-9a-f]+)\b")


def sass_census(sass: str) -> dict[str, Counter[str]]:
    """Function name → SASS opcode (with modifiers) → occurrences, from a listing of `disassemble`
    (or `cuobjdump -sass`): a `Function : name` line opens each function."""
    functions: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in sass.splitlines():
        if m := _SASS_FUNCTION.match(line):
            current = functions.setdefault(m.group(1), Counter())
            continue
        if current is not None and (m := _SASS_INSN.match(line)):
            current[m.group(1)] += 1
    return functions


def _elf_code(cubin: bytes) -> tuple[int, list[tuple[str, bytes]]]:
    """(SM number, [(function, its code)]) from a cubin's ELF: the `.text.<function>` sections."""
    try:
        if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
            raise ValueError("not a 64-bit ELF file")
        flags, = struct.unpack_from("<I", cubin, 0x30)
        shoff, = struct.unpack_from("<Q", cubin, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
        headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
        names = headers[shstrndx][4]
        code = []
        for name_at, kind, _, _, offset, size, *_ in headers:
            name = cubin[names + name_at:cubin.index(b"\0", names + name_at)].decode()
            if name.startswith(".text.") and kind == 1:          # SHT_PROGBITS
                code.append((name[len(".text."):], cubin[offset:offset + size]))
    except (ValueError, struct.error, IndexError) as exc:
        raise ToolchainError("nvdisasm", f"cannot read the cubin's code sections: {exc}", "") from None
    return (flags >> 8) & 0xFF, code


def _nvdisasm_arch(sm: int) -> str:
    # The arch-specific variant decodes everything the plain one does, and wgmma/tcgen05 too.
    return f"SM{sm}a" if sm >= 90 else f"SM{sm}"


def disassemble(cubin: bytes, *, cache: Cache | None = None, timeout: float = DISASSEMBLE_TIMEOUT_S) -> str:
    return disassemble_many([cubin], cache=cache, timeout=timeout)[0]


def disassemble_many(cubins: list[bytes], *, cache: Cache | None = None,
                     timeout: float = DISASSEMBLE_TIMEOUT_S) -> list[str]:
    """The SASS listing of each cubin, in order; cached per cubin, and one nvdisasm run per
    architecture for all the cubins not in the cache."""
    version = tool_version("nvdisasm")
    keys = [content_key(c, versions={"nvdisasm": version}, stage="sass-listing") for c in cubins]
    out: list[str | None] = [None] * len(cubins)
    todo: dict[str, list[tuple[int, list[tuple[str, bytes]]]]] = {}
    for i, (cubin, key) in enumerate(zip(cubins, keys)):
        hit = cache.get(key, blobs=("sass",)) if cache is not None else None
        if hit is not None and "sass" in hit[1]:
            out[i] = hit[1]["sass"].decode("utf-8", "replace")
            continue
        sm, code = _elf_code(cubin)
        todo.setdefault(_nvdisasm_arch(sm), []).append((i, code))
    for arch, items in todo.items():
        for i, text in _run_batch(arch, items, timeout).items():
            out[i] = text
            if cache is not None:
                cache.put(keys[i], {"stage": "sass-listing", "versions": {"nvdisasm": version}},
                          {"sass": text.encode("utf-8")})
    return [x or "" for x in out]


def _run_batch(arch: str, items: list[tuple[int, list[tuple[str, bytes]]]], timeout: float) -> dict[int, str]:
    blob = bytearray()
    spans: list[tuple[int, str, int, int]] = []          # (cubin index, function, start, end)
    for i, code in items:
        for name, data in code:
            spans.append((i, name, len(blob), len(blob) + len(data)))
            blob += data
    listing: list[tuple[int, str, str, str]] = []
    if blob:
        with job_dir("ptxbench-sass-") as tmp:
            path = Path(tmp) / "code.bin"
            path.write_bytes(bytes(blob))
            run = run_tool([str(find_tool("nvdisasm")), "-b", arch, path.name], timeout=timeout, cwd=tmp)
        if run.timed_out:
            raise ToolchainError("nvdisasm", f"did not finish within {timeout:g} s", "")
        if run.returncode != 0 or "error" in run.stderr:
            raise ToolchainError("nvdisasm", f"nvdisasm -b {arch} failed: {run.output.strip()[:300]}")
        for line in run.stdout.splitlines():
            if m := _LISTING_LINE.match(line):
                listing.append((int(m.group(2), 16), m.group(1), m.group(3), m.group(4)))
    texts: dict[int, list[str]] = {i: [f"\tcode for {arch.lower().replace('sm', 'sm_')}"] for i, _ in items}
    at = 0
    for i, name, start, end in spans:
        lines = texts[i]
        lines.append(f"\t\tFunction : {name}")
        while at < len(listing) and listing[at][0] < end:
            addr, head, gap, insn = listing[at]
            at += 1
            if addr < start:
                continue
            if _FLOW.match(insn):
                insn = _HEX.sub(functools.partial(_relative, start=start, end=end), insn)
            lines.append(f"{head}{addr - start:04x}{gap}{insn}")
    return {i: "\n".join(lines) + "\n" for i, lines in texts.items()}


def _relative(h: re.Match[str], start: int, end: int) -> str:
    value = int(h.group(1), 16)
    return f"0x{value - start:x}" if start <= value <= end else h.group(0)
