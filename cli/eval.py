"""`ptxbench eval`: judge samples from the store in a batch, one evaluation row each.

The batch itself is services/batch.py: rows committed one by one, so a batch that is killed
loses nothing it finished, and running the same command again resumes (with `--all-unjudged`
a sample that already has a GPU judgement, or with `--static` any evaluation, is skipped).
SIGTERM, SIGHUP and SIGINT end the batch after the current sample, whose judgement is written
(or, when the store is held by another writer, kept in its recovery journal). On many workers
they withdraw the samples no worker has begun and wait for the running ones to write their rows
(each at most its deadline; a second SIGINT leaves them for a resume too), saying what was kept
and what is left.

A store another process is writing is waited for, said after a second, for at most
$PTXBENCH_LOCK_WAIT seconds (60 unless set). A judgement the store will not take (the wait ran
out, a stop came, the disk is full) is kept in the store's recovery journal and the batch stops
(docs/store.md); the next writer of the store, this command run again included, writes the
journal first.

`--gpus all|N|0,2,5` spreads the batch over a pool of GPU workers on this host (services/pool.py),
`--workers-per-gpu 2` puts two on each (their timing flagged as shared, never a clean speedup),
and `--cluster tcp://host:8786` (or `local[:N]`) sends it to a Dask cluster's GPU workers
(services/cluster.py). The rows are written here, by this process alone, either way. Progress is a rich bar, or with
`--json-progress` one JSON object per line as docs/eval-progress.md describes (what the
explorer follows).

`--db` must name an existing store (`--create` makes a new, empty one there): a mistyped path
is refused rather than judged as an empty store.

Exit status: 0 when the batch ran (whatever the verdicts, cancelled too); 1 when the tool
failed on every sample it tried, or the store failed while it was read; 2 for a usage mistake or a
store that will not open or is not there; 3 when the store would not take a judgement (it is in the
recovery journal; run the same command again to resume).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ptxbench.cli.conventions import fail
from ptxbench.engine.inert import inert
from ptxbench.services import progress as ev


class RichProgress:
    """The batch's events as a progress bar and a closing summary, on standard error. A worker's
    message and a device's name may quote a tool: the columns read no markup and every value is
    made inert."""

    def __init__(self) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from ptxbench.cli.terminal import console

        self.console = console(stderr=True)
        self.progress = Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[note]}", markup=False),
                                 console=self.console, transient=False)
        self.task: Any = None
        self.counts: Counter[str] = Counter()
        self.current = ""
        self.workers: dict[str, Any] = {}  # a parallel batch: one line per worker
        self.done_by: Counter[str] = Counter()

    def _worker_line(self, name: str, note: str) -> None:
        if name not in self.workers:
            self.workers[name] = self.progress.add_task(inert(f"  {name}"), total=None, note="")
        self.progress.update(self.workers[name], note=inert(note))

    def emit(self, event: ev.Event) -> None:
        match event:
            case ev.Start():
                self.progress.start()
                where = event.device or ("static stages only" if event.static_only else "no GPU")
                self.task = self.progress.add_task(inert(f"eval ({where})"), total=event.total, note="")
            case ev.WorkerChanged():
                shared = " (shared GPU: timing not clean)" if event.shared else ""
                if event.state in ("ready", "joined"):
                    self._worker_line(event.worker, f"{event.state}: {event.device or ''}{shared}")
                elif event.state == "restarted":
                    self._worker_line(event.worker, event.message or "restarted")
                else:
                    self._worker_line(event.worker, f"{event.state}: {event.message or ''}"[:120])
                    if event.message:
                        self.console.print(f"{event.worker} {event.state}: {event.message}", markup=False,
                                           highlight=False, style="yellow")
            case ev.SampleStarted():
                self.current = f"sample {event.sample_id} ({event.task_id})"
                if event.worker:
                    self._worker_line(event.worker, self.current)
                else:
                    self.progress.update(self.task, note=inert(self.current))
            case ev.StageChanged(status="begin"):
                if event.worker:
                    self._worker_line(event.worker, f"sample {event.sample_id}: {event.stage}")
                else:
                    self.progress.update(self.task, note=inert(f"{self.current}: {event.stage}"))
            case ev.Result():
                self.counts[event.category] += 1
                extra = f" {event.speedup:.3f}x" if event.speedup else ""
                note = f"sample {event.sample_id}: {event.category}{extra}"
                self.progress.update(self.task, advance=1, note=inert(note))
                if event.worker:
                    self.done_by[event.worker] += 1
                    self._worker_line(event.worker, f"{self.done_by[event.worker]} judged; last {note}")
            case ev.Error():
                self.console.print(f"error (sample {event.sample_id}): {event.message}", markup=False,
                                   highlight=False, style="red")
                if self.task is not None and event.sample_id is not None:
                    self.progress.update(self.task, advance=1)
            case ev.Log():
                self.console.print(f"{event.level}: {event.message}", markup=False, highlight=False)
            case ev.Done():
                if self.task is not None:
                    self.progress.stop()
                summary = ", ".join(f"{c} {n}" for c, n in self.counts.most_common()) or "nothing judged"
                if self.done_by:
                    summary += " (by worker: " + ", ".join(f"{w} {n}" for w, n in sorted(self.done_by.items())) + ")"
                state = " (cancelled)" if event.cancelled else ""
                self.console.print(f"judged {event.judged}{state}: {summary}"
                                   + (f"; tool failures {event.failed_tool}" if event.failed_tool else ""),
                                   markup=False, highlight=False)

    def close(self) -> None:
        try:
            self.progress.stop()
        except Exception:  # already stopped
            pass


class _SayAfterStart:
    """A sink that says `events` right after the batch's `start` (which stays the first line)."""

    def __init__(self, sink: Any, events: list[ev.Event]) -> None:
        self.sink, self.events = sink, events

    def emit(self, event: ev.Event) -> None:
        self.sink.emit(event)
        if isinstance(event, ev.Start):
            for said in self.events:
                self.sink.emit(said)
            self.events = []


def eval_command(
    db: Annotated[Optional[Path], typer.Option("--db", help="store file (default: the user's store)")] = None,
    create: Annotated[bool, typer.Option("--create", help="make a new store at --db if there is none (without it a --db that is not a store is refused)")] = False,
    sample: Annotated[Optional[list[int]], typer.Option("--sample", help="sample id (repeat for several)")] = None,
    task: Annotated[Optional[str], typer.Option("--task", help="every sample of this task")] = None,
    all_unjudged: Annotated[bool, typer.Option("--all-unjudged", help="samples with no judgement yet (resumes a batch)")] = False,
    static: Annotated[bool, typer.Option("--static", help="static stages only (no GPU)")] = False,
    sanitize: Annotated[bool, typer.Option("--sanitize", help="also run compute-sanitizer memcheck")] = False,
    executed: Annotated[bool, typer.Option("--executed", help="also count executed instructions with Nsight Compute")] = False,
    json_progress: Annotated[bool, typer.Option("--json-progress", help="JSON lines on stdout (docs/eval-progress.md)")] = False,
    gpus: Annotated[Optional[str], typer.Option("--gpus", help="a pool of GPU workers: all, a count, or indices such as 0,2,5")] = None,
    workers_per_gpu: Annotated[int, typer.Option("--workers-per-gpu", help="workers on each GPU of --gpus (2 or more: timing flagged as shared)")] = 1,
    cluster: Annotated[Optional[str], typer.Option("--cluster", help="a Dask scheduler (tcp://host:8786) or local[:N]; needs ptxbench[cluster]")] = None,
) -> None:
    """Judge samples from the store and append one evaluation row per sample."""
    from ptxbench.db.seed import open_for_writing
    from ptxbench.db.store import StoreError
    from ptxbench.services.batch import run_batch, select_samples
    from ptxbench.services.errors import UsageError
    from ptxbench.services.parallel import batch_archs, make_backend, run_parallel_batch

    if not (sample or task or all_unjudged):
        raise fail("eval", "say what to judge: --sample ID, --task ID or --all-unjudged")
    if task:
        from ptxbench.tasks.spec import get_task

        try:
            get_task(task)
        except KeyError as exc:
            raise fail("eval", str(exc.args[0] if exc.args else exc)) from None
    replayed: list[str] = []
    try:
        store = open_for_writing(db, create=create, seed=False, report=replayed.append)
    except (StoreError, OSError) as exc:
        raise fail("eval", str(exc)) from None
    ids = select_samples(store, sample, task, all_unjudged, static)
    try:
        archs = batch_archs(store, ids) if gpus is not None else set()  # which GPUs `--gpus all` takes
        backend = make_backend(archs, gpus=gpus, workers_per_gpu=workers_per_gpu, cluster=cluster, static_only=static)
    except UsageError as exc:
        store.conn.close()
        raise fail("eval", str(exc)) from None
    sink: ev.JsonLines | RichProgress = ev.JsonLines() if json_progress else RichProgress()
    said = _SayAfterStart(sink, [ev.Log("info", line) for line in replayed])
    try:
        if backend is None:
            code = run_batch(store, ids, said, static_only=static, sanitize=sanitize, executed=executed)
        else:
            code = run_parallel_batch(store, ids, said, backend, static_only=static, sanitize=sanitize,
                                      executed=executed)
    finally:
        if isinstance(sink, RichProgress):
            sink.close()
        store.conn.close()
    raise typer.Exit(code)
