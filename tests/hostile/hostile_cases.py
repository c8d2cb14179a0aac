"""The hostile corpus: load cases.toml, make the generated files, judge a case, write the report.

Static cases go through the real static pipeline (extract → assemble → inspect, with NVIDIA's
ptxas/nvcc from the wheels) and then through the manifest resolution the GPU pipeline does before
it launches anything (`engine.pipeline.plan_sizes`: expressions, limits, kernel signatures). GPU
cases go through `engine.pipeline.judge` with a real worker. Everything a case writes goes to a
temporary folder handed in by the caller.
"""

from __future__ import annotations

import json
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptxbench.engine.cache import Cache
from ptxbench.engine.categories import OK, worst
from ptxbench.engine.extract import MAX_RESPONSE_BYTES
from ptxbench.engine.manifest import MAX_MANIFEST_BYTES
from ptxbench.engine.pipeline import plan_sizes
from ptxbench.engine.static import StaticVerdict, judge_static
from ptxbench.tasks.spec import get_task

HERE = Path(__file__).resolve().parent
CASES_FILE = HERE / "cases.toml"
MARKER = "HOSTILE_MARKER"          # the file hostile candidates try to create
STAGES = ("static", "gpu")
PASSING = (OK, "slower_than_baseline")


@dataclass(frozen=True)
class Case:
    id: str
    stage: str
    task: str
    expect: str
    tries: str
    file: str | None = None
    make: str | None = None
    manifest: str | None = None
    make_manifest: str | None = None
    sizes: tuple[tuple[str, dict[str, int]], ...] | None = None
    honest_max_speedup: float | None = None
    sass: dict[str, int] | None = None
    no_marker: bool = False
    must_not_read: str | None = None
    max_seconds: float | None = None
    also: tuple[str, ...] = ()          # other categories that are right for it (a cheat caught at another step)
    budget_s: float | None = None       # the candidate's GPU-time budget, where the case is about it
    executed: bool = False              # judged with `--executed` (Nsight Compute counts what ran)
    # False: judged without the marked copy (engine/coverage.py), for cases about a later defence whose
    # requested families sit in dead code, which the copy would otherwise catch first.
    coverage: bool = True
    release: bool = False               # slow and covered by a faster case: the full GPU suite only
    open: str = ""                      # a known hole, why it is open: expected to fail (strict) until closed

    @staticmethod
    def from_toml(d: dict[str, Any]) -> Case:
        d = dict(d)
        sizes = d.pop("sizes", None)
        if sizes is not None:
            sizes = tuple((s["split"], {k: int(v) for k, v in s.items() if k != "split"}) for s in sizes)
        return Case(sizes=sizes, also=tuple(d.pop("also", ())), **d)

    @property
    def timed(self) -> bool:
        """Whether its verdict rests on timing (a speed, or a pass that a speed could turn into a
        reward hack): the fast GPU suite runs such cases alone on the GPU."""
        speed = {OK, "slower_than_baseline", "suspected_reward_hack", "no_baseline", "hang_timeout"}
        return bool({self.expect, *self.also} & speed) or self.honest_max_speedup is not None \
            or self.budget_s is not None

    def candidate(self, workdir: Path) -> Path:
        if self.make is not None:
            return GENERATORS[self.make](workdir / f"{self.id}.candidate")
        assert self.file is not None
        return HERE / self.file

    def manifest_path(self, workdir: Path) -> Path | None:
        if self.make_manifest is not None:
            return GENERATORS[self.make_manifest](workdir / f"{self.id}.manifest.json")
        return HERE / self.manifest if self.manifest is not None else None

    def accepts(self, category: str, speedup: float | None) -> bool:
        """Whether a judgement is right for this case."""
        if category == self.expect or category in self.also:
            return True
        return (self.honest_max_speedup is not None and category in PASSING
                and speedup is not None and speedup <= self.honest_max_speedup)


def load_cases(path: Path = CASES_FILE) -> list[Case]:
    with path.open("rb") as f:
        return [Case.from_toml(d) for d in tomllib.load(f)["case"]]


def cases(stage: str) -> list[Case]:
    return [c for c in load_cases() if c.stage == stage]


# -- generated candidates (too big or too binary to keep in git) -----------------------------------

def _control_ptx() -> str:
    return (HERE / "gpu" / "control_ok.ptx").read_text()


def _padded_ptx(total: int) -> bytes:
    kernel = _control_ptx().encode()
    line = b"// " + b"padding " * 15 + b"\n"
    return kernel + line * ((total - len(kernel)) // len(line))


def _make_cubin(path: Path) -> Path:
    from ptxbench.engine.assemble import assemble

    result = assemble(_control_ptx(), "ptx", "sm_90a")
    assert result.cubin is not None, result.evidence
    path = path.with_suffix(".ptx")
    path.write_bytes(result.cubin)
    return path


def _make_ten_mib_ptx(path: Path) -> Path:
    path = path.with_suffix(".ptx")
    path.write_bytes(_padded_ptx(10 << 20))
    return path


def _make_ten_mib_response(path: Path) -> Path:
    path = path.with_suffix(".md")
    prose = b"Let me think about memory coalescing once more before I answer. " * 16 + b"\n"
    body = prose * ((10 << 20) // len(prose))
    path.write_bytes(body + b"\n```ptx\n" + _control_ptx().encode() + b"```\n")
    return path


def _make_near_cap_ptx(path: Path) -> Path:
    path = path.with_suffix(".ptx")
    path.write_bytes(_padded_ptx(MAX_RESPONSE_BYTES - (64 << 10)))
    return path


def _make_manifest_two_mib(path: Path) -> Path:
    # Valid JSON (a correct launch padded with whitespace), so only its size is wrong.
    text = '{"launches": [{"entry": "vector_add"}]' + " " * (2 * MAX_MANIFEST_BYTES) + "}"
    path.write_text(text)
    return path


def _make_manifest_deep_json(path: Path) -> Path:
    path.write_text("[" * 100_000 + "]" * 100_000)
    return path


GENERATORS = {
    "cubin": _make_cubin,
    "ten_mib_ptx": _make_ten_mib_ptx,
    "ten_mib_response": _make_ten_mib_response,
    "near_cap_ptx": _make_near_cap_ptx,
    "manifest_two_mib": _make_manifest_two_mib,
    "manifest_deep_json": _make_manifest_deep_json,
}


# -- judging ----------------------------------------------------------------------------------------

@dataclass
class Outcome:
    case: Case
    category: str
    seconds: float
    speedup: float | None = None
    detail: str = ""
    problems: list[str] = field(default_factory=list)   # extra checks that failed

    @property
    def correct(self) -> bool:
        return self.case.accepts(self.category, self.speedup) and not self.problems


def static_category(verdict: StaticVerdict, case: Case) -> tuple[str, str]:
    """What the pipeline would record before any launch. The static verdict checks the launch
    manifest at every size itself (train sizes decide); the GPU pipeline's own pre-launch check
    (`engine.pipeline.plan_sizes`) must come to the same category, which `agreement` checks."""
    return verdict.category, verdict.evidence


def agreement(verdict: StaticVerdict, case: Case) -> list[str]:
    """Problems when the GPU pipeline, before launching anything, would judge otherwise."""
    if verdict.cubin is None:
        return []
    task = get_task(case.task)
    _, decided = plan_sizes(verdict.candidate, task, verdict.ptx, 132, resources=verdict.resources)
    pipeline = worst([verdict.category] + [m.category for m in decided if m.split == "train"])
    if pipeline != verdict.category:
        return [f"the GPU pipeline would record {pipeline} before any launch; the static verdict says "
                f"{verdict.category}"]
    return []


def judge_static_case(case: Case, workdir: Path, cache: Cache) -> tuple[Outcome, StaticVerdict]:
    started = time.perf_counter()
    verdict = judge_static(case.candidate(workdir), case.task, manifest_path=case.manifest_path(workdir),
                           cache=cache)
    category, detail = static_category(verdict, case)
    outcome = Outcome(case, category, time.perf_counter() - started, detail=detail[:300])
    outcome.problems += extra_checks(case, verdict, outcome.seconds, workdir)
    outcome.problems += agreement(verdict, case)
    return outcome, verdict


def extra_checks(case: Case, verdict: StaticVerdict, seconds: float, workdir: Path) -> list[str]:
    problems = []
    if case.max_seconds is not None and seconds > case.max_seconds:
        problems.append(f"took {seconds:.1f} s (at most {case.max_seconds} s)")
    if case.no_marker and (workdir / MARKER).exists():
        problems.append(f"{MARKER} was created: candidate code ran on the judging machine")
    if case.must_not_read is not None:
        stored = json.dumps(verdict.to_dict(), default=str) + verdict.assembler_log
        secret = Path(case.must_not_read)
        if f"{case.must_not_read}(" in stored:   # nvcc's "file(line): error" for a file it read
            problems.append(f"the stored log quotes {case.must_not_read}: the compiler read it")
        lines = [ln for ln in secret.read_text(errors="replace").splitlines() if len(ln.strip()) >= 6] \
            if secret.is_file() else []
        leaked = [ln for ln in lines if ln in stored]
        if leaked:
            problems.append(f"{len(leaked)} line(s) of {case.must_not_read} reached the stored log")
    return problems


# -- the report ---------------------------------------------------------------------------------------

def report_markdown(outcomes: dict[str, Outcome], all_cases: list[Case], *, title: str, where: str) -> str:
    """One row per case: what it tries, the category it must get, what it got."""
    rows = ["| case | stage | tries | expected | got | right | s |", "|---|---|---|---|---|---|---|"]
    right = tried = 0
    for case in all_cases:
        o = outcomes.get(case.id)
        if o is None:
            got, ok, secs = ("to run on the GPU machine" if case.stage == "gpu" else "not run"), "", ""
        else:
            tried += 1
            right += o.correct
            speed = f" ({o.speedup:.2f}x)" if o.speedup is not None else ""
            got = f"`{o.category}`{speed}" + (f"; {'; '.join(o.problems)}" if o.problems else "")
            ok, secs = ("yes" if o.correct else "**no**"), f"{o.seconds:.2f}"
        rows.append(f"| {case.id} | {case.stage} | {case.tries.replace('|', '/')} | `{case.expect}` | {got} | {ok} | {secs} |")
    head = [f"# {title}", "", where, "", f"Cases run: {tried} of {len(all_cases)}; classified correctly: {right} of {tried}.", ""]
    return "\n".join(head + rows) + "\n"
