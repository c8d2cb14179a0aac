"""The candidate: device code (PTX or CUDA C++ with inline PTX) plus an optional launch manifest."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from ptxbench.engine.manifest import Manifest

Language = Literal["ptx", "cuda"]


@dataclass(frozen=True)
class Candidate:
    language: Language
    code: str
    manifest: Manifest | None = None
    origin: str = ""          # where it came from: "file:k.ptx", "response: block 2 (```ptx)", …

    def manifest_json(self) -> str | None:
        return self.manifest.to_json() if self.manifest is not None else None

    @property
    def code_hash(self) -> str:
        """Hash of what the assembler sees (language and code); the assembly cache key starts here."""
        return _sha256(self.language, self.code)

    @property
    def content_hash(self) -> str:
        """Hash of the whole candidate: language, code and manifest (origin excluded)."""
        return _sha256(self.language, self.code, self.manifest_json() or "")


def _sha256(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()
