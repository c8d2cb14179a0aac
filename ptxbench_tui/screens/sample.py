"""One sample: highlighted PTX, SASS with the requested families marked, the
assembler's report, the evidence of a failure, timings against the baseline,
and the history of its judgements and labels."""

from __future__ import annotations

import json
import re
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static, TabbedContent, TabPane

from ptxbench.db import browse
from ptxbench.engine.categories import DESCRIPTIONS, Category
from ptxbench.tui import keys
from ptxbench.tui.host import host
from ptxbench.tui.marks import ptx_marker, sass_marker
from ptxbench.tui.messages import DetailLoaded, Reverify, ShowDiff, StepUnlabelled, StoreFailed
from ptxbench.tui.screens.moves import KernelMoves
from ptxbench.tui.untrusted import markup_value
from ptxbench.tui.verdict import LEGEND, NOTE_TEXT, note_of, verdict_of
from ptxbench.tui.widgets.code_view import PtxView, SassView
from ptxbench.tui.widgets.common import TextTable, num, speed
from ptxbench.tui.widgets.key_bar import KeyBar
from ptxbench.tui.widgets.store_banner import StoreBanner

TABS = ("tab-ptx", "tab-sass", "tab-asm", "tab-evidence", "tab-timing", "tab-history")
_LOG_LINE = re.compile(r"line (\d+)[;:,]")


def evidence_line(detail: browse.SampleDetail) -> int | None:
    """1-based PTX line the failure points at: stored with the evidence, else read off the assembler log."""
    latest = detail.latest
    if latest is None:
        return None
    ev = latest.evidence if isinstance(latest.evidence, dict) else {}
    for key in ("line", "evidence_line"):
        value = ev.get(key)
        if isinstance(value, int) and value > 0:
            return value
    for nested in ev.values():
        if isinstance(nested, dict) and isinstance(nested.get("line"), int):
            return nested["line"]
    if latest.assembler_log and (m := _LOG_LINE.search(latest.assembler_log)):
        return int(m.group(1))
    return None


def evidence_message(ev: Any) -> tuple[str | None, str | None]:
    """(message, offending source line) from an evaluation's evidence.

    The engine nests each stage's evidence ({"static": {"evidence": …, "line": …, "source": …}})."""
    message = source = None
    if isinstance(ev, dict):
        for part in (ev, *[v for v in ev.values() if isinstance(v, dict)]):
            message = message or part.get("message") or (part.get("evidence") if isinstance(part.get("evidence"), str) else None)
            source = source or (part.get("source") if isinstance(part.get("source"), str) else None)
    elif isinstance(ev, str):
        message = ev
    return message, source


def coverage_lines(evidence: Any, executed: bool | None) -> list[str]:
    """What the marked copy saw (engine/coverage.py): each requested family, the sizes where it ran, and
    the ones where it did not, in a line each; [] for an evaluation without it."""
    cov = browse.coverage_of(evidence)
    if cov is None:
        return []
    verdict = {True: "every family ran at every train size", False: "a family never ran at a train size",
               None: "not measured at every train size"}.get(executed, "not measured")
    lines = [f"\n[b]requested families run[/b] (the marked copy)   {verdict}"]
    if cov.note:
        lines.append(f"  {markup_value(cov.note)}")
    for f in cov.families:
        line = (f"  {markup_value(f.family)}: ran at {f.ran} of {f.looked} sizes"
                + (f" ({f.sites} instructions marked)" if f.sites is not None else ""))
        for state, split, sizes in f.not_ran:
            line += f"\n    {markup_value(state)} at {markup_value(split)} {markup_value(_size_text(sizes))}"
        lines.append(line)
    for split, sizes, why in cov.unseen:
        lines.append(f"  not looked at {markup_value(split)} {markup_value(_size_text(sizes))}: {markup_value(why)}")
    return lines


def _size_text(sizes: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())


def evidence_text(detail: browse.SampleDetail) -> str:
    latest = detail.latest
    if latest is None:
        return "Never evaluated. Press r to judge it now (Live)."
    ev: Any = latest.evidence
    lines = [f"[b]{markup_value(latest.category)}[/b] — {markup_value(DESCRIPTIONS.get(latest.category, latest.status))}"]
    if latest.stage:
        lines.append(f"stage: {markup_value(latest.stage)}   status: {markup_value(latest.status)}")
    message, source = evidence_message(latest.evidence)
    if message:
        lines.append(f"\n[b]message[/b]  {markup_value(str(message))}")
    if source:
        lines.append(f"[b]the line[/b]     {markup_value(source.strip())}")
    line = evidence_line(detail)
    if line:
        lines.append(f"[b]at PTX line[/b] {line}   (g jumps there)")
    worst = rel = None
    if isinstance(ev, dict):
        for part in (ev, *[v for v in ev.values() if isinstance(v, dict)]):
            worst = worst if worst is not None else part.get("worst")
            rel = rel if rel is not None else part.get("max_rel_err")
    wrong = [m for m in detail.measurements if m.worst]
    if worst is None and wrong:
        worst, rel = wrong[0].worst, wrong[0].max_rel_err
    if worst is not None:
        lines.append("\n[b]worst element[/b]")
        if isinstance(worst, dict):
            for k, v in worst.items():
                lines.append(f"  {markup_value(str(k))}: {markup_value(str(v))}")
        else:
            lines.append(f"  {markup_value(str(worst))}")
    if rel is not None:
        lines.append(f"  max relative error: {rel:.3g}")
    if latest.required_missing:
        lines.append("\n[b]requested but missing[/b]")
        for m in latest.required_missing:
            lines.append(f"  {markup_value(json.dumps(m) if isinstance(m, dict) else str(m))}")
    lines += coverage_lines(ev, latest.executed)
    extra = {k: v for k, v in ev.items()
             if k not in ("message", "evidence", "line", "evidence_line", "worst", "max_rel_err", "coverage")
             } if isinstance(ev, dict) else {}
    if extra:
        lines.append("\n[b]more evidence[/b]")
        # Every bracket escaped: JSON such as ["-arch=sm_90a"] reads as a Textual tag otherwise.
        lines.append(markup_value(json.dumps(extra, indent=2, default=str)))
    label = detail.label
    if label:
        fix = "  ★ Fixit candidate" if label.fixit_candidate else ""
        lines.append(f"\n[b]label[/b] {markup_value(label.category or '(category unchanged)')} by {markup_value(label.author)}{fix}")
        if label.note:
            lines.append(f"  {markup_value(label.note)}")
    return "\n".join(lines)


def resources_text(latest: browse.Evaluation | None) -> str:
    if latest is None:
        return "No assembler report: never evaluated."
    res = latest.resources or {}
    out = []
    # One entry per kernel ({"name": {...}}) or a flat dict for one kernel.
    entries = res.items() if res and all(isinstance(v, dict) for v in res.values()) else [("", res)]
    for name, r in entries:
        head = f"[b]{markup_value(name)}[/b]  " if name else ""
        regs = r.get("registers")
        smem = r.get("shared_bytes", r.get("smem_bytes", r.get("shared")))
        spill = (r.get("spill_stores", r.get("spill_store_bytes")) or 0, r.get("spill_loads", r.get("spill_load_bytes")) or 0)
        flag = "  [reverse] spills [/]" if any(spill) else ""
        out.append(f"{head}registers {regs if regs is not None else '—'} · shared {smem if smem is not None else '—'} B · "
                   f"spill stores {spill[0]} B, loads {spill[1]} B{flag}")
        rest = {k: v for k, v in r.items() if k not in ("registers", "shared_bytes", "smem_bytes", "shared", "spill_stores", "spill_loads",
                                                         "spill_store_bytes", "spill_load_bytes", "name") and v not in ({}, None)}
        if rest:
            out.append("  " + markup_value(", ".join(f"{k} {v}" for k, v in rest.items())))
    if latest.warnings:
        out.append("\n[b]warnings[/b]")
        for w in latest.warnings:
            out.append("  " + markup_value(w.get("text", json.dumps(w)) if isinstance(w, dict) else str(w)))
    fams = f"PTX: {', '.join(latest.ptx_families) or '—'}   SASS: {', '.join(latest.sass_families) or '—'}"
    out.append(f"\n[b]families found[/b]  {markup_value(fams)}")
    out.append("\n[b]assembler log[/b]")
    out.append(markup_value(latest.assembler_log or "(empty)"))
    return "\n".join(out)


def verdict_line(detail: browse.SampleDetail) -> str:
    """What the category alone does not say: the held-out sizes it fails at, or that it never ran."""
    latest = detail.latest
    if latest is None:
        return ""
    note = note_of(latest.status, latest.correct, latest.correct_heldout)
    if note == "not_run":
        return (f"[b $text-warning]{NOTE_TEXT[note]}[/]: {markup_value(latest.status)} — only the static stages judged it "
                "(assembled and inspected); whether it is correct and how fast it is are unknown")
    if note == "heldout":
        bad = [m for m in detail.measurements if m.split == "heldout" and m.category != Category.OK]
        where = "; ".join(f"{markup_value(m.category)} at {markup_value(' '.join(f'{k}={v}' for k, v in (m.sizes or {}).items()))}"
                          for m in bad[:3]) or "see Timing"
        return f"[b $text-error]{NOTE_TEXT[note]}[/]: correct on the train sizes, wrong at held-out sizes: {where}"
    return ""


class SampleScreen(KernelMoves, Screen):
    KEY_SCOPE = "sample"  # its section in the help
    BINDINGS = keys.bindings("sample")
    AUTO_FOCUS = "#sample-ptx"

    def __init__(self, sample_id: int, *, line: int | None = None) -> None:
        super().__init__()
        self.sample_id = sample_id
        self.line = line  # 1-based PTX line to open at (a search match)
        self.detail: browse.SampleDetail | None = None
        self._sass_shown = False

    def compose(self) -> ComposeResult:
        yield StoreBanner()
        yield Static(f"Sample {self.sample_id} — loading…", id="sample-head", classes="head")
        with TabbedContent(id="sample-tabs"):
            with TabPane("PTX", id="tab-ptx"):
                yield PtxView(id="sample-ptx")
            with TabPane("SASS", id="tab-sass"):
                yield SassView(id="sample-sass")
            with TabPane("Assembler", id="tab-asm"):
                with VerticalScroll():
                    yield Static("", id="sample-asm")
            with TabPane("Evidence", id="tab-evidence"):
                with VerticalScroll():
                    yield Static("", id="sample-evidence")
            with TabPane("Timing", id="tab-timing"):
                yield Static("", id="sample-timing-head")
                yield TextTable(id="sample-timing", zebra_stripes=True)
            with TabPane("History", id="tab-history"):
                with VerticalScroll():
                    yield Static("", id="sample-history")
        yield KeyBar()

    def on_mount(self) -> None:
        self.load()
        self.watch(self.app, "data_version", lambda _: self.load(), init=False)

    @work(thread=True, exclusive=True, group="sample-detail", exit_on_error=False, description="sample detail")
    def load(self) -> None:
        try:
            detail = host(self).reader.read(browse.sample_detail, self.sample_id)
        except Exception as exc:
            self.post_message(StoreFailed(f"sample {self.sample_id}: {exc}"))
            return
        self.post_message(DetailLoaded(detail))

    def on_detail_loaded(self, message: DetailLoaded) -> None:
        detail = message.detail
        if detail is None:
            self.query_one("#sample-head", Static).update(f"No sample {self.sample_id} in this store.")
            return
        self.detail = detail
        latest = detail.latest
        verdict = verdict_of(latest, detail.evaluations)
        label = f" · label: {detail.label.category or 'note'}" if detail.label else ""
        fixit = " · ★ Fixit" if detail.label and detail.label.fixit_candidate else ""
        head = (f"[b]Sample {detail.id}[/b] · {markup_value(detail.task_id)} ({markup_value(detail.arch)}) · "
                f"{markup_value(detail.model)} · level {markup_value(detail.context_level)}"
                f" · turn {detail.turn} · [b]{markup_value(verdict)}[/b]{markup_value(label)}{fixit}\n"
                f"[dim]{markup_value(detail.source)} · requested: {markup_value(', '.join(detail.families) or 'none')}"
                f"{' · device ' + markup_value(latest.device) if latest and latest.device else ''}[/]")
        if latest and latest.category != Category.OK:
            message, _ = evidence_message(latest.evidence)
            line = evidence_line(detail)
            if message:
                where = f" (PTX line {line}; g jumps there)" if line else ""
                head += f"\n[b $text-error]{markup_value(latest.category)}[/]: {markup_value(str(message)[:300])}{where}"
        if more := verdict_line(detail):
            head += f"\n{more}\n[dim]{markup_value(LEGEND)}[/]"
        self.query_one("#sample-head", Static).update(head)
        ptx_view = self.query_one("#sample-ptx", PtxView)
        ptx_view.show(detail.ptx, marker=ptx_marker(detail.families))
        self._sass_shown = False
        if self._tabs().active == "tab-sass":
            self._show_sass()
        self.query_one("#sample-asm", Static).update(resources_text(latest))
        self.query_one("#sample-evidence", Static).update(evidence_text(detail))
        line = evidence_line(detail)
        if line is not None and latest and latest.category != Category.OK:
            ptx_view.mark_evidence(line - 1)
        if self.line is not None:
            ptx_view.show_line(self.line - 1)
        self._timing(detail)
        self._history(detail)

    def _show_sass(self) -> None:
        """The SASS is laid out when its tab is first opened: it can be several times longer than the PTX."""
        if self._sass_shown or self.detail is None:
            return
        self._sass_shown = True
        latest = self.detail.latest
        sass = (latest.sass if latest else None) or ""
        self.query_one("#sample-sass", SassView).show(
            sass or "No SASS: the kernel did not assemble, or was never evaluated.", marker=sass_marker(self.detail.families)
        )

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id == "tab-sass":
            self._show_sass()

    def _timing(self, detail: browse.SampleDetail) -> None:
        latest = detail.latest
        head = "Never timed."
        if latest and latest.time_ms is not None:
            head = (f"headline: {num(latest.time_ms)} ms vs baseline {num(latest.baseline_ms)} ms → "
                    f"[b]{speed(latest.speedup)}[/b]" + (f" · {latest.tflops:.1f} TFLOP/s" if latest.tflops else "")
                    + (f" · {latest.sol_fraction:.0%} of the speed of light" if latest.sol_fraction else ""))
        elif latest and latest.status.startswith("skipped"):
            head = f"Not timed: {markup_value(latest.status)}."
        self.query_one("#sample-timing-head", Static).update(head)
        table = self.query_one("#sample-timing", DataTable)
        table.clear(columns=True)
        table.add_columns("Split", "Sizes", "Category", "Max rel. err", "ms", "Spread", "Baseline ms", "Speedup", "TFLOP/s",
                          "of SOL")
        for m in detail.measurements:
            sizes = " ".join(f"{k}={v}" for k, v in m.sizes.items()) if isinstance(m.sizes, dict) else str(m.sizes)
            table.add_row(m.split, sizes, m.category, num(m.max_rel_err, "{:.2e}"), num(m.time_ms), num(m.time_spread, "{:.1%}"),
                          num(m.baseline_ms), speed(m.speedup), num(m.tflops, "{:.1f}"), num(m.sol_fraction, "{:.0%}"))

    def _history(self, detail: browse.SampleDetail) -> None:
        out = ["[b]Evaluations[/b] (newest first; re-verifying adds one, none is ever changed; "
               "▸ speaks for the sample, V switches most complete / newest)"]
        for e in detail.evaluations:
            out.append(f"{'▸' if e.id == detail.shown_id else ' '} #{e.id} {markup_value(e.created_at)} · {markup_value(e.category)} · {markup_value(e.status)} · {markup_value(e.device or '')} · "
                       f"engine {markup_value(e.engine_version)} · {speed(e.speedup)} · [dim]{markup_value(e.source)}[/]")
        if not detail.evaluations:
            out.append("  none")
        out.append("\n[b]Labels[/b] (a person's triage, beside the automatic category)")
        for lab in detail.labels:
            star = " ★ Fixit" if lab.fixit_candidate else ""
            out.append(f"  {markup_value(lab.created_at)} {markup_value(lab.author)}: {markup_value(lab.category or '(category unchanged)')}{star} — {markup_value(lab.note)}")
        if not detail.labels:
            out.append("  none")
        out.append("\n[b]Fixes[/b]")
        for f in detail.fixes:
            out.append(f"  {f.failed_sample_id} → {f.fixed_sample_id}: {markup_value(f.explanation)} [dim]({markup_value(f.explanation_source)})[/]")
        if not detail.fixes:
            out.append("  none")
        if detail.parent_id:
            out.append(f"\nfollows turn sample {detail.parent_id}")
        self.query_one("#sample-history", Static).update("\n".join(out))

    # -- actions ---------------------------------------------------------------------
    def _tabs(self) -> TabbedContent:
        return self.query_one("#sample-tabs", TabbedContent)

    def action_back(self) -> None:
        self.dismiss()

    def action_next_tab(self) -> None:
        tabs = self._tabs()
        tabs.active = TABS[(TABS.index(tabs.active) + 1) % len(TABS)]

    def action_prev_tab(self) -> None:
        tabs = self._tabs()
        tabs.active = TABS[(TABS.index(tabs.active) - 1) % len(TABS)]

    def action_goto_evidence(self) -> None:
        if self.detail is None:
            return
        line = evidence_line(self.detail)
        if line is None:
            self.notify("No line to jump to: the evidence names none.")
            return
        self._tabs().active = "tab-ptx"
        view = self.query_one("#sample-ptx", PtxView)
        view.mark_evidence(line - 1)
        view.focus()

    def action_next_mark(self) -> None:
        tabs = self._tabs()
        if tabs.active not in ("tab-ptx", "tab-sass"):
            tabs.active = "tab-sass"
        self._show_sass()
        view = self.query_one("#sample-sass" if tabs.active == "tab-sass" else "#sample-ptx")
        assert isinstance(view, (PtxView, SassView))
        if view.next_mark() is None:
            self.notify("No instruction of a requested family here.")
        view.focus()

    def action_diff(self) -> None:
        self.post_message(ShowDiff(self.sample_id, None))

    def action_next_item(self) -> None:
        self.post_message(StepUnlabelled(self.sample_id))

    def action_prev_item(self) -> None:
        self.post_message(StepUnlabelled(self.sample_id, backwards=True))

    def move_targets(self) -> list[int]:
        return [self.sample_id]

    def editor_line(self) -> int | None:
        return self.query_one("#sample-ptx", PtxView).cursor_location[0] + 1

    def action_copy_code(self) -> None:
        """The listing on screen: the SASS on its tab, else the PTX."""
        if self.detail is None:
            return
        sass = self._tabs().active == "tab-sass"
        text = ((self.detail.latest.sass if self.detail.latest else None) or "") if sass else self.detail.ptx
        self.app.copy_to_clipboard(text)
        self.notify(f"Copied sample {self.sample_id}'s {'SASS' if sass else 'PTX'} ({len(text.splitlines()):,} lines)")

    def action_label(self) -> None:
        host(self).ask_label(self.sample_id)

    def action_fixit(self) -> None:
        host(self).toggle_fixit(self.sample_id)

    def action_reverify(self) -> None:
        self.post_message(Reverify([self.sample_id]))
