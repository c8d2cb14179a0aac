"""Module-scope state a kernel can write: found in the cubin, put back before every run.

A `.global` variable outlives a launch: a kernel that counts its launches,
keeps a result or sets a flag there could behave in the checked launches and
cheat in the others. ptxas places every such variable in a writable data
section of the cubin (`.nv.global` for zero-initialised ones, `.nv.global.init`
for initialised ones). After the module is loaded, and before any launch, the
harness copies every variable of those sections aside (its address and size
from `cuModuleGetGlobal`); before every run it copies them back, so every run
starts from the loaded image. If a variable cannot be resolved or copied, or
the cubin holds a writable section of a kind not known here, the only safe
restore is to reload the module before every run; `ModuleState.needs_reload`
says so.

`data_sections` is plain Python (the ELF reader); the rest needs the driver.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHT_SYMTAB = 2
STT_OBJECT = 1
KNOWN_GLOBAL_SECTIONS = (".nv.global", ".nv.global.init")
# `.const` variables: read-only through the constant bank, but their device memory can be written through
# a generic address (cvta.const), so they are state too.
USER_CONSTANT_SECTION = ".nv.constant3"


class NotACubin(ValueError):
    pass


@dataclass(frozen=True)
class Symbol:
    name: str
    offset: int                 # within its section
    size: int
    is_global: bool             # ELF binding GLOBAL/WEAK (resolvable by name) rather than LOCAL


@dataclass(frozen=True)
class DataSection:
    name: str
    size: int
    symbols: tuple[Symbol, ...]

    @property
    def known(self) -> bool:
        return self.name in KNOWN_GLOBAL_SECTIONS or self.name == USER_CONSTANT_SECTION


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def data_sections(cubin: bytes) -> list[DataSection]:
    """Device-memory sections of a cubin a kernel can write and a later launch read: the writable ones (shared
    memory excluded: it does not outlive a launch) and the user constant bank."""
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF" or cubin[4] != 2 or cubin[5] != 1:
        raise NotACubin("not a 64-bit little-endian ELF cubin")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    if shentsize != 64 or shoff + shnum * 64 > len(cubin):
        raise NotACubin("section header table out of range")
    headers = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * 64) for i in range(shnum)]

    def body(i: int) -> bytes:
        _, _, _, _, off, size, *_ = headers[i]
        return cubin[off:off + size]

    names = body(shstrndx)
    symbols: dict[int, list[Symbol]] = {}
    for h in headers:
        if h[1] != SHT_SYMTAB:
            continue
        _, _, _, _, off, size, link, _, _, entsize = h
        strings = body(link)
        for pos in range(off, off + size - (entsize or 24) + 1, entsize or 24):
            st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", cubin, pos)
            if st_info & 0xF != STT_OBJECT:
                continue
            symbols.setdefault(st_shndx, []).append(
                Symbol(_cstr(strings, st_name), st_value, st_size, (st_info >> 4) in (1, 2)))
    found = []
    for i, (sh_name, _, flags, _, _, size, *_) in enumerate(headers):
        name = _cstr(names, sh_name)
        writable = flags & SHF_WRITE and flags & SHF_ALLOC and not flags & SHF_EXECINSTR
        if (writable and not name.startswith(".nv.shared")) or name == USER_CONSTANT_SECTION:
            if size:
                found.append(DataSection(name, size, tuple(symbols.get(i, ()))))
    return found


class ModuleState:
    """The loaded image of every module variable, and the copies that put it back before a run."""

    def __init__(self, module_handle: object, cubin: bytes) -> None:
        import torch
        from cuda.bindings import driver

        self._driver = driver
        self.regions: list[tuple[str, int, int]] = []       # (variable, device address, bytes)
        self.needs_reload = False
        self.unresolved: list[str] = []
        for section in data_sections(cubin):
            if not section.known or (not section.symbols and section.name != USER_CONSTANT_SECTION):
                self._give_up(section.name)
                continue
            for sym in section.symbols:
                found = self._resolve(module_handle, sym)
                if found is None:
                    self._give_up(sym.name)
                    continue
                self.regions.append((sym.name, *found))
        self._saved = [torch.empty(size, dtype=torch.uint8, device="cuda") for _, _, size in self.regions]
        torch.cuda.synchronize()
        for (name, address, size), saved in zip(self.regions, self._saved):
            if not self._copy(saved.data_ptr(), address, size, None):
                self._give_up(name)
        if self.needs_reload:
            self.regions, self._saved = [], []

    def _give_up(self, what: str) -> None:
        self.needs_reload = True
        self.unresolved.append(what)

    def _resolve(self, module_handle: object, sym: Symbol) -> tuple[int, int] | None:
        err, ptr, size = self._driver.cuModuleGetGlobal(module_handle, sym.name.encode())
        if int(getattr(err, "value", err)) != 0 or int(size) < max(sym.size, 1):
            return None
        return int(ptr), int(size)

    def _copy(self, dst: int, src: int, size: int, stream: int | None) -> bool:
        d = self._driver
        if stream is None:
            err, = d.cuMemcpyDtoD(d.CUdeviceptr(dst), d.CUdeviceptr(src), size)
        else:
            err, = d.cuMemcpyDtoDAsync(d.CUdeviceptr(dst), d.CUdeviceptr(src), size, d.CUstream(stream))
        return int(getattr(err, "value", err)) == 0

    @property
    def bytes(self) -> int:
        return sum(size for _, _, size in self.regions)

    def restore(self, stream_handle: int) -> None:
        """Enqueue the copies that put every variable back to its loaded image."""
        for (name, address, size), saved in zip(self.regions, self._saved):
            if not self._copy(address, saved.data_ptr(), size, stream_handle):
                raise RuntimeError(f"restoring the module variable {name!r} ({size} bytes) failed")

    def describe(self) -> dict[str, object]:
        return {"variables": len(self.regions), "bytes": self.bytes, "reload": self.needs_reload,
                "unresolved": self.unresolved[:20]}
