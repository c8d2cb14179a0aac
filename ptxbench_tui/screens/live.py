"""Live (6): re-verify and re-time samples by running the engine as a
separate process and following its JSON-lines progress.

The engine (`ptxbench eval … --json-progress`) appends the new evaluations to
the store itself; this view shows its progress, its log and its results,
can cancel it (`x`: SIGTERM, it stops after the current sample) or kill it
(`K`: SIGKILL, now), and reloads the store when it ends. Without a GPU of the
samples' arch the engine runs the static stages only: this view says so, and
asks before it starts, since such a run adds a static judgement only.
"""

from __future__ import annotations

import time

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.reactive import reactive
from textual.widgets import DataTable, ProgressBar, RichLog, Static

from ptxbench.db import browse
from ptxbench.engine.inert import inert
from ptxbench.services import progress as ev
from ptxbench.services.batch import EXIT_UNFINISHED
from ptxbench.services.batch_process import BatchProcess, GpuLock, engine_command, gpu_lock_path
from ptxbench.tui import keys
from ptxbench.tui.messages import EngineEvent, EngineExited, EngineProgress, ShowSample
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.untrusted import markup_value, rich_markup_value
from ptxbench.tui.verdict import verdict
from ptxbench.tui.widgets.common import TextTable, num, speed


class LiveScreen(ViewScreen):
    MODE = "live"
    AUTO_FOCUS = "#live-log"
    BINDINGS = keys.bindings("live")

    running: reactive[bool] = reactive(False)
    done: reactive[int] = reactive(0)
    total: reactive[int] = reactive(0)

    def __init__(self) -> None:
        super().__init__()
        self.queue: list[int] = []
        self.process: BatchProcess | None = None
        self.results: list[ev.Result] = []
        self.errors: list[str] = []
        self.device_line = ""
        self.static_only: bool | None = None
        self.last_exit: EngineExited | None = None
        self.started_at = 0.0
        self.killed = False  # K ended the engine: its exit is a kill, not a failure
        self.checking = False  # asking which GPUs are here before a start

    def compose_body(self) -> ComposeResult:
        yield Static("Nothing queued. Press r on a sample (or R on a filtered list) to re-verify it here.", id="live-status", classes="status")
        yield Static("", id="live-device", classes="status")
        yield ProgressBar(total=None, show_eta=False, id="live-progress")
        yield Static("", id="live-stage", classes="status")
        with Horizontal(id="live-body"):
            yield RichLog(id="live-log", wrap=True, markup=True, max_lines=2000)
            yield TextTable(id="live-results", zebra_stripes=True, cursor_type="row")

    def on_mount(self) -> None:
        super().on_mount()
        results = self.query_one("#live-results", DataTable)
        results.add_columns("Sample", "Category", "Status", "Speedup", "ms", "Evaluation")

    # -- queue -----------------------------------------------------------------------
    def enqueue(self, sample_ids: list[int], *, start: bool = True) -> None:
        if self.running:
            self.notify("The engine is running; cancel it (x) or wait for it to finish.", severity="warning")
            return
        self.queue = list(dict.fromkeys(sample_ids))
        self._status()
        if start:
            self.action_run()

    def _status(self) -> None:
        if self.running:
            text = f"Running the engine on {len(self.queue)} sample(s)… (x cancels after this sample, K kills now)"
        elif self.queue:
            ids = ", ".join(map(str, self.queue[:12])) + (" …" if len(self.queue) > 12 else "")
            text = f"Queued {len(self.queue)} sample(s): {ids}  (r runs)"
        else:
            text = "Nothing queued. Press r on a sample (or R on a filtered list) to re-verify it here."
        self.query_one("#live-status", Static).update(text)

    def watch_done(self) -> None:
        self._progress()

    def watch_total(self) -> None:
        self._progress()

    def _progress(self) -> None:
        bar = self.query_one("#live-progress", ProgressBar)
        bar.update(total=self.total or None, progress=self.done)

    # -- actions ---------------------------------------------------------------------
    def action_run(self) -> None:
        if not self.ptx.can_write("re-verifying"):
            return
        if self.running:
            self.notify("The engine is already running.")
            return
        if not self.queue:
            self.notify("Nothing queued: press r on a sample in Samples or a sample's view.")
            return
        if not self.checking:  # a check in flight looks at the queue again when it ends
            self.checking = True
            self.check_devices(list(self.queue))

    @work(thread=True, exclusive=True, group="engine-devices", exit_on_error=False, description="GPUs here")
    def check_devices(self, sample_ids: list[int]) -> None:
        """Before a start: which of the samples' archs have no GPU here (nvidia-smi; no CUDA library)."""
        missing: list[str] = []
        any_gpu = False
        try:
            from ptxbench.services.hardware import gpu_archs

            here = set(gpu_archs() or ())
            any_gpu = bool(here)
            missing = sorted(set(self.ptx.reader.read(browse.sample_archs, sample_ids)) - here)
        except Exception:  # the engine reads the store and the devices itself, and says what is wrong
            pass
        finally:
            self.app.call_from_thread(self._devices_known, sample_ids, missing, any_gpu)

    def _devices_known(self, sample_ids: list[int], missing: list[str], any_gpu: bool) -> None:
        self.checking = False
        if self.running or not self.queue:
            return
        if sample_ids != self.queue:
            self.action_run()  # queued anew meanwhile: check that queue
            return
        if not missing:
            self._start()
            return
        from ptxbench.tui.screens.dialogs import ConfirmDialog

        def answered(yes: bool | None) -> None:
            if yes:
                self._start()
            else:
                self._log("not started: the queue stays (r runs it)")

        yes = "Add static judgements" if len(sample_ids) > 1 else "Add a static judgement"
        self.app.push_screen(ConfirmDialog(static_only_question(len(sample_ids), missing, any_gpu), yes=yes), answered)

    def _start(self) -> None:
        self.results = []
        self.errors = []
        self.last_exit = None
        self.static_only = None
        self.killed = False
        self.done, self.total = 0, len(self.queue)
        self.query_one("#live-results", DataTable).clear()
        self.running = True
        self.started_at = time.monotonic()
        self._status()
        self.run_engine(list(self.queue))

    def action_cancel(self) -> None:
        if self.process is None or not self.running:
            self.notify("The engine is not running.")
            return
        if self.process.terminate():
            self._log("[b]cancel[/b]: SIGTERM sent; the engine stops after the current sample (rows already committed stay)")

    def action_kill(self) -> None:
        process = self.process.proc if self.process is not None else None
        if process is None or not self.running or process.returncode is not None:
            self.notify("The engine is not running.")
            return
        self.killed = True
        process.kill()
        self._log("[b]kill[/b]: SIGKILL sent; the sample being judged is not written (rows already committed stay)")

    def action_clear(self) -> None:
        if self.running:
            self.notify("Cancel the engine first (x).")
            return
        self.queue = []
        self.results = []
        self.query_one("#live-log", RichLog).clear()
        self.query_one("#live-results", DataTable).clear()
        self.done = self.total = 0
        self.query_one("#live-stage", Static).update("")
        self._status()

    def action_open_result(self) -> None:
        table = self.query_one("#live-results", DataTable)
        if not self.results:
            self.notify("No result yet.")
            return
        row = self.results[min(max(table.cursor_row, 0), len(self.results) - 1)]
        self.post_message(ShowSample(row.sample_id))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "live-results":
            self.action_open_result()

    # -- the engine process ----------------------------------------------------------
    @work(exclusive=True, group="engine", exit_on_error=False, description="ptxbench eval")
    async def run_engine(self, sample_ids: list[int]) -> None:
        app = self.ptx
        lock = GpuLock(gpu_lock_path(app.gpu_lock_dir))
        if not lock.acquire():
            self.post_message(EngineEvent(ev.Log("error", f"another engine holds this GPU (process {lock.holder()}); "
                                                          "try again when it is done")))
            self.post_message(EngineExited(None, False, "", False))
            return
        cmd = engine_command(app.engine_cmd, app.db_path, sample_ids)
        process = BatchProcess(cmd)
        self.process = process
        try:
            try:
                await process.start()
            except OSError as exc:
                self.post_message(EngineEvent(ev.Log("error", f"cannot start the engine ({cmd[0]}): {exc}")))
                self.post_message(EngineExited(None, False, "", False))
                return
            done, total = 0, len(sample_ids)
            async for event in process.events():
                self.post_message(EngineEvent(event))
                if isinstance(event, ev.Start):
                    total = int(event.total or total)
                elif isinstance(event, ev.Result):
                    done += 1
                else:
                    continue
                self.post_message(EngineProgress(done, total, event.kind))
            rc = await process.wait()
            self.post_message(EngineExited(rc, process.saw_done, "\n".join(process.stderr_tail), process.cancelled))
        finally:
            await process.kill()
            lock.release()

    def on_engine_event(self, message: EngineEvent) -> None:
        match message.event:
            case ev.Start(device=device, static_only=static_only):
                self.static_only = bool(static_only) or not device
                if self.static_only:
                    self.device_line = ("[b]No GPU here[/b]: the engine runs the static stages only "
                                        "(assemble, inspect); nothing is run or timed.")
                else:
                    self.device_line = f"device: [b]{markup_value(device)}[/b]"
                self.query_one("#live-device", Static).update(self.device_line)
                self._log(f"start: {self.total} sample(s) on {rich_markup_value(str(device or 'no GPU (static stages only)'))}")
            case ev.SampleStarted(sample_id=sid, task_id=task_id, index=index):
                self.query_one("#live-stage", Static).update(
                    f"sample {markup_value(sid)} ({markup_value(task_id)}) — {int(index or 0) + 1}/{self.total}"
                )
            case ev.StageChanged(sample_id=sid, stage=stage, status=status, category=category):
                cat = f" → {category}" if category else ""
                self.query_one("#live-stage", Static).update(
                    f"sample {markup_value(sid)}: {markup_value(stage)} {markup_value(status)}{markup_value(cat)}"
                )
            case ev.Result() as r:
                self.results.append(r)
                self.query_one("#live-results", DataTable).add_row(
                    str(r.sample_id), verdict(r.category, "" if r.status == "judged" else "not_run"),
                    str(r.status), speed(r.speedup), num(r.time_ms), str(r.evaluation_id),
                )
                self._log(f"result: sample {rich_markup_value(r.sample_id)} → [b]{rich_markup_value(str(r.category))}[/b] ({rich_markup_value(str(r.status))})")
            case ev.Log(level=level, message=text):
                level = str(level or "info")
                style = {"error": "red", "warning": "yellow"}.get(level, "")
                line = f"{rich_markup_value(level)}: {rich_markup_value(text or '')}"
                self._log(f"[{style}]{line}[/]" if style else line)
            case ev.Error(sample_id=sid, message=text):
                self.errors.append(str(text))
                self._log(f"[red]error on sample {rich_markup_value(sid)}: {rich_markup_value(text)}[/]")
            case ev.Done(judged=judged, failed_tool=failed, cancelled=cancelled):
                self._log(f"done: {rich_markup_value(judged)} judged, {rich_markup_value(failed)} tool failures"
                          f"{', cancelled' if cancelled else ''}")
            case ev.Unknown(raw=raw):
                self._log(f"[dim]{rich_markup_value(str(raw))}[/]")

    def on_engine_exited(self, message: EngineExited) -> None:
        self.last_exit = message
        self.running = False
        self.process = None
        elapsed = time.monotonic() - self.started_at
        if message.returncode is None:
            pass  # could not start or the GPU was busy: already logged
        elif self.killed:
            self._log(f"[b]engine killed[/b] after {elapsed:.1f} s; {len(self.results)} new evaluation(s) were committed "
                      "before it; the sample it was judging was not written")
            self.notify(f"Engine killed: {len(self.results)} new evaluation(s) kept.")
        elif message.cancelled and (not message.saw_done or message.returncode != 0):
            # A cancel that arrived before the engine could stop cleanly (still starting): it ended, as asked.
            self._log(f"engine cancelled in {elapsed:.1f} s (it ended on SIGTERM, exit code {message.returncode}); "
                      f"{len(self.results)} new evaluation(s) were committed before it")
            self.notify(f"Engine cancelled: {len(self.results)} new evaluation(s).")
        elif message.returncode == EXIT_UNFINISHED and message.saw_done:   # it said so, then stopped
            self._log(f"[yellow][b]The store refused a judgement[/b] (another writer held it past the patience): it "
                      f"is kept in the recovery journal beside the store and written at the next start; "
                      f"{len(self.results)} other new evaluation(s) were committed.[/]")
            self.notify("The store refused a judgement: kept in the recovery journal.", severity="warning")
        elif not message.saw_done or message.returncode != 0:
            # Split at newlines only, after making it inert: a carriage return in it is shown, not obeyed.
            tail = inert(message.stderr_tail).strip().split("\n")[-8:]
            self._log(f"[red][b]The engine stopped unexpectedly[/b] (exit code {message.returncode}). "
                      "Evaluations it committed before stopping are in the store; nothing else was written.[/]")
            for line in tail:
                self._log(f"[red]  {rich_markup_value(line)}[/]")
            self.notify(f"The engine stopped unexpectedly (exit code {message.returncode}).", severity="error")
        else:
            what = "cancelled" if message.cancelled else "finished"
            self._log(f"engine {what} in {elapsed:.1f} s; {len(self.results)} new evaluation(s) appended")
            self.notify(f"Engine {what}: {len(self.results)} new evaluation(s).")
        self.queue = []
        self._status()
        self.ptx.reload_store()

    def on_engine_progress(self, message: EngineProgress) -> None:
        self.done, self.total = message.done, message.total

    def _log(self, text: str) -> None:
        """A line of rich markup: every value in it went through `rich_markup_value`."""
        self.query_one("#live-log", RichLog).write(text)


def static_only_question(n: int, missing: list[str], any_gpu: bool) -> str:
    """What a start on a machine without the samples' GPU will do, asked before it starts."""
    archs = ", ".join(missing)
    where = f"No {archs} GPU on this machine" if any_gpu else "No GPU on this machine (nvidia-smi finds none)"
    what = "this sample" if n == 1 else f"these {n:,} samples"
    return (f"{where}.\n\nRe-verifying {what} here adds a static judgement only (assemble and inspect): "
            "nothing is run or timed. It joins the sample's history; a judgement made on the GPU, where there is "
            "one, stays the one every view shows.")
