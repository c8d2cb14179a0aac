"""The static half of the pipeline in one call: extract (from a file) → assemble → inspect.

It needs no GPU. The GPU stages take a StaticVerdict that is ok (its cubin,
PTX and resources) and go on from there.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ptxbench.engine.assemble import DEFAULT_TIMEOUT_S, PTXAS_ARCHES, AssembleResult, assemble, ptx_header
from ptxbench.engine.cache import Cache
from ptxbench.engine.candidate import Candidate
from ptxbench.engine.categories import OK, worst
from ptxbench.engine.coverage import cap_registers, instrument
from ptxbench.engine.cuda_build import nvcc_flags
from ptxbench.engine.extract import ExtractResult, load_candidate_file
from ptxbench.engine.inspect import EntryFamilies, FamilyRow, inspect
from ptxbench.engine.launch_check import check_launches
from ptxbench.engine.ptx_params import parse_entry_params
from ptxbench.engine.sandbox import Deadline, confinement
from ptxbench.engine.static_cache import verdict_key
from ptxbench.engine.toolchain import tool_versions

if TYPE_CHECKING:
    from ptxbench.tasks.spec import TaskSpec

DEFAULT_ARCH = "sm_90a"


@dataclass
class StaticVerdict:
    category: str  # "ok" or a vocabulary word (extract, assemble or requirement stage)
    stage: str  # the stage that decided: extract, assemble or inspect
    arch: str
    language: str | None = None
    task_id: str | None = None
    origin: str = ""
    require: list[str] = field(default_factory=list)
    ptx: str = ""
    cubin: bytes | None = None
    sass: str = ""
    generic_target: str | None = None  # the module's earlier .target, when it falls back to generic code
    ptx_families: list[str] = field(default_factory=list)
    sass_families: list[str] = field(default_factory=list)
    families: list[FamilyRow] = field(default_factory=list)
    required_missing: list[dict[str, str]] = field(default_factory=list)
    launched: list[str] | None = None  # the entries the launch manifest runs; None: no manifest, the whole module
    entries: list[EntryFamilies] = field(default_factory=list)  # each entry's reach and families
    launch_problems: list[dict[str, Any]] = field(default_factory=list)  # sizes whose launch cannot work
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # where the cubin can run (engine.assemble.driver_notes)
    commands: dict[str, list[str]] = field(default_factory=dict)  # what nvcc and ptxas were given
    evidence: str = ""
    evidence_line: int | None = None
    evidence_source: str = ""
    extract_evidence: dict[str, Any] = field(default_factory=dict)
    assembler_log: str = ""
    tool_versions: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    cached: bool = False
    # The confinement the tools ran under (engine.sandbox.confinement): which guarantees held.
    sandbox: dict[str, Any] = field(default_factory=dict)
    candidate: Candidate | None = None
    # The marked copy the GPU worker runs once per size to see the requested families run (engine/coverage.py):
    # families, tokens and sites, or why there is none; its cubin apart.
    coverage: dict[str, Any] = field(default_factory=dict)
    coverage_cubin: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.category == OK

    @property
    def assembled(self) -> bool:
        return self.cubin is not None

    def to_dict(self, *, with_text: bool = False) -> dict[str, Any]:
        """JSON-safe; the PTX, SASS and cubin are left out unless asked for (they can be megabytes)."""
        d: dict[str, Any] = {
            "category": self.category,
            "stage": self.stage,
            "task_id": self.task_id,
            "arch": self.arch,
            "language": self.language,
            "origin": self.origin,
            "require": list(self.require),
            "generic_target": self.generic_target,
            "ptx_families": list(self.ptx_families),
            "sass_families": list(self.sass_families),
            "families": [r.to_dict() for r in self.families],
            "required_missing": [dict(m) for m in self.required_missing],
            "launched": list(self.launched) if self.launched is not None else None,
            "entries": [e.to_dict() for e in self.entries],
            "launch_problems": [dict(p) for p in self.launch_problems],
            "resources": self.resources,
            "warnings": self.warnings,
            "notes": list(self.notes),
            "commands": {k: list(v) for k, v in self.commands.items()},
            "evidence": self.evidence,
            "evidence_line": self.evidence_line,
            "evidence_source": self.evidence_source,
            "extract_evidence": self.extract_evidence,
            "assembler_log": self.assembler_log,
            "cubin": {"bytes": len(self.cubin), "sha256": hashlib.sha256(self.cubin).hexdigest()}
            if self.cubin is not None else None,
            "coverage": {k: v for k, v in self.coverage.items() if k not in ("tokens", "symbol")},   # new each build
            "tool_versions": dict(self.tool_versions),
            "seconds": {k: round(v, 4) for k, v in self.seconds.items()},
            "cached": self.cached,
            "sandbox": dict(self.sandbox),
        }
        if with_text:
            d["ptx"] = self.ptx
            d["sass"] = self.sass
        return d

    def for_cache(self) -> tuple[dict[str, Any], dict[str, bytes]]:
        """The verdict as a cache entry: a report, and the PTX, SASS and cubin as blobs."""
        report = self.to_dict()
        for key in ("task_id", "origin", "extract_evidence", "cached", "seconds", "cubin"):
            report.pop(key, None)
        report["coverage"] = dict(self.coverage)
        blobs = {"ptx": self.ptx.encode("utf-8", "surrogatepass"), "sass": self.sass.encode("utf-8")}
        if self.cubin is not None:
            blobs["cubin"] = self.cubin
        if self.coverage_cubin is not None:
            blobs["coverage_cubin"] = self.coverage_cubin
        report["has_cubin"] = self.cubin is not None
        return report, blobs

    def restore(self, report: dict[str, Any], blobs: dict[str, bytes]) -> None:
        """Fill this verdict (made for the same candidate) from a cache entry of `for_cache`."""
        for name in ("category", "stage", "language", "require", "ptx_families", "sass_families",
                     "required_missing", "launched", "launch_problems", "resources", "warnings", "notes",
                     "commands", "evidence", "evidence_line", "evidence_source", "assembler_log", "tool_versions"):
            setattr(self, name, report[name])
        self.sandbox = dict(report.get("sandbox") or {})
        self.generic_target = report.get("generic_target")
        self.families = [FamilyRow(**r) for r in report["families"]]
        self.entries = [EntryFamilies(**e) for e in report["entries"]]
        self.ptx = blobs.get("ptx", b"").decode("utf-8", "surrogatepass")
        self.sass = blobs.get("sass", b"").decode("utf-8")
        self.cubin = blobs.get("cubin") if report.get("has_cubin") else None
        self.coverage = dict(report.get("coverage") or {})
        self.coverage_cubin = blobs.get("coverage_cubin")

    def to_json(self, *, with_text: bool = False, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(with_text=with_text), indent=indent, default=str)


def _resolve_task(task: TaskSpec | str | None) -> TaskSpec | None:
    if task is None or not isinstance(task, str):
        return task
    from ptxbench.tasks.spec import get_task

    return get_task(task)


def _choose_arch(arch: str | None, task: TaskSpec | None, candidate: Candidate | None) -> str:
    if arch:
        return arch
    if task is not None:
        return task.arch
    if candidate is not None and candidate.language == "ptx":
        _, target = ptx_header(candidate.code)
        if target in PTXAS_ARCHES:
            return target
    return DEFAULT_ARCH


def judge_static(
    candidate_or_file: Candidate | ExtractResult | str | Path,
    task: TaskSpec | str | None = None,
    arch: str | None = None,
    require: list[str] | tuple[str, ...] | None = None,
    *,
    manifest_path: str | Path | None = None,
    cache: Cache | None = None,
    use_cache: bool = True,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> StaticVerdict:
    """Judge one candidate without a GPU.

    `candidate_or_file` is a Candidate, an ExtractResult, or the path of a
    candidate file (.ptx, .cu, or a model response). Every tool the candidate's text reaches runs
    confined (engine.sandbox), all of them within one deadline of `timeout` seconds. Without a task, the arch
    defaults to the PTX's .target (else sm_90a) and nothing is required; an
    explicit `arch` or `require` overrides the task's. Never raises for a bad
    candidate; raises ToolchainError when a tool is missing, OSError when the
    file cannot be read, ValueError for an unknown arch or family name.
    """
    started = time.perf_counter()
    verdict, candidate, spec, seconds = _front(candidate_or_file, task, arch, require, manifest_path)
    if candidate is None:
        verdict.seconds = {**seconds, "total": time.perf_counter() - started}
        return verdict
    wanted, the_arch = verdict.require, verdict.arch
    verdict.language = candidate.language
    verdict.origin = candidate.origin
    store = (cache if cache is not None else Cache()) if use_cache else None
    key = verdict_key(candidate, the_arch, wanted, spec) if store is not None else None
    if store is not None and key is not None:
        hit = store.get(key, blobs=("cubin", "ptx", "sass", "coverage_cubin"))
        if hit is not None:
            verdict.restore(*hit)
            verdict.cached = True
            verdict.seconds = {**seconds, "total": time.perf_counter() - started}
            return verdict
    transient = _judge_candidate(verdict, candidate, spec, wanted, store, seconds, Deadline(timeout))
    verdict.seconds = {**seconds, "total": time.perf_counter() - started}
    if store is not None and key is not None and not transient:
        store.put(key, *verdict.for_cache())
    return verdict


def _front(candidate_or_file: Candidate | ExtractResult | str | Path, task: TaskSpec | str | None,
           arch: str | None, require: list[str] | tuple[str, ...] | None, manifest_path: str | Path | None,
           ) -> tuple[StaticVerdict, Candidate | None, TaskSpec | None, dict[str, float]]:
    """The candidate (extracted when need be), its task, arch and requested families, in a verdict
    that is final already when there is no candidate."""
    spec = _resolve_task(task)
    seconds: dict[str, float] = {}
    extracted: ExtractResult | None = None
    if isinstance(candidate_or_file, Candidate):
        candidate: Candidate | None = candidate_or_file
    else:
        if isinstance(candidate_or_file, ExtractResult):
            extracted = candidate_or_file
        else:
            t = time.perf_counter()
            extracted = load_candidate_file(candidate_or_file, manifest_path)
            seconds["extract"] = time.perf_counter() - t
        candidate = extracted.candidate if extracted.ok else None

    the_arch = _choose_arch(arch, spec, candidate)
    if the_arch not in PTXAS_ARCHES:
        raise ValueError(f"unknown architecture {the_arch!r} (ptxas knows: {', '.join(PTXAS_ARCHES)})")
    wanted = list(require) if require is not None else list(spec.families if spec is not None else [])
    verdict = StaticVerdict(
        category=OK, stage="extract", arch=the_arch, task_id=spec.id if spec is not None else None,
        require=wanted, extract_evidence=dict(extracted.evidence) if extracted is not None else {},
        candidate=candidate,
    )
    if candidate is None:
        assert extracted is not None
        verdict.category = extracted.category
        verdict.evidence = str(extracted.evidence.get("reason", "")) or extracted.category
    return verdict, candidate, spec, seconds



def _judge_candidate(verdict: StaticVerdict, candidate: Candidate, spec: TaskSpec | None, wanted: list[str],
                     store: Cache | None, seconds: dict[str, float], deadline: Deadline) -> bool:
    """Assemble and inspect into `verdict`; True when the verdict depends on the machine (a tool hit
    the deadline or a CPU cap, or crashed): not to be cached."""
    the_arch = verdict.arch
    build = candidate.manifest.build if candidate.manifest is not None else None
    verdict.sandbox = confinement()
    asm: AssembleResult = assemble(candidate.code, candidate.language, the_arch, cache=store,
                                   deadline=deadline, nvcc_flags=nvcc_flags(build))
    seconds["assemble"] = asm.seconds.get("total", 0.0)
    for tool in ("nvcc", "ptxas"):
        if tool in asm.seconds:
            seconds[tool] = asm.seconds[tool]
    verdict.stage = "assemble"
    verdict.ptx = asm.ptx
    verdict.cubin = asm.cubin
    verdict.generic_target = asm.generic_target
    verdict.resources = {k: v.to_dict() for k, v in asm.resources.items()}
    verdict.warnings = [m.to_dict() for m in asm.warnings]
    verdict.assembler_log = asm.log
    verdict.notes = list(asm.notes)
    verdict.commands = {k: list(v) for k, v in asm.commands.items()}
    if build is not None and candidate.language == "ptx":
        verdict.notes.append("the manifest's build options (defines, flags) apply to CUDA candidates; "
                             "this PTX candidate is assembled without them")
    verdict.tool_versions = dict(asm.tool_versions)
    verdict.cached = asm.cached
    if not asm.ok:
        verdict.category = asm.category
        verdict.evidence = asm.evidence
        verdict.evidence_line = asm.evidence_line
        verdict.evidence_source = asm.evidence_source
        if asm.ptx:
            # The families a failed module reaches for are still worth showing.
            census = inspect(asm.ptx, None, [], cache=store)
            verdict.ptx_families = census.ptx_families
        return asm.transient

    t = time.perf_counter()
    launch = check_launches(candidate, spec, asm.ptx, arch=the_arch, resources=verdict.resources) \
        if spec is not None else None
    launched = _launched(candidate, launch)
    result = inspect(asm.ptx, asm.cubin, wanted, cache=store, launched=launched, timeout=max(deadline.left(), 1.0))
    seconds["inspect"] = time.perf_counter() - t
    verdict.stage = "inspect"
    verdict.sass = result.sass
    verdict.ptx_families = result.ptx_families
    verdict.sass_families = result.sass_families
    verdict.families = result.rows
    verdict.required_missing = result.required_missing
    verdict.launched = result.launched
    verdict.entries = result.entries
    verdict.category = result.category
    verdict.evidence = result.evidence
    _judge_launches(verdict, candidate, launch, asm.ptx)
    verdict.tool_versions.update(tool_versions(("nvdisasm",)))
    if verdict.category == OK and wanted:
        t = time.perf_counter()
        if _coverage_copy(verdict, asm.ptx, deadline):
            return True
        seconds["coverage"] = time.perf_counter() - t
    return False


def _coverage_copy(verdict: StaticVerdict, ptx: str, deadline: Deadline) -> bool:
    """The marked copy of a candidate that passed (engine/coverage.py). Not cached by content: its tokens are
    new each build, so it is kept with the verdict instead."""
    marked = instrument(ptx, verdict.require)
    if marked is None:
        verdict.coverage = {"error": "a requested family has no instruction in a function body to mark, or the "
                                     "module no header to declare the marks after"}
        return False
    asm = assemble(marked.ptx, "ptx", verdict.arch, deadline=deadline)
    # The marks' registers must not make the copy unlaunchable where the candidate launches: an entry that
    # grew is assembled again, capped at the candidate's own count.
    grown = {name: own["registers"] for name, own in verdict.resources.items()
             if asm.ok and own.get("registers") and name in asm.resources
             and (asm.resources[name].registers or 0) > own["registers"]}
    if grown:
        asm = assemble(cap_registers(marked.ptx, grown), "ptx", verdict.arch, deadline=deadline)
    if not asm.ok:
        verdict.coverage = {"error": f"the marked copy did not assemble: {asm.evidence[:400]}"}
        return asm.transient
    verdict.coverage = {"families": marked.families, "tokens": marked.tokens, "sites": marked.sites,
                        "symbol": marked.symbol, "work": marked.work, "unmeasured": marked.unmeasured}
    verdict.coverage_cubin = asm.cubin
    return False


def _launched(candidate: Candidate, launch: Any) -> list[str] | None:
    """The entries that run: the merged manifest's with a task, the candidate's own without one."""
    if launch is not None:
        return launch.launched or None
    if candidate.manifest is not None and candidate.manifest.launches:
        return list(dict.fromkeys(x.entry for x in candidate.manifest.launches))
    return None


def _judge_launches(verdict: StaticVerdict, candidate: Candidate, launch: Any, ptx: str) -> None:
    """The launch manifest against the module: what the GPU stage would refuse before running
    anything decides the verdict when it comes first (engine/categories.py orders them)."""
    if launch is None:
        # No task, so no sizes: only whether the candidate's own launches name real entries.
        if verdict.launched:
            entries = parse_entry_params(ptx)
            absent = [e for e in verdict.launched if e not in entries]
            if absent:
                verdict.launch_problems = [{"split": None, "sizes": {}, "category": "entry_missing",
                                            "message": f"no .entry {absent[0]!r} in the module "
                                                       f"(entries: {', '.join(entries) or 'none'})"}]
                verdict.category, verdict.evidence = "entry_missing", verdict.launch_problems[0]["message"]
        return
    verdict.launch_problems = [c.to_dict() for c in launch.sizes if c.category != OK]
    first = launch.first_failure("train")
    if first is not None and worst([first.category, verdict.category]) == first.category:
        verdict.category = first.category
        verdict.evidence = f"{first.message} (train size {_size_text(first.sizes)})"


def _size_text(sizes: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())
