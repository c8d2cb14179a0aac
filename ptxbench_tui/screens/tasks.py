"""Tasks (2): the list with arch, requested families and sizes; a task's
description and prompt, its expert solution (highlighted PTX) and how every
model did on it."""

from __future__ import annotations

import json
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Static, TabbedContent, TabPane

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary
from ptxbench.tui import keys
from ptxbench.tui.marks import ptx_marker
from ptxbench.tui.messages import ShowSample, StoreFailed, TaskDetailLoaded, TasksLoaded
from ptxbench.tui.screens.base import ViewScreen
from ptxbench.tui.screens.overview import PER_SAMPLE_NOTE
from ptxbench.tui.untrusted import markup_value
from ptxbench.tui.widgets.code_view import PtxView
from ptxbench.tui.widgets.common import Table, TextTable, pct, speed

TABS = ("task-about", "task-expert", "task-results")


def repository_root() -> Path:
    import ptxbench.tasks

    return Path(ptxbench.tasks.__file__).resolve().parent.parent


def expert_file_code(task: browse.TaskRow) -> str:
    if not task.expert_path:
        return ""
    folder = repository_root() / task.expert_path
    for name in ("kernel.ptx", "solution.ptx"):
        if (folder / name).is_file():
            return (folder / name).read_text(encoding="utf-8", errors="replace")
    if folder.is_file():
        return folder.read_text(encoding="utf-8", errors="replace")
    return ""


def prompt_text(task: browse.TaskRow, level: str) -> str:
    """The prompt a model sees at this context level (system and user message), from the task's spec."""
    try:
        from ptxbench.tasks.prompts import build_prompt
        from ptxbench.tasks.spec import get_task
    except ImportError:
        return ""
    try:
        spec = get_task(task.id)
    except Exception:  # a task in the store that the repository does not ship
        return ""
    try:
        prompt = build_prompt(spec, level)
    except Exception as exc:  # a prompt that cannot be built is reported, not fatal
        return f"(the prompt could not be built: {exc})"
    return f"[system]\n{prompt.system}\n[user]\n{prompt.user}\n({prompt.version})"


def about_text(task: browse.TaskRow, prompt: str, level: str) -> str:
    spec = task.spec
    out = [f"[b]{markup_value(task.title)}[/b]  ({markup_value(task.id)}, {markup_value(task.arch)}, operation {markup_value(task.operation)})",
           f"requested families: [b]{markup_value(', '.join(task.families) or 'none')}[/b]"]
    if spec.get("baseline"):
        out.append(f"baseline: {markup_value(str(spec['baseline']))}")
    if spec.get("description"):
        out.append("\n" + markup_value(str(spec["description"]).strip()))
    for side in ("inputs", "outputs"):
        items = spec.get(side) or []
        if items:
            out.append(f"\n[b]{side}[/b]")
            for t in items:
                if isinstance(t, dict):
                    out.append(f"  {markup_value(str(t.get('name')))}: {markup_value(str(t.get('shape')))} {markup_value(str(t.get('dtype', '')))}")
    sizes = task.sizes
    for split in ("headline", "train", "heldout"):
        if split in sizes:
            value = sizes[split]
            shown = "; ".join(json.dumps(v) for v in value) if isinstance(value, list) else json.dumps(value)
            out.append(f"[b]{split}[/b] {markup_value(shown)}")
    if spec.get("tolerance"):
        out.append(f"tolerance: {markup_value(json.dumps(spec['tolerance']))}")
    out.append(f"\n[dim]source: {markup_value(task.source)} · expert: {markup_value(task.expert_path or '—')}[/]")
    out.append(f"\n[b]prompt[/b] at context level [b]{level}[/b] (p: none / brief / full)")
    out.append(markup_value(prompt) if prompt else "[dim]No prompt for this task in this repository; the description above is what it states.[/]")
    return "\n".join(out)


class TasksScreen(ViewScreen):
    MODE = "tasks"
    AUTO_FOCUS = "#tasks-table"
    BINDINGS = keys.bindings("tasks")

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[browse.TaskRow] = []
        self.current: browse.TaskRow | None = None
        self.expert_sample: int | None = None
        self.prompt_level = "brief"

    def compose_body(self) -> ComposeResult:
        with Horizontal(id="tasks-split"):
            yield Table(id="tasks-table")
            with TabbedContent(id="task-tabs"):
                with TabPane("About", id="task-about"):
                    with VerticalScroll():
                        yield Static("Pick a task.", id="task-about-text")
                with TabPane("Expert solution", id="task-expert"):
                    yield PtxView(id="task-expert-ptx")
                with TabPane("Results", id="task-results"):
                    yield TextTable(id="task-results-table", zebra_stripes=True)
                    yield Static(PER_SAMPLE_NOTE, id="task-results-note", classes="legend")

    def on_mount(self) -> None:
        super().on_mount()
        table = self.query_one("#tasks-table", Table)
        table.add_columns("Task", "Arch", "Families", "Headline size", "Samples")
        table.focus()
        self.load_tasks()

    def refresh_data(self) -> None:
        self.load_tasks()

    @work(thread=True, exclusive=True, group="tasks", exit_on_error=False, description="tasks")
    def load_tasks(self) -> None:
        try:
            self.post_message(TasksLoaded(self.ptx.reader.read(browse.tasks)))
        except Exception as exc:
            self.post_message(StoreFailed(f"tasks: {exc}"))

    def on_tasks_loaded(self, message: TasksLoaded) -> None:
        table = self.query_one("#tasks-table", Table)
        cursor = table.cursor_row
        table.clear()
        self.tasks = message.tasks
        for t in self.tasks:
            table.add_row(t.id, t.arch, ", ".join(t.families) or "—", t.sizes_text(), str(t.samples), key=t.id)
        if self.tasks:
            table.move_cursor(row=min(cursor, len(self.tasks) - 1))
            self.load_detail(self.tasks[table.cursor_row])

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "tasks-table" and 0 <= event.cursor_row < len(self.tasks):
            task = self.tasks[event.cursor_row]
            if self.current is None or task.id != self.current.id:
                self.load_detail(task)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "tasks-table":
            self.action_task_samples()

    @work(thread=True, exclusive=True, group="task-detail", exit_on_error=False, description="task detail")
    def load_detail(self, task: browse.TaskRow) -> None:
        try:
            sid = self.ptx.reader.read(browse.expert_sample_id, task.id)
            code = ""
            if sid is not None:
                detail = self.ptx.reader.read(browse.sample_detail, sid)
                code = detail.ptx if detail else ""
            code = code or expert_file_code(task)
            self.post_message(TaskDetailLoaded(task, code, sid, prompt_text(task, self.prompt_level)))
        except Exception as exc:
            self.post_message(StoreFailed(f"task {task.id}: {exc}"))

    def on_task_detail_loaded(self, message: TaskDetailLoaded) -> None:
        self.current = message.task
        self.expert_sample = message.expert_sample
        self.query_one("#task-about-text", Static).update(about_text(message.task, message.prompt, self.prompt_level))
        self.query_one("#task-expert-ptx", PtxView).show(
            message.expert_code or "// No expert solution ships for this task.", marker=ptx_marker(message.task.families)
        )
        results = self.query_one("#task-results-table", DataTable)
        results.clear(columns=True)
        results.add_columns("Model", "Level", "Samples", "Compiled", "Correct", "Correct h-o", "Uses req.", "fast₁.₀",
                            "fast₁.₀ h-o", "Best", "Geomean")
        for r in summary.overview(self.ptx.cells or [], summary.OverviewFilter(task_id=message.task.id)):
            results.add_row(r.model, r.context_level, str(r.samples), pct(r.compiled), pct(r.correct),
                            pct(r.correct_heldout), pct(r.uses), pct(r.fast_1), pct(r.fast_1_heldout),
                            speed(r.best_speedup), speed(r.geomean_speedup))

    # -- actions ---------------------------------------------------------------------
    def action_task_samples(self) -> None:
        if self.current is not None:
            self.show_samples(browse.SampleFilter(task_id=self.current.id))

    def action_open_kernel(self) -> None:
        if self.expert_sample is None:
            self.notify("No expert sample of this task in the store.")
            return
        self.post_message(ShowSample(self.expert_sample))

    def action_cycle_prompt(self) -> None:
        levels = ("none", "brief", "full")
        self.prompt_level = levels[(levels.index(self.prompt_level) + 1) % len(levels)]
        if self.current is not None:
            self._tabs().active = "task-about"
            self.load_detail(self.current)

    def _tabs(self) -> TabbedContent:
        return self.query_one("#task-tabs", TabbedContent)

    def action_next_tab(self) -> None:
        tabs = self._tabs()
        tabs.active = TABS[(TABS.index(tabs.active) + 1) % len(TABS)]

    def action_prev_tab(self) -> None:
        tabs = self._tabs()
        tabs.active = TABS[(TABS.index(tabs.active) - 1) % len(TABS)]
