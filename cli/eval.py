"""`ptxbench eval`: judge samples from the store in a batch, one evaluation row each.

Rows are committed one by one (an evaluation and its per-size measurements in
one transaction), so a batch that is killed loses nothing it finished, and
running the same command again resumes: with `--all-unjudged` a sample that
already has a GPU judgement (or, with `--static`, any evaluation) is skipped.
SIGTERM and SIGINT end the batch after the current sample. Progress is a rich
bar, or with `--json-progress` one JSON object per line as docs/eval-progress.md
describes (what the explorer follows).

Exit status: 0 when the batch ran (whatever the verdicts, cancelled too); 1 when
the tool failed on every sample it tried; 2 for a usage mistake.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

EXIT_TOOL = 1
EXIT_USAGE = 2
SOURCE = "ptxbench eval"
PREFETCH = 4          # static stages of the next samples run on CPU threads while the GPU judges


# -- what a sample becomes ------------------------------------------------------------

def candidate_of(sample: Any) -> Any:
    """A stored sample → a Candidate, or an ExtractResult that says why there is none."""
    from ptxbench.engine.candidate import Candidate
    from ptxbench.engine.extract import ExtractResult, extract
    from ptxbench.engine.manifest import ManifestError, parse_manifest

    if sample.language in ("ptx", "cuda") and (sample.code or "").strip():
        manifest = None
        if sample.manifest:
            try:
                manifest = parse_manifest(sample.manifest)
            except ManifestError as exc:
                return ExtractResult(False, "bad_manifest", None, {"reason": str(exc)})
        return Candidate(sample.language, sample.code, manifest, f"sample:{sample.id}")
    if sample.response:
        return extract(sample.response)
    return ExtractResult(False, "no_candidate", None, {"reason": "the sample holds no code and no response"})


def records_of(sample_id: int, j: Any, source: str = SOURCE) -> tuple[Any, list[Any]]:
    """A Judgement → the evaluation row and its measurement rows (one converter for every writer)."""
    from ptxbench.models.judging import evaluation_records

    judged = evaluation_records(j, sample_id, source)
    return judged.evaluation, judged.measurements


def tool_error_record(sample_id: int, static: Any, message: str, device: str | None) -> Any:
    """The row of an attempt the tool failed on: what the static stages found, and the failure."""
    from ptxbench.db.records import Evaluation
    from ptxbench.engine import ENGINE_VERSION
    from ptxbench.engine.categories import ERROR_PREFIX, TOOL_ERROR

    status = ERROR_PREFIX + message.splitlines()[0][:200] if message else ERROR_PREFIX + "unknown"
    if static is not None:
        evaluation, _ = records_of(sample_id, static)
        evaluation.status = status
        evaluation.device = device or evaluation.device
        evaluation.evidence["tool_error"] = message
        return evaluation
    return Evaluation(sample_id=sample_id, engine_version=ENGINE_VERSION, status=status, category=TOOL_ERROR,
                      source=SOURCE, device=device, evidence={"tool_error": message})


# -- progress ---------------------------------------------------------------------------

class JsonProgress:
    """docs/eval-progress.md: one JSON object per line on stdout."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def emit(self, event: str, **fields: Any) -> None:
        sys.stdout.write(json.dumps({"event": event, "t": round(time.monotonic() - self.t0, 3), **fields},
                                    default=str) + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        pass


class RichProgress:
    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True, highlight=False)
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[note]}"), console=self.console,
                                 transient=False)
        self.task: Any = None
        self.counts: Counter[str] = Counter()
        self.current = ""

    def emit(self, event: str, **f: Any) -> None:
        if event == "start":
            self.progress.start()
            where = f.get("device") or ("static stages only" if f.get("static_only") else "no GPU")
            self.task = self.progress.add_task(f"eval ({where})", total=f["total"], note="")
        elif event == "sample":
            self.current = f"sample {f['sample_id']} ({f['task_id']})"
            self.progress.update(self.task, note=self.current)
        elif event == "stage" and f.get("status") == "begin":
            self.progress.update(self.task, note=f"{self.current}: {f['stage']}")
        elif event == "result":
            self.counts[f["category"]] += 1
            extra = f" {f['speedup']:.3f}x" if f.get("speedup") else ""
            self.progress.update(self.task, advance=1, note=f"sample {f['sample_id']}: {f['category']}{extra}")
        elif event == "error":
            self.console.print(f"error (sample {f.get('sample_id')}): {f['message']}", markup=False,
                               highlight=False, style="red")
            if self.task is not None and f.get("sample_id") is not None:
                self.progress.update(self.task, advance=1)
        elif event == "log":
            self.console.print(f"{f['level']}: {f['message']}", markup=False, highlight=False)
        elif event == "done":
            if self.task is not None:
                self.progress.stop()
            summary = ", ".join(f"{c} {n}" for c, n in self.counts.most_common()) or "nothing judged"
            state = " (cancelled)" if f.get("cancelled") else ""
            self.console.print(f"judged {f['judged']}{state}: {summary}"
                               + (f"; tool failures {f['failed_tool']}" if f.get("failed_tool") else ""),
                               markup=False, highlight=False)

    def close(self) -> None:
        try:
            self.progress.stop()
        except Exception:  # already stopped
            pass


# -- selection ------------------------------------------------------------------------------

def select_samples(db: Any, samples: list[int] | None, task: str | None, all_unjudged: bool,
                   static_only: bool) -> list[int]:
    from ptxbench.db.browse import SampleFilter, sample_ids
    from ptxbench.db.queries import evaluations_for

    if samples:
        ids = list(dict.fromkeys(samples))
    elif task or all_unjudged:
        ids = sorted(sample_ids(db.conn, SampleFilter(task_id=task or ""), limit=10_000_000))
    else:
        return []
    if all_unjudged:
        def judged(sid: int) -> bool:
            rows = evaluations_for(db, sid)
            return bool(rows) if static_only else any(e.status == "judged" and e.device for e in rows)
        ids = [i for i in ids if not judged(i)]
    return ids


# -- the command ---------------------------------------------------------------------------------

def eval_command(
    db: Annotated[Optional[Path], typer.Option("--db", help="store file (default: the user's store)")] = None,
    sample: Annotated[Optional[list[int]], typer.Option("--sample", help="sample id (repeat for several)")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="every sample of this task")] = None,
    all_unjudged: Annotated[bool, typer.Option("--all-unjudged", help="samples with no judgement yet (resumes a batch)")] = False,
    static: Annotated[bool, typer.Option("--static", help="static stages only (no GPU)")] = False,
    sanitize: Annotated[bool, typer.Option("--sanitize", help="also run compute-sanitizer memcheck")] = False,
    executed: Annotated[bool, typer.Option("--executed", help="also count executed instructions with Nsight Compute")] = False,
    json_progress: Annotated[bool, typer.Option("--json-progress", help="JSON lines on stdout (docs/eval-progress.md)")] = False,
) -> None:
    """Judge samples from the store and append one evaluation row per sample."""
    from ptxbench.db.store import StoreError, open_store

    if not (sample or task or all_unjudged):
        typer.echo("ptxbench eval: say what to judge: --sample ID, --task ID or --all-unjudged", err=True)
        raise typer.Exit(EXIT_USAGE)
    if task:
        from ptxbench.tasks.spec import get_task

        try:
            get_task(task)
        except KeyError as exc:
            typer.echo(f"ptxbench eval: {exc.args[0] if exc.args else exc}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
    try:
        store = open_store(db)
    except (StoreError, OSError) as exc:
        typer.echo(f"ptxbench eval: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    progress: JsonProgress | RichProgress = JsonProgress() if json_progress else RichProgress()
    try:
        code = run_batch(store, select_samples(store, sample, task, all_unjudged, static), progress,
                         static_only=static, sanitize=sanitize, executed=executed)
    finally:
        progress.close()
        store.conn.close()
    raise typer.Exit(code)


class _Stop:
    def __init__(self) -> None:
        self.requested = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Stop:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def run_batch(store: Any, ids: list[int], progress: Any, *, static_only: bool = False, sanitize: bool = False,
              executed: bool = False, runner: Any = None) -> int:
    """Judge `ids` in order, committing each row; returns the exit status."""
    from ptxbench.db.queries import get_sample
    from ptxbench.db.writes import add_evaluation
    from ptxbench.engine.pipeline import EngineError, judge
    from ptxbench.engine.runner import Runner, WorkerUnavailable
    from ptxbench.engine.static import judge_static
    from ptxbench.tasks.spec import get_task

    judged = failed = 0
    cancelled = False
    own_runner = runner is None and not static_only
    device_name = None
    if not static_only:
        runner = runner or Runner()
        try:
            device = runner.start()
            device_name = device.name if device is not None else None
        except WorkerUnavailable as exc:
            # The tool is broken, not the samples: say so once instead of failing every sample slowly.
            progress.emit("start", total=len(ids), device=None, static_only=static_only)
            progress.emit("error", sample_id=None, message=f"the GPU worker cannot start: {exc}"[:2000])
            progress.emit("done", judged=0, failed_tool=len(ids), cancelled=False)
            return EXIT_TOOL
    progress.emit("start", total=len(ids), device=device_name, static_only=static_only)

    samples: dict[int, Any] = {}
    pool = ThreadPoolExecutor(max_workers=PREFETCH, thread_name_prefix="ptxbench-static")
    futures: dict[int, Future] = {}

    def submit(i: int) -> None:
        sid = ids[i]
        s = get_sample(store, sid)
        samples[sid] = s
        if s is None:
            return
        try:
            spec = get_task(s.task_id)
        except KeyError:
            return
        futures[sid] = pool.submit(judge_static, candidate_of(s), spec)

    try:
        with _Stop() as stop:
            for i in range(min(PREFETCH, len(ids))):
                submit(i)
            for index, sid in enumerate(ids):
                if stop.requested:
                    cancelled = True
                    break
                if index + PREFETCH < len(ids):
                    submit(index + PREFETCH)
                s = samples.pop(sid, None)
                if s is None:
                    progress.emit("error", sample_id=sid, message=f"no sample with id {sid}")
                    failed += 1
                    continue
                progress.emit("sample", sample_id=sid, task_id=s.task_id, index=index)

                def note(stage: str, status: str, category: str | None = None, _sid: int = sid) -> None:
                    progress.emit("stage", sample_id=_sid, stage=stage, status=status,
                                  **({"category": category} if category else {}))

                static = None
                try:
                    spec = get_task(s.task_id)
                    note("assemble", "begin")
                    static = futures.pop(sid).result()
                    note("inspect", "end", static.category)
                    j = judge(static.candidate, spec, gpu=not static_only, sanitize=sanitize,
                              executed=executed, runner=runner, static=static, progress=note)
                    evaluation, measurements = records_of(sid, j)
                    row = add_evaluation(store, evaluation, measurements)
                except (EngineError, WorkerUnavailable, KeyError, OSError, ValueError, RuntimeError) as exc:
                    failed += 1
                    message = f"{type(exc).__name__}: {exc}"[:2000]
                    # The attempt is recorded too: nothing the batch tried is silently left unjudged.
                    error_row = add_evaluation(store, tool_error_record(sid, static, message, device_name), [])
                    progress.emit("error", sample_id=sid, message=message, evaluation_id=error_row.id)
                    continue
                judged += 1
                progress.emit("result", sample_id=sid, evaluation_id=row.id, category=row.category,
                              status=row.status, speedup=row.speedup, time_ms=row.time_ms)
            cancelled = stop.requested and judged + failed < len(ids)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if own_runner and runner is not None:
            runner.close()
    progress.emit("done", judged=judged, failed_tool=failed, cancelled=cancelled)
    return EXIT_TOOL if failed and not judged else 0


# -- the GPU stages for `ptxbench check` ------------------------------------------------------------

def judgement_summary(j: Any) -> dict[str, Any]:
    """JSON-ready: the GPU half of a judgement (what `ptxbench check --json` adds)."""
    return {
        "status": j.status, "category": j.category, "stage": j.stage, "correct": j.correct,
        "correct_heldout": j.correct_heldout, "executed": j.executed, "time_ms": j.time_ms,
        "baseline": j.baseline, "baseline_ms": j.baseline_ms, "speedup": j.speedup, "tflops": j.tflops,
        "sol_fraction": j.sol_fraction,
        "device": j.device.name if j.device is not None else None,
        "driver": j.device.driver if j.device is not None else None,
        "sizes": [{"split": m.split, "sizes": m.sizes, "category": m.category, "max_rel_err": m.max_rel_err,
                   "worst": m.worst, "time_ms": m.time_ms, "time_spread": m.time_spread,
                   "baseline_ms": m.baseline_ms, "speedup": m.speedup, "tflops": m.tflops,
                   "sol_fraction": m.sol_fraction, "message": m.message,
                   "element_ratio": _element_ratio(m.detail), "checks": _checks(m.detail)}
                  for m in j.measurements],
        "evidence": {k: v for k, v in j.evidence.items() if k != "sizes"},
        "seconds": {k: round(v, 3) for k, v in j.seconds.items()},
    }


def _element_ratio(detail: dict[str, Any]) -> dict[str, float]:
    """Per output, the largest |got − ref| / bound over the trials (1.0 is the element bound itself)."""
    out: dict[str, float] = {}
    for trial in detail.get("trials", []):
        for name, e in ((trial.get("detail") or {}).get("elements") or {}).items():
            r = e.get("max_ratio")
            if isinstance(r, (int, float)):
                out[name] = max(out.get(name, 0.0), float(r))
    return out


def _checks(detail: dict[str, Any]) -> dict[str, Any] | None:
    t = detail.get("timing")
    if not t:
        return None
    return {"checked": t.get("checks"), "failed": len(t.get("check_failures") or []),
            "nondeterministic": t.get("nondeterministic"), "reps": t.get("reps"),
            "baseline_check": t.get("baseline_check")}


def gpu_stages(verdict: Any, task_id: str | None) -> tuple[Any, str]:
    """Run, verify and time a statically judged candidate: (Judgement or None, status line).

    Raises EngineError when the worker cannot run (a tool failure, not a verdict)."""
    if not task_id:
        return None, "skipped: no task (the GPU stages verify against a task: give --task)"
    if verdict.cubin is None:
        return None, f"skipped: nothing to run ({verdict.category})"
    from ptxbench.engine.pipeline import judge
    from ptxbench.tasks.spec import get_task

    j = judge(verdict.candidate, get_task(task_id), static=verdict)
    return j, j.status


def render_judgement(console: Any, j: Any) -> None:
    from rich.table import Table

    table = Table(title=f"GPU: {j.device.name if j.device else '?'} — {j.category}", title_justify="left")
    for col in ("split", "sizes", "category", "error", "ms", "library ms", "speedup", "TFLOP/s", "of SOL"):
        table.add_column(col)

    def num(x: Any, fmt: str) -> str:
        return format(x, fmt) if isinstance(x, (int, float)) else "—"

    for m in j.measurements:
        sizes = " ".join(f"{k}={v}" for k, v in m.sizes.items())
        table.add_row(m.split, sizes, m.category, num(m.max_rel_err, ".2e"), num(m.time_ms, ".4f"),
                      num(m.baseline_ms, ".4f"), num(m.speedup, ".3f"), num(m.tflops, ".1f"),
                      num(m.sol_fraction, ".0%"))
    console.print(table)
    sol = j.evidence.get("speed_of_light")
    if sol:
        console.print(f"speed of light here: {sol['time_ms']:.4g} ms ({sol['peaks']}); the library reaches "
                      f"{format(sol['baseline_fraction'], '.0%') if sol.get('baseline_fraction') else '—'} of it",
                      markup=False, highlight=False, soft_wrap=True)
    if j.evidence.get("baseline_missing"):
        console.print(f"speed not judged: {j.evidence['baseline_missing']}", markup=False, highlight=False)
    for m in j.measurements:
        if m.message:
            console.print(f"{m.split} {m.sizes}: {m.message}", markup=False, highlight=False, soft_wrap=True)
    if j.baseline:
        console.print(f"library: {j.baseline}", markup=False, highlight=False)
