"""Module-scope state a kernel can write: found in the cubin, put back before every run.

A `.global` variable outlives a launch: a kernel that counts its launches,
keeps a result or sets a flag there could behave in the checked launches and
cheat in the others. ptxas places every such variable in a writable data
section of the cubin (`.nv.global` for zero-initialised ones, `.nv.global.init`
for initialised ones). After the module is loaded, and before any launch, the
harness copies each section's device image aside; before every run it copies
it back, so every run starts from the loaded image.

The device address of a section is found through one of its symbols
(`cuModuleGetGlobal`: address of the symbol minus its offset in the section).
If no symbol of a section can be resolved, or the cubin holds a writable
section of a kind not known here, the only safe restore is to reload the
module before every run; `ModuleState.needs_reload` says so.

`data_sections` is plain Python (the ELF reader); the rest needs the driver.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4
SHT_SYMTAB = 2
STT_OBJECT = 1
KNOWN_GLOBAL_SECTIONS = (".nv.global", ".nv.global.init")


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
        return self.name in KNOWN_GLOBAL_SECTIONS


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def data_sections(cubin: bytes) -> list[DataSection]:
    """Writable device-memory sections of a cubin (shared memory excluded: it does not outlive a launch)."""
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
        if flags & SHF_WRITE and flags & SHF_ALLOC and not flags & SHF_EXECINSTR and not name.startswith(".nv.shared"):
            if size:
                found.append(DataSection(name, size, tuple(symbols.get(i, ()))))
    return found


class ModuleState:
    """The loaded images of a module's writable sections, and the copies that put them back."""

    def __init__(self, module_handle: object, cubin: bytes) -> None:
        import torch
        from cuda.bindings import driver

        self._driver = driver
        self.regions: list[tuple[str, int, int]] = []       # (section, device address, bytes)
        self.needs_reload = False
        self.unresolved: list[str] = []
        for section in data_sections(cubin):
            base = self._base(module_handle, section) if section.known else None
            if base is None:
                self.needs_reload = True
                self.unresolved.append(section.name)
                continue
            self.regions.append((section.name, base, section.size))
        self._saved = [torch.empty(size, dtype=torch.uint8, device="cuda") for _, _, size in self.regions]
        for (_, base, size), saved in zip(self.regions, self._saved):
            self._copy(saved.data_ptr(), base, size, 0)
        torch.cuda.synchronize()

    def _base(self, module_handle: object, section: DataSection) -> int | None:
        """The section's device address, from the first of its symbols the driver resolves."""
        for sym in sorted(section.symbols, key=lambda s: not s.is_global):
            err, ptr, size = self._driver.cuModuleGetGlobal(module_handle, sym.name.encode())
            if int(getattr(err, "value", err)) == 0 and int(size) >= sym.size:
                return int(ptr) - sym.offset
        return None

    def _copy(self, dst: int, src: int, size: int, stream: int) -> None:
        err, = self._driver.cuMemcpyDtoDAsync(dst, src, size, self._driver.CUstream(stream))
        if int(getattr(err, "value", err)) != 0:
            raise RuntimeError(f"restoring module state: {err}")

    @property
    def bytes(self) -> int:
        return sum(size for _, _, size in self.regions)

    def restore(self, stream_handle: int) -> None:
        """Enqueue the copies that put every region back to its loaded image."""
        for (_, base, size), saved in zip(self.regions, self._saved):
            self._copy(base, saved.data_ptr(), size, stream_handle)

    def describe(self) -> dict[str, object]:
        return {"regions": [{"section": n, "bytes": s} for n, _, s in self.regions],
                "reload": self.needs_reload, "unresolved": self.unresolved}
