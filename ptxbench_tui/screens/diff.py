"""Diff two samples: a failed kernel beside its fix, or any two.

The diff is computed in a worker thread (the view says so while it runs);
`n`/`p` walk its hunks, `[`/`]` change what is diffed (PTX, launch manifest,
SASS, assembler log, evidence), and the noise filters re-run it.
"""

from __future__ import annotations

from dataclasses import replace

from textual import work
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Static

from ptxbench.db import browse
from ptxbench.tui import keys
from ptxbench.tui.diffing import TARGET_NAMES, TARGETS, DiffOptions, diff, text_of
from ptxbench.tui.messages import DiffReady, StoreFailed
from ptxbench.tui.ptx_lexer import PtxbenchLexer, SassLexer
from ptxbench.tui.screens.moves import KernelMoves
from ptxbench.tui.untrusted import markup_value
from ptxbench.tui.verdict import verdict_of
from ptxbench.tui.widgets.diff_view import DiffView
from ptxbench.tui.widgets.key_bar import KeyBar
from ptxbench.tui.widgets.store_banner import StoreBanner

CONTEXT_STEPS = (0, 1, 3, 8, 20, -1)
LEXERS = {"ptx": PtxbenchLexer, "sass": SassLexer}


class DiffScreen(KernelMoves, Screen):
    KEY_SCOPE = "diff"  # its section in the help
    BINDINGS = keys.bindings("diff")
    AUTO_FOCUS = "#diff-view"

    def __init__(self, left: int, right: int | None = None, target: str = "ptx") -> None:
        super().__init__()
        self.left = left
        self.right = right
        self.options = DiffOptions(target=target)
        self.request = 0
        self.result_stats = ""
        self.hunks = 0
        self.computing = False
        self.titles = ("", "")
        self._details: dict[int, browse.SampleDetail] = {}

    def compose(self) -> ComposeResult:
        yield StoreBanner()
        yield Static("Diff — reading the two samples…", id="diff-head", classes="head")
        yield DiffView(id="diff-view")
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one(DiffView).focus()
        self.recompute()

    def recompute(self) -> None:
        self.request += 1
        self.computing = True
        self.query_one(DiffView).loading = True
        self._head()
        self.compute(self.request, self.left, self.right, self.options)

    @work(thread=True, exclusive=True, group="diff", exit_on_error=False, description="difflib")
    def compute(self, request: int, left: int, right: int | None, opts: DiffOptions) -> None:
        cache = dict(self._details)
        try:
            read = self.app.reader.read  # type: ignore[attr-defined]
            if right is None:
                right = read(browse.fix_partner, left)
                if right is None:
                    self.post_message(StoreFailed(f"sample {left} has no fix and follows no turn: press # to pick a sample to diff with"))
                    return
            details = []
            for sid in (left, right):
                detail = cache.get(sid) or read(browse.sample_detail, sid)
                if detail is None:
                    self.post_message(StoreFailed(f"no sample {sid} in this store"))
                    return
                cache[sid] = detail
                details.append(detail)
            result = diff(text_of(details[0], opts.target), text_of(details[1], opts.target), opts)
        except Exception as exc:
            self.post_message(StoreFailed(f"diff: {exc}"))
            return
        titles = [f"#{d.id} {d.model} · {verdict_of(d.latest)}" for d in details]
        self.post_message(DiffReady(request, titles[0], titles[1], result, result.stats, right, cache))

    def on_diff_ready(self, message: DiffReady) -> None:
        if message.request != self.request:
            return
        self.right = message.right
        self._details = message.details
        self.titles = (message.left_title, message.right_title)
        self.result_stats = message.stats
        self.hunks = len(message.result.hunks)
        self.computing = False
        view = self.query_one(DiffView)
        view.loading = False
        view.show(message.result, LEXERS.get(self.options.target))
        self._head()

    def _head(self, where: str = "") -> None:
        o = self.options
        context = "all" if o.context < 0 else str(o.context)
        if self.computing:
            where = "computing the diff…"
        elif not where:
            where = f"{self.hunks} change{'s' if self.hunks != 1 else ''} (n/p walk them)" if self.hunks else ""
        flags = [
            "side by side" if self.query_one(DiffView).split else "unified",
            "noise hidden" if o.noise else "noise shown",
            "registers renumbered" if o.registers else "registers as written",
            "whitespace ignored" if o.whitespace else "whitespace counts",
            f"context {context}",
        ]
        self.query_one("#diff-head", Static).update(
            f"[b]{TARGET_NAMES[o.target]}[/b]  {markup_value(self.titles[0])}  ⟷  {markup_value(self.titles[1])}   "
            f"[b]{markup_value(self.result_stats)}[/b]  {markup_value(where)}\n[dim]{' · '.join(flags)} · [ ] what to diff[/]"
        )

    def _set(self, **changes) -> None:
        self.options = replace(self.options, **changes)
        self.recompute()

    # -- actions ---------------------------------------------------------------------
    def action_back(self) -> None:
        self.dismiss()

    def action_next_item(self) -> None:
        self._jump(backwards=False)

    def action_prev_item(self) -> None:
        self._jump(backwards=True)

    def _jump(self, *, backwards: bool) -> None:
        index = self.query_one(DiffView).next_hunk(backwards=backwards)
        if index is None:
            self.notify("No changes here.")
            return
        self._head(f"change {index + 1} of {self.hunks}")

    def action_toggle_split(self) -> None:
        view = self.query_one(DiffView)
        view.split = not view.split
        self._head()

    def action_next_tab(self) -> None:
        self._set(target=TARGETS[(TARGETS.index(self.options.target) + 1) % len(TARGETS)])

    def action_prev_tab(self) -> None:
        self._set(target=TARGETS[(TARGETS.index(self.options.target) - 1) % len(TARGETS)])

    def action_toggle_noise(self) -> None:
        self._set(noise=not self.options.noise)

    def action_toggle_registers(self) -> None:
        self._set(registers=not self.options.registers)

    def action_toggle_whitespace(self) -> None:
        self._set(whitespace=not self.options.whitespace)

    def action_less_context(self) -> None:
        i = CONTEXT_STEPS.index(self.options.context) if self.options.context in CONTEXT_STEPS else 2
        self._set(context=CONTEXT_STEPS[max(0, i - 1)])

    def action_more_context(self) -> None:
        i = CONTEXT_STEPS.index(self.options.context) if self.options.context in CONTEXT_STEPS else 2
        self._set(context=CONTEXT_STEPS[min(len(CONTEXT_STEPS) - 1, i + 1)])

    def action_swap(self) -> None:
        if self.right is None:
            return
        self.left, self.right = self.right, self.left
        self.recompute()

    def move_targets(self) -> list[int]:
        return [self.left] + ([self.right] if self.right is not None else [])

    def action_pick_other(self) -> None:
        from ptxbench.tui.screens.dialogs import PickSampleDialog

        def chosen(sample_id: int | None) -> None:
            if sample_id is not None:
                self.right = sample_id
                self.recompute()

        self.app.push_screen(PickSampleDialog(f"Diff sample {self.left} with sample id:"), chosen)
