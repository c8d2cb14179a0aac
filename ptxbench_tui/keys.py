"""Every key binding of the explorer, in one place.

Screens and widgets take their `BINDINGS` from here, so the footer, the help
screen and the command palette (commands.py) show the same actions, and a
user keymap (config.py) can rebind any of them by id through
`App.set_keymap`. Ids are `<scope>.<name>`.

A key means one thing wherever it is bound: `n`/`p` are always "the next /
previous thing worth looking at" (an unlabelled failure in the samples, a
changed hunk in a diff), `o` always sorts, `/` always filters, `e` always
opens a kernel in `$EDITOR`, `y`/`Y` always copy. tests/tui/test_keys.py
holds the registry to that.
"""

from __future__ import annotations

from textual.binding import Binding, BindingType

VIEWS = Binding.Group("Views", compact=True)
VIEW_IDS = frozenset(f"app.{m}" for m in ("overview", "tasks", "samples", "triage", "compare", "live", "plots", "fixit"))

# (scope, id, key, action, description, tooltip, show)
_REGISTRY: list[tuple[str, str, str, str, str, str, bool]] = [
    # -- app: top-level views are modes, switched by number keys ---------------------
    ("app", "app.overview", "1", "switch_mode('overview')", "Overview", "Rates per model × task × arch × context level", True),
    ("app", "app.tasks", "2", "switch_mode('tasks')", "Tasks", "Tasks, their prompts, expert solutions and results", True),
    ("app", "app.samples", "3", "switch_mode('samples')", "Samples", "Every sample, filtered and searched", True),
    ("app", "app.triage", "4", "switch_mode('triage')", "Triage", "Failure categories and labels by model, task, level", True),
    ("app", "app.compare", "5", "switch_mode('compare')", "Compare", "Models side by side on one task", True),
    ("app", "app.live", "6", "switch_mode('live')", "Live", "Re-verify and re-time with the engine", True),
    ("app", "app.plots", "7", "switch_mode('plots')", "Plots", "Speedup distributions and rates", True),
    ("app", "app.fixit", "8", "switch_mode('fixit')", "Fixit", "Fix pairs and the Fixit set's statistics", True),
    ("app", "app.help", "question_mark", "help", "Help", "Keys of this view, then of every view", True),
    ("app", "app.theme", "T", "change_theme", "Theme", "Pick a theme (PTX colours follow it)", False),
    ("app", "app.reload", "ctrl+r", "reload_store", "Reload", "Re-read the store", False),
    ("app", "app.agents", "A", "agent_steps", "Agent episodes", "Agent episodes step by step; on a sample, the episode that made it (docs/agents.md)", False),
    ("app", "app.newest", "V", "toggle_newest", "Newest/complete", "Each sample's newest evaluation, or its most complete one (the default; docs/store.md)", False),
    ("app", "app.quit", "q", "quit", "Quit", "Leave the explorer", True),
    # -- tables (drill into the row under the cursor) ---------------------------------
    ("table", "table.open", "enter", "select_cursor", "Open", "Open the row under the cursor", True),
    ("table", "table.mark", "space", "toggle_mark", "Select", "Add the row to the selection, or take it out (several rows are labelled at once); the cursor stays", True),
    # -- overview ------------------------------------------------------------------
    ("overview", "overview.filter", "slash", "filter", "Filter", "Open the filters (model, task, arch, level)", True),
    ("overview", "overview.sort", "o", "sort", "Sort", "Sort by a column (again: the other direction)", True),
    ("overview", "overview.levels", "z", "toggle_levels", "Fold levels", "Split rows by context level or fold them", True),
    ("overview", "overview.trajectories", "t", "toggle_metrics", "Per trajectory", "Per sample, or per trajectory with pass@k (db.metrics)", True),
    ("overview", "overview.export", "E", "export", "Export", "Write the table as shown to CSV or JSON", True),
    ("overview", "overview.clear", "c", "clear_filters", "Clear", "Show every model, task, arch and level", True),
    # -- tasks ---------------------------------------------------------------------
    ("tasks", "tasks.expert", "k", "open_kernel", "Expert", "Open the expert solution as a sample", True),
    ("tasks", "tasks.prompt", "P", "cycle_prompt", "Prompt level", "Show the prompt at context level none, brief or full", True),
    ("tasks", "tasks.prev_tab", "left_square_bracket", "prev_tab", "Prev tab", "", True),
    ("tasks", "tasks.next_tab", "right_square_bracket", "next_tab", "Next tab", "", True),
    # -- samples -------------------------------------------------------------------
    ("samples", "samples.filter", "slash", "filter", "Filter", "Full-text search and the model, task, arch, level, category filters", True),
    ("samples", "samples.sort", "o", "sort", "Sort", "Sort by a column, in SQL over every filtered sample (again: reverse)", True),
    ("samples", "samples.next", "n", "next_item", "Next unlabelled", "The next failure no person has labelled", True),
    ("samples", "samples.prev", "p", "prev_item", "Prev unlabelled", "The previous failure no person has labelled", True),
    ("samples", "samples.next_page", "greater_than_sign", "next_page", "Next page", "", True),
    ("samples", "samples.prev_page", "less_than_sign", "prev_page", "Prev page", "", True),
    ("samples", "samples.diff", "d", "diff", "Diff", "Diff with its fix (or the turn it follows)", True),
    ("samples", "samples.label", "l", "label", "Label", "Relabel with a note, beside the automatic category (every selected row)", True),
    ("samples", "samples.fixit", "f", "fixit", "Fixit", "Mark or unmark as a Fixit candidate", True),
    ("samples", "samples.unmark", "escape", "clear_marks", "Unselect", "Unselect every selected row", True),
    ("samples", "samples.back", "escape", "back", "Back", "Back to the view that drilled into these samples", True),
    ("samples", "samples.copy_id", "y", "copy_id", "Copy id", "Copy the sample's id (or the selected ids)", True),
    ("samples", "samples.copy_code", "Y", "copy_code", "Copy kernel", "Copy the sample's PTX", True),
    ("samples", "samples.editor", "e", "editor", "$EDITOR", "Open the kernel in $EDITOR (a read-only copy)", True),
    ("samples", "samples.export", "E", "export", "Export", "Write every filtered sample, sorted, to CSV or JSON", True),
    ("samples", "samples.reverify", "r", "reverify", "Re-verify", "Re-verify and re-time this sample (Live)", True),
    ("samples", "samples.reverify_all", "R", "reverify_filtered", "Re-verify all", "Re-verify every sample the filter selects", True),
    ("samples", "samples.clear", "c", "clear_filters", "Clear", "Clear every filter, the search and the sort", True),
    # -- one sample ----------------------------------------------------------------
    ("sample", "sample.back", "escape", "back", "Back", "", True),
    ("sample", "sample.prev_tab", "left_square_bracket", "prev_tab", "Prev tab", "", True),
    ("sample", "sample.next_tab", "right_square_bracket", "next_tab", "Next tab", "", True),
    ("sample", "sample.next", "n", "next_item", "Next unlabelled", "Open the next failure no person has labelled", True),
    ("sample", "sample.prev", "p", "prev_item", "Prev unlabelled", "Open the previous failure no person has labelled", True),
    ("sample", "sample.evidence", "g", "goto_evidence", "Go to error", "Jump to the line the evidence points at", True),
    ("sample", "sample.next_mark", "m", "next_mark", "Next family", "Next instruction of a requested family", True),
    ("sample", "sample.diff", "d", "diff", "Diff", "Diff with its fix (or the turn it follows)", True),
    ("sample", "sample.label", "l", "label", "Label", "Relabel with a note", True),
    ("sample", "sample.fixit", "f", "fixit", "Fixit", "Mark or unmark as a Fixit candidate", True),
    ("sample", "sample.copy_id", "y", "copy_id", "Copy id", "Copy the sample's id", True),
    ("sample", "sample.copy_code", "Y", "copy_code", "Copy kernel", "Copy the PTX (or the SASS on its tab)", True),
    ("sample", "sample.editor", "e", "editor", "$EDITOR", "Open the kernel in $EDITOR (a read-only copy)", True),
    ("sample", "sample.reverify", "r", "reverify", "Re-verify", "Re-verify and re-time (Live)", True),
    # -- diff ----------------------------------------------------------------------
    ("diff", "diff.back", "escape", "back", "Back", "", True),
    ("diff", "diff.next", "n", "next_item", "Next change", "Jump to the next changed hunk", True),
    ("diff", "diff.prev", "p", "prev_item", "Prev change", "Jump to the previous changed hunk", True),
    ("diff", "diff.split", "s", "toggle_split", "Split/unified", "Side by side or unified", True),
    ("diff", "diff.prev_tab", "left_square_bracket", "prev_tab", "Prev target", "PTX, launch manifest, SASS, assembler log, evidence", True),
    ("diff", "diff.next_tab", "right_square_bracket", "next_tab", "Next target", "PTX, launch manifest, SASS, assembler log, evidence", True),
    ("diff", "diff.noise", "N", "toggle_noise", "Noise", "Hide .loc/.file lines and comments", True),
    ("diff", "diff.registers", "percent_sign", "toggle_registers", "Renumber regs", "Renumber registers in order of use", True),
    ("diff", "diff.whitespace", "w", "toggle_whitespace", "Whitespace", "Ignore whitespace", True),
    ("diff", "diff.less", "left_curly_bracket", "less_context", "Less context", "", True),
    ("diff", "diff.more", "right_curly_bracket", "more_context", "More context", "", True),
    ("diff", "diff.swap", "tilde", "swap", "Swap", "Swap the two sides", True),
    ("diff", "diff.other", "number_sign", "pick_other", "Other…", "Diff against another sample id", True),
    ("diff", "diff.editor", "e", "editor", "$EDITOR", "Open both kernels in $EDITOR (read-only copies)", True),
    # -- a code view or a diff, sideways (widgets/sideways.py): the view scrolls -------
    ("code", "code.left", "left", "sideways(-1)", "Left", "One column left", False),
    ("code", "code.right", "right", "sideways(1)", "Right", "One column right", False),
    ("code", "code.jump_left", "shift+left", "sideways(-40)", "40 columns left", "Scroll 40 columns left", True),
    ("code", "code.jump_right", "shift+right", "sideways(40)", "40 columns right", "Scroll 40 columns right (long wgmma lines)", True),
    ("code", "code.line_start", "home", "line_start", "Line start", "Scroll back to the start of the lines", True),
    ("code", "code.line_end", "end", "line_end", "Line end", "Scroll to the end of the longest line on screen", True),
    ("code", "code.top", "ctrl+home", "first_line", "First line", "", False),
    ("code", "code.bottom", "ctrl+end", "last_line", "Last line", "", False),
    # -- triage --------------------------------------------------------------------
    ("triage", "triage.dimension", "G", "cycle_dimension", "Group by", "Columns by model, task or context level", True),
    ("triage", "triage.labels", "L", "toggle_labels", "By label", "Rows by a person's label, or by the automatic category", True),
    ("triage", "triage.ok", "a", "toggle_ok", "All verdicts", "Count passing samples too", True),
    ("triage", "triage.fixit", "F", "fixit_list", "Fixit list", "Samples marked as Fixit candidates", True),
    ("triage", "triage.export", "E", "export", "Export", "Write the counts to CSV or JSON", True),
    # -- compare -------------------------------------------------------------------
    ("compare", "compare.pin", "b", "pin_baseline", "Pin baseline", "Make the model under the cursor the baseline", True),
    ("compare", "compare.diff", "d", "diff", "Diff", "Diff the baseline's kernel with this model's", True),
    ("compare", "compare.copy_id", "y", "copy_id", "Copy id", "Copy the column's sample id", True),
    ("compare", "compare.copy_code", "Y", "copy_code", "Copy kernel", "Copy the column's PTX", True),
    ("compare", "compare.editor", "e", "editor", "$EDITOR", "Open the column's kernel in $EDITOR (a read-only copy)", True),
    # -- live ----------------------------------------------------------------------
    ("live", "live.run", "r", "run", "Run", "Start the engine on the queue", True),
    ("live", "live.cancel", "x", "cancel", "Cancel", "Stop the engine after the current sample (SIGTERM; committed rows stay)", True),
    ("live", "live.kill", "K", "kill", "Kill", "Kill the engine now (SIGKILL; the sample being judged is not written)", True),
    ("live", "live.clear", "c", "clear", "Clear", "Empty the queue and the log", True),
    ("live", "live.open", "enter", "open_result", "Open", "Open the sample of the selected result (else the last one)", True),
    # -- plots ---------------------------------------------------------------------
    ("plots", "plots.prev_tab", "left_square_bracket", "prev_tab", "Prev plot", "", True),
    ("plots", "plots.next_tab", "right_square_bracket", "next_tab", "Next plot", "", True),
    # -- a plot (widgets/plot.py: textual-plot's keys, `r` freed for re-verify) ------
    ("plot", "plot.zoom_in", "plus", "zoom_in", "Zoom in", "", True),
    ("plot", "plot.zoom_out", "minus", "zoom_out", "Zoom out", "", True),
    ("plot", "plot.pan_left", "left", "pan_left", "Pan left", "", False),
    ("plot", "plot.pan_right", "right", "pan_right", "Pan right", "", False),
    ("plot", "plot.pan_up", "up", "pan_up", "Pan up", "", False),
    ("plot", "plot.pan_down", "down", "pan_down", "Pan down", "", False),
    ("plot", "plot.reset", "0", "reset_scales", "Reset zoom", "Back to the whole plot", True),
    # -- fixit ---------------------------------------------------------------------
    ("fixit", "fixit.filter", "slash", "filter", "Filter", "Open the filters (task, category, kind)", True),
    ("fixit", "fixit.sort", "o", "sort", "Sort", "Sort every pair by a column (again: reverse)", True),
    ("fixit", "fixit.diff", "d", "diff", "Diff", "Diff the failed sample with its fix (Enter does too)", True),
    ("fixit", "fixit.explain", "i", "explain", "Explanation", "The pair's explanation in full", True),
    ("fixit", "fixit.verified", "v", "toggle_verified", "Verified only", "Only pairs that count: their fix passed the engine", True),
    ("fixit", "fixit.copy_id", "y", "copy_id", "Copy ids", "Copy the failed and fixed sample ids", True),
    ("fixit", "fixit.editor", "e", "editor", "$EDITOR", "Open the failed kernel and its fix in $EDITOR (read-only copies)", True),
    ("fixit", "fixit.export", "E", "export", "Export", "Write every filtered pair to CSV or JSON", True),
    ("fixit", "fixit.stats", "S", "toggle_stats", "Statistics", "Show or hide the set's statistics (folded below 120 columns)", True),
    ("fixit", "fixit.next_page", "greater_than_sign", "next_page", "Next page", "", True),
    ("fixit", "fixit.prev_page", "less_than_sign", "prev_page", "Prev page", "", True),
    ("fixit", "fixit.clear", "c", "clear_filters", "Clear", "Every pair: task, category, kind and verified-only cleared", True),
    # -- agent episodes (screens/agents.py) --------------------------------------------
    ("agents", "agents.back", "escape", "back", "Back", "", True),
    ("agents", "agents.diff", "d", "diff", "Diff", "Diff the kernels of the two selected episodes", True),
    ("agent", "agent.back", "escape", "back", "Back", "", True),
    ("agent", "agent.next", "n", "next_item", "Next failed step", "The next tool call that failed or was skipped", True),
    ("agent", "agent.prev", "p", "prev_item", "Prev failed step", "The previous tool call that failed or was skipped", True),
    ("agent", "agent.kernel", "k", "open_kernel", "Kernel", "Open the episode's kernel as a sample", True),
    # -- filter bar and dialogs ------------------------------------------------------
    ("filterbar", "filterbar.close", "escape", "close", "Close filters", "Back to the table", True),
    ("dialog", "dialog.cancel", "escape", "cancel", "Cancel", "", True),
    ("dialog", "dialog.save", "ctrl+s", "save", "Save", "", True),
]

# The help screen's sections, in order; `app` and `table` are "everywhere".
SCOPE_TITLES: dict[str, str] = {
    "app": "Everywhere", "table": "In every table", "overview": "Overview (1)", "tasks": "Tasks (2)",
    "samples": "Samples (3)", "sample": "A sample", "diff": "A diff", "triage": "Triage (4)", "compare": "Compare (5)",
    "code": "A code view or a diff", "live": "Live (6)", "plots": "Plots (7)", "plot": "A plot", "fixit": "Fixit (8)", "agents": "Agent episodes (A)", "agent": "An agent episode",
    "filterbar": "The filter bar", "dialog": "Dialogs",
}

# Pairs the footer shows as one entry (`n/p Unlabelled`); help and the palette still list each.
_PAIRS: dict[str, Binding.Group] = {}
for _scope, _first, _second, _title in (
    ("samples", "next", "prev", "Unlabelled"), ("sample", "next", "prev", "Unlabelled"), ("diff", "next", "prev", "Change"),
    ("samples", "next_page", "prev_page", "Page"), ("fixit", "next_page", "prev_page", "Page"),
    ("samples", "copy_id", "copy_code", "Copy id/kernel"), ("sample", "copy_id", "copy_code", "Copy id/kernel"),
    ("compare", "copy_id", "copy_code", "Copy id/kernel"),
    ("plot", "zoom_in", "zoom_out", "Zoom"), ("tasks", "prev_tab", "next_tab", "Tab"), ("sample", "prev_tab", "next_tab", "Tab"), ("plots", "prev_tab", "next_tab", "Plot"),
    ("diff", "prev_tab", "next_tab", "What"), ("diff", "less", "more", "Context"), ("agent", "next", "prev", "Failed step"),
    ("code", "jump_left", "jump_right", "40 cols"), ("code", "line_start", "line_end", "Line start/end"),
):
    _group = Binding.Group(_title, compact=True)
    _PAIRS[f"{_scope}.{_first}"] = _PAIRS[f"{_scope}.{_second}"] = _group

_SCOPES: dict[str, list[Binding]] = {}
for scope, bid, key, action, description, tooltip, show in _REGISTRY:
    _SCOPES.setdefault(scope, []).append(
        Binding(key, action, description, show=show, id=bid, tooltip=tooltip,
                group=VIEWS if bid in VIEW_IDS else _PAIRS.get(bid))
    )

# Keys a person reads, for the help screen and the footer.
KEY_NAMES = {
    "question_mark": "?", "slash": "/", "left_square_bracket": "[", "right_square_bracket": "]",
    "left_curly_bracket": "{", "right_curly_bracket": "}", "enter": "⏎", "escape": "esc", "space": "space",
    "greater_than_sign": ">", "less_than_sign": "<", "percent_sign": "%", "tilde": "~", "number_sign": "#",
    "plus": "+", "minus": "-", "left": "←", "right": "→", "up": "↑", "down": "↓",
    "shift+left": "⇧←", "shift+right": "⇧→",
}


def bindings(scope: str) -> list[BindingType]:
    return list(_SCOPES[scope])


def group_of(binding_id: str) -> Binding.Group | None:
    """The footer group a binding shows in (a pair's one entry), if any."""
    return _PAIRS.get(binding_id)


def all_bindings() -> dict[str, list[Binding]]:
    return {scope: list(b) for scope, b in _SCOPES.items()}


def ids() -> set[str]:
    return {bid for _, bid, *_ in _REGISTRY}


def shown_key(key: str) -> str:
    """A key as a person reads it: `?`, not `question_mark`; several keys joined by `,`."""
    return ",".join(KEY_NAMES.get(k.strip(), k.strip()) for k in key.split(","))


def help_sections(keymap: dict[str, str] | None = None) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(section title, [(key, description, tooltip)]) for every scope, keys as remapped by `keymap`.

    One row per binding: a scope never lists one action twice."""
    keymap = keymap or {}
    out: list[tuple[str, list[tuple[str, str, str]]]] = []
    for scope, title in SCOPE_TITLES.items():
        rows: list[tuple[str, str, str]] = []
        views: list[str] = []
        for binding in _SCOPES.get(scope, []):
            key = shown_key(keymap.get(binding.id or "", binding.key))
            if binding.id in VIEW_IDS:
                views.append(key)  # one row for the number keys, as the footer shows them
                continue
            rows.append((key, binding.description, binding.tooltip))
        if views:
            rows.insert(0, ("".join(views), "Views", "Overview, Tasks, Samples, Triage, Compare, Live, Plots, Fixit"))
        out.append((title, rows))
    return out
