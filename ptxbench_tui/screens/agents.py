"""Agent episodes (`A`): every episode an agent ran, and one episode replayed step by step.

The list shows who ran what and how it ended, with the verdict of the kernel it left; `⏎`
replays an episode: each model reply and tool call in order — the tool, its arguments, its
result, its time — with the step under the cursor written out below. `n`/`p` go to the next /
previous step that failed or was skipped, `k` opens the episode's kernel as a sample. In the
list, `space` selects episodes and `d` diffs the kernels of two of them (two agents on one task).
Everything is read through the store reader (db/trajectories.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from ptxbench.db import trajectories, triage
from ptxbench.engine.inert import inert
from ptxbench.tui import keys
from ptxbench.tui.messages import ShowDiff, ShowSample, StoreFailed
from ptxbench.tui.untrusted import markup_value
from ptxbench.tui.verdict import legend, verdict
from ptxbench.tui.widgets.common import Table
from ptxbench.tui.widgets.key_bar import KeyBar
from ptxbench.tui.widgets.store_banner import StoreBanner

MAX_CODE_LINES = 40
MAX_TEXT = 6000


@dataclass
class EpisodesLoaded(Message):
    rows: list[trajectories.EpisodeRow]
    notes: dict[int, str]  # kernel's sample id → its verdict note (db/verdict.py)


@dataclass
class StepsLoaded(Message):
    episode: trajectories.Episode | None
    steps: list[trajectories.Step]


def _num(value: Any, fmt: str = "{:.1f}") -> str:
    return "—" if value is None else fmt.format(value)


class AgentEpisodesScreen(Screen):
    """Every agent episode in the store, newest first."""

    BINDINGS = [*keys.bindings("agents"), *(b for b in keys.bindings("table") if getattr(b, "id", None) == "table.mark")]
    AUTO_FOCUS = "#agents-table"

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[trajectories.EpisodeRow] = []
        self.notes: dict[int, str] = {}
        self.marked: list[int] = []  # episode ids, in the order selected

    def compose(self) -> ComposeResult:
        yield StoreBanner()
        yield Static("Agent episodes — reading…", id="agents-head", classes="head")
        yield Table(id="agents-table")
        yield KeyBar()

    def on_mount(self) -> None:
        table = self.query_one(Table)
        table.add_columns(" ", "episode", "model", "task", "agent", "ended", "replies", "calls", "tokens", "wall s",
                          "GPU s", "kernel", "verdict", "speedup")
        self.load()

    @work(thread=True, exclusive=True, group="agents", exit_on_error=False, description="agent episodes")
    def load(self) -> None:
        try:
            read = self.app.reader.read  # type: ignore[attr-defined]
            rows = read(trajectories.episode_rows)
            kernels = sorted({r.sample_id for r in rows if r.sample_id is not None})
            # The verdict as every view writes it: a kernel that never ran, or fails at held-out sizes, says so.
            notes = {line.id: line.note for line in read(triage.lines_for, kernels)}
        except Exception as exc:  # reported, never fatal
            self.post_message(StoreFailed(f"agent episodes: {exc}"))
            return
        self.post_message(EpisodesLoaded(rows, notes))

    def on_episodes_loaded(self, message: EpisodesLoaded) -> None:
        self.rows = message.rows
        self.notes = message.notes
        self.redraw()

    def redraw(self) -> None:
        table = self.query_one(Table)
        table.clear()
        for r in self.rows:
            table.add_row(
                "✓" if r.episode_id in self.marked else "", str(r.episode_id), r.model, r.task_id, r.agent,
                r.status, str(r.turns), str(r.tool_calls), _num(r.tokens, "{:,}"), _num(r.wall_s), _num(r.gpu_s),
                _num(r.sample_id, "{}"), self.verdict_of(r), _num(r.speedup, "{:.3f}×"),
            )
        chosen = f" · {len(self.marked)} selected (d diffs two)" if self.marked else ""
        head = (f"Agent episodes — {len(self.rows):,} (⏎ replays one, space selects, d diffs two kernels){chosen}"
                if self.rows else "No agent episodes in this store yet (ptxbench run --agent, ptxbench mcp).")
        shown = {self.notes.get(r.sample_id, "") for r in self.rows if r.sample_id is not None} - {""}
        if shown:
            head += f"\n[dim]{legend(shown)}[/dim]"
        self.query_one("#agents-head", Static).update(head)

    def verdict_of(self, row: trajectories.EpisodeRow) -> str:
        if row.sample_id is None or row.category is None:
            return "—"
        return verdict(row.category, self.notes.get(row.sample_id, ""))

    def _current(self) -> trajectories.EpisodeRow | None:
        table = self.query_one(Table)
        if not self.rows or table.cursor_row is None or not 0 <= table.cursor_row < len(self.rows):
            return None
        return self.rows[table.cursor_row]

    @on(DataTable.RowSelected, "#agents-table")
    def _open(self, event: DataTable.RowSelected) -> None:
        row = self._current()
        if row is not None:
            self.app.push_screen(AgentStepsScreen(row.episode_id))

    def action_toggle_mark(self) -> None:
        row = self._current()
        if row is None:
            return
        if row.episode_id in self.marked:
            self.marked.remove(row.episode_id)
        else:
            self.marked.append(row.episode_id)
        cursor = self.query_one(Table).cursor_row
        self.redraw()
        self.query_one(Table).move_cursor(row=cursor)

    def action_diff(self) -> None:
        """The kernels of the two selected episodes (or of the last selected and the one under the cursor)."""
        by_id = {r.episode_id: r for r in self.rows}
        chosen = [by_id[i] for i in self.marked if i in by_id][-2:]
        current = self._current()
        if len(chosen) < 2 and current is not None and current not in chosen:
            chosen.append(current)
        kernels = [r.sample_id for r in chosen if r.sample_id is not None]
        if len(kernels) < 2:
            self.notify("Mark two episodes that left a kernel (space), then d.", severity="warning")
            return
        self.post_message(ShowDiff(kernels[0], kernels[1]))

    def action_back(self) -> None:
        self.app.pop_screen()


class AgentStepsScreen(Screen):
    """One episode, step by step."""

    BINDINGS = keys.bindings("agent")
    AUTO_FOCUS = "#steps-table"

    def __init__(self, episode_id: int) -> None:
        super().__init__()
        self.episode_id = episode_id
        self.episode: trajectories.Episode | None = None
        self.steps: list[trajectories.Step] = []

    def compose(self) -> ComposeResult:
        yield StoreBanner()
        yield Static(f"Episode {self.episode_id} — reading…", id="steps-head", classes="head")
        yield Table(id="steps-table")
        with VerticalScroll(id="steps-detail-scroll"):
            yield Static("", id="steps-detail", markup=False)
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(Table).add_columns("step", "reply", "what", "status", "category", "s", "GPU s", "tokens")
        self.load()

    @work(thread=True, exclusive=True, group="agent-steps", exit_on_error=False, description="agent steps")
    def load(self) -> None:
        def read(conn: Any) -> tuple[Any, Any]:
            return trajectories.get_episode(conn, self.episode_id), trajectories.steps_of(conn, self.episode_id)

        try:
            episode, steps = self.app.reader.read(read)  # type: ignore[attr-defined]
        except Exception as exc:  # reported, never fatal
            self.post_message(StoreFailed(f"episode {self.episode_id}: {exc}"))
            return
        self.post_message(StepsLoaded(episode, steps))

    def on_steps_loaded(self, message: StepsLoaded) -> None:
        self.episode, self.steps = message.episode, message.steps
        ep = self.episode
        head = f"Episode {self.episode_id} — not in this store"
        if ep is not None:
            tokens = "" if ep.tokens_in is None else f", {ep.tokens_in + (ep.tokens_out or 0):,} tokens"
            cost = "" if ep.cost is None else f", cost {ep.cost:.4g}"
            kernel = f"; kernel: sample {ep.sample_id} (k opens it)" if ep.sample_id else "; no kernel"
            head = (f"Episode {ep.id} · {markup_value(ep.task_id)} · {markup_value(ep.agent)} · {markup_value(ep.status)} · "
                    f"{ep.turns} replies, {ep.tool_calls} "
                    f"tool calls{tokens}{cost}, {_num(ep.wall_s)} s ({_num(ep.gpu_s)} s on a GPU){kernel}")
        self.query_one("#steps-head", Static).update(head)
        table = self.query_one(Table)
        table.clear()
        for s in self.steps:
            what = s.tool if s.kind == "tool" else ("reply" if s.kind == "model" else "note")
            category = s.result.get("category") if isinstance(s.result, dict) else None
            used = None if s.tokens_in is None else s.tokens_in + (s.tokens_out or 0)
            table.add_row(str(s.step), _num(s.turn, "{}"), what or "?", s.status, category or "",
                          _num(s.seconds, "{:.2f}"), _num(s.gpu_s, "{:.2f}"), _num(used, "{:,}"))
        self.show_detail(0)

    @on(DataTable.RowHighlighted, "#steps-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_detail(event.cursor_row)

    def show_detail(self, index: int) -> None:
        detail = self.query_one("#steps-detail", Static)
        if not 0 <= index < len(self.steps):
            detail.update("")
            return
        detail.update(step_text(self.steps[index]))

    def _move(self, backwards: bool) -> None:
        table = self.query_one(Table)
        here = table.cursor_row or 0
        order = range(here - 1, -1, -1) if backwards else range(here + 1, len(self.steps))
        for i in order:
            if self.steps[i].status != "ok":
                table.move_cursor(row=i)
                return
        self.notify("No more failed or skipped steps that way.")

    def action_next_item(self) -> None:
        self._move(False)

    def action_prev_item(self) -> None:
        self._move(True)

    def action_open_kernel(self) -> None:
        if self.episode is None or self.episode.sample_id is None:
            self.notify("This episode left no kernel.", severity="warning")
            return
        self.post_message(ShowSample(self.episode.sample_id))

    def action_back(self) -> None:
        self.app.pop_screen()


class _InertText(Text):
    """A Text whose appended strings are made inert first (json.dumps with ensure_ascii=False
    keeps C1 controls and bidi characters as they are)."""

    def append(self, text: Any, style: Any = None) -> "Text":
        return super().append(inert(text) if isinstance(text, str) else text, style)


def _short(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n… {len(text) - limit:,} more characters"


def _code(code: str) -> str:
    lines = code.splitlines()
    shown = "\n".join(lines[:MAX_CODE_LINES])
    more = f"\n… {len(lines) - MAX_CODE_LINES:,} more lines" if len(lines) > MAX_CODE_LINES else ""
    return shown + more


def step_text(step: trajectories.Step) -> Text:
    """A step written out: what was called with what, and what came back. Every part is the
    model's or a tool's, so every part is made inert (the Text is shown without markup)."""
    out = _InertText()
    out.append(f"Step {step.step}", style="bold")
    out.append(f" · {step.kind}{' ' + step.tool if step.tool else ''} · {step.status}\n\n")
    if step.kind == "model":
        content = (step.result or {}).get("content") or ""
        if content:
            out.append("Reply\n", style="bold")
            out.append(_short(content) + "\n\n")
        for call in (step.result or {}).get("tool_calls") or []:
            out.append(f"calls {call.get('name')} ({call.get('id')})\n", style="italic")
        return out
    if step.kind == "tool":
        args = trajectories.step_arguments(step)
        out.append("Arguments\n", style="bold")
        if isinstance(args, dict):
            for key, value in args.items():
                if key == "code" and isinstance(value, str):
                    out.append(f"code ({len(value.splitlines()):,} lines):\n", style="italic")
                    out.append(_code(value) + "\n")
                else:
                    out.append(f"{key}: ", style="italic")
                    out.append(_short(json.dumps(value, ensure_ascii=False), 2000) + "\n")
        else:
            out.append(_short(str(args)) + "  (not JSON)\n")
        out.append("\nResult\n", style="bold")
    out.append(_short(json.dumps(step.result, indent=2, ensure_ascii=False, default=str)))
    return out
