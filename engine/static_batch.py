"""The static stages for many candidates at once, with one nvdisasm run for all their machine code.

nvdisasm costs about 0.4 s to start, more than ptxas takes for most kernels, so
a batch is judged in three steps: every candidate whose verdict is not cached is
assembled (each into the assembly cache), the cubins are disassembled together
(engine.sass.disassemble_many, into the SASS cache), and then each candidate is
judged by `judge_static`, which now finds its assembly and SASS in the cache.
The verdicts are the ones `judge_static` gives one at a time.
"""

from __future__ import annotations

from typing import Any

from ptxbench.engine.assemble import assemble
from ptxbench.engine.cache import Cache
from ptxbench.engine.cuda_build import nvcc_flags
from ptxbench.engine.sass import disassemble_many
from ptxbench.engine.static import StaticVerdict, _front, judge_static
from ptxbench.engine.static_cache import verdict_key


def judge_static_many(jobs: list[dict[str, Any]], *, cache: Cache | None = None) -> list[StaticVerdict]:
    """`judge_static(**job)` for every job (its keyword arguments: candidate_or_file, task, arch,
    require, manifest_path), in order. The batch needs a cache to pass work between its steps."""
    store = cache if cache is not None else Cache()
    cubins = []
    for job in jobs:
        verdict, candidate, spec, _ = _front(job["candidate_or_file"], job.get("task"), job.get("arch"),
                                             job.get("require"), job.get("manifest_path"))
        if candidate is None or store.get(verdict_key(candidate, verdict.arch, verdict.require, spec)) is not None:
            continue
        build = candidate.manifest.build if candidate.manifest is not None else None
        asm = assemble(candidate.code, candidate.language, verdict.arch, cache=store, nvcc_flags=nvcc_flags(build))
        if asm.cubin is not None:
            cubins.append(asm.cubin)
    disassemble_many(cubins, cache=store)
    return [judge_static(**job, cache=store) for job in jobs]
