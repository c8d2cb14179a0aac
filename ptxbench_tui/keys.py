"""Every key binding of the explorer, in one place.

Screens and widgets take their `BINDINGS` from here, so the footer, the help
screen and the command palette (commands.py) show the same actions, and a
user keymap (config.py) can rebind any of them by id through
`App.set_keymap`. Ids are `<scope>.<name>`.
"""

from __future__ import annotations

from textual.binding import Binding

VIEWS = Binding.Group("Views", compact=True)

# (scope, id, key, action, description, tooltip, show)
_REGISTRY: list[tuple[str, str, str, str, str, str, bool]] = [
    # -- app: top-level views are modes, switched by number keys ---------------------
    ("app", "app.overview", "1", "switch_mode('overview')", "Overview", "Rates per model × task × arch × context level", True),
    ("app", "app.tasks", "2", "switch_mode('tasks')", "Tasks", "Tasks, their prompts, expert solutions and results", True),
    ("app", "app.samples", "3", "switch_mode('samples')", "Samples", "Every sample, filtered and searched", True),
    ("app", "app.triage", "4", "switch_mode('triage')", "Triage", "Failure categories by model, task, level", True),
    ("app", "app.compare", "5", "switch_mode('compare')", "Compare", "Models side by side on one task", True),
    ("app", "app.live", "6", "switch_mode('live')", "Live", "Re-verify and re-time with the engine", True),
    ("app", "app.plots", "7", "switch_mode('plots')", "Plots", "Speedup distributions and rates", True),
    ("app", "app.fixit", "8", "switch_mode('fixit')", "Fixit", "Fix pairs and the Fixit set's statistics", True),
    ("app", "app.help", "question_mark", "help", "Help", "Keys of this view and what they do", True),
    ("app", "app.theme", "T", "change_theme", "Theme", "Pick a theme (PTX colours follow it)", False),
    ("app", "app.reload", "ctrl+r", "reload_store", "Reload", "Re-read the store", False),
    ("app", "app.newest", "V", "toggle_newest", "Newest/complete", "Each sample's newest evaluation, or its most complete one (the default; docs/store.md)", False),
    ("app", "app.quit", "q", "quit", "Quit", "Leave the explorer", True),
    # -- tables (drill into the row under the cursor) ---------------------------------
    ("table", "table.open", "enter", "select_cursor", "Open", "Open the row under the cursor", True),
    # -- overview ------------------------------------------------------------------
    ("overview", "overview.levels", "l", "toggle_levels", "Per level", "Split rows by context level or fold them", True),
    ("overview", "overview.trajectories", "m", "toggle_metrics", "Trajectories", "Per sample, or per trajectory with pass@k (db.metrics)", True),
    ("overview", "overview.clear", "c", "clear_filters", "Clear filters", "Show every model, task, arch and level", True),
    # -- tasks ---------------------------------------------------------------------
    ("tasks", "tasks.samples", "s", "task_samples", "Samples", "Samples of this task", True),
    ("tasks", "tasks.expert", "e", "open_expert", "Expert", "Open the expert solution as a sample", True),
    ("tasks", "tasks.prompt", "p", "cycle_prompt", "Prompt level", "Show the prompt at context level none, brief or full", True),
    ("tasks", "tasks.prev_tab", "left_square_bracket", "prev_tab", "Prev tab", "", True),
    ("tasks", "tasks.next_tab", "right_square_bracket", "next_tab", "Next tab", "", True),
    # -- samples -------------------------------------------------------------------
    ("samples", "samples.search", "slash", "focus_search", "Search", "Full-text search over code and evidence", True),
    ("samples", "samples.next_page", "n", "next_page", "Next page", "", True),
    ("samples", "samples.prev_page", "p", "prev_page", "Prev page", "", True),
    ("samples", "samples.clear", "c", "clear_filters", "Clear", "Clear every filter", True),
    ("samples", "samples.diff", "d", "diff", "Diff", "Diff with its fix (or the turn it follows)", True),
    ("samples", "samples.label", "l", "label", "Label", "Relabel with a note (beside the automatic category)", True),
    ("samples", "samples.fixit", "f", "fixit", "Fixit", "Mark or unmark as a Fixit candidate", True),
    ("samples", "samples.reverify", "r", "reverify", "Re-verify", "Re-verify and re-time this sample (Live)", True),
    ("samples", "samples.reverify_all", "R", "reverify_filtered", "Re-verify all", "Re-verify every sample the filter selects", True),
    # -- one sample ----------------------------------------------------------------
    ("sample", "sample.back", "escape", "back", "Back", "", True),
    ("sample", "sample.prev_tab", "left_square_bracket", "prev_tab", "Prev tab", "", True),
    ("sample", "sample.next_tab", "right_square_bracket", "next_tab", "Next tab", "", True),
    ("sample", "sample.evidence", "g", "goto_evidence", "Go to error", "Jump to the line the assembler complained about", True),
    ("sample", "sample.next_mark", "m", "next_mark", "Next family", "Next instruction of a requested family", True),
    ("sample", "sample.diff", "d", "diff", "Diff", "Diff with its fix (or the turn it follows)", True),
    ("sample", "sample.label", "l", "label", "Label", "Relabel with a note", True),
    ("sample", "sample.fixit", "f", "fixit", "Fixit", "Mark or unmark as a Fixit candidate", True),
    ("sample", "sample.reverify", "r", "reverify", "Re-verify", "Re-verify and re-time (Live)", True),
    # -- diff ----------------------------------------------------------------------
    ("diff", "diff.back", "escape", "back", "Back", "", True),
    ("diff", "diff.split", "s", "toggle_split", "Split/unified", "Side by side or unified", True),
    ("diff", "diff.target", "t", "cycle_target", "What", "Diff PTX, launch manifest, SASS, assembler log or evidence", True),
    ("diff", "diff.noise", "N", "toggle_noise", "Noise", "Hide .loc/.file lines and comments", True),
    ("diff", "diff.registers", "g", "toggle_registers", "Renumber regs", "Renumber registers in order of use", True),
    ("diff", "diff.whitespace", "w", "toggle_whitespace", "Whitespace", "Ignore whitespace", True),
    ("diff", "diff.less", "left_curly_bracket", "less_context", "Less context", "", True),
    ("diff", "diff.more", "right_curly_bracket", "more_context", "More context", "", True),
    ("diff", "diff.swap", "x", "swap", "Swap", "Swap the two sides", True),
    ("diff", "diff.other", "o", "pick_other", "Other…", "Diff against another sample id", True),
    # -- triage --------------------------------------------------------------------
    ("triage", "triage.dimension", "g", "cycle_dimension", "Group by", "Counts by model, task or context level", True),
    ("triage", "triage.ok", "o", "toggle_ok", "Show ok", "Count passing samples too", True),
    ("triage", "triage.labelled", "L", "labelled", "Labelled", "Samples a person has labelled", True),
    ("triage", "triage.fixit", "F", "fixit_list", "Fixit list", "Samples marked as Fixit candidates", True),
    # -- compare -------------------------------------------------------------------
    ("compare", "compare.pin", "b", "pin_baseline", "Pin baseline", "Make the model under the cursor the baseline", True),
    ("compare", "compare.diff", "d", "diff", "Diff", "Diff the baseline's kernel with this model's", True),
    ("compare", "compare.open", "o", "open_sample", "Open", "Open this model's sample", True),
    # -- live ----------------------------------------------------------------------
    ("live", "live.run", "r", "run", "Run", "Start the engine on the queue", True),
    ("live", "live.cancel", "x", "cancel", "Cancel", "Stop the engine (SIGTERM; committed rows stay)", True),
    ("live", "live.clear", "c", "clear", "Clear", "Empty the queue and the log", True),
    ("live", "live.open", "o", "open_result", "Open result", "Open the sample of the last result", True),
    # -- plots ---------------------------------------------------------------------
    ("plots", "plots.prev_tab", "left_square_bracket", "prev_tab", "Prev plot", "", True),
    ("plots", "plots.next_tab", "right_square_bracket", "next_tab", "Next plot", "", True),
    # -- fixit ---------------------------------------------------------------------
    ("fixit", "fixit.diff", "d", "diff", "Diff", "Diff the failed sample with its fix (Enter does too)", True),
    ("fixit", "fixit.explain", "e", "explain", "Explanation", "The pair's explanation in full", True),
    ("fixit", "fixit.verified", "v", "toggle_verified", "Verified only", "Only pairs that count: their fix passed the engine", True),
    ("fixit", "fixit.next_page", "n", "next_page", "Next page", "", True),
    ("fixit", "fixit.prev_page", "p", "prev_page", "Prev page", "", True),
    ("fixit", "fixit.clear", "c", "clear_filters", "Clear", "Every pair: task, category, kind and verified-only cleared", True),
    # -- dialogs -------------------------------------------------------------------
    ("dialog", "dialog.cancel", "escape", "cancel", "Cancel", "", True),
    ("dialog", "dialog.save", "ctrl+s", "save", "Save", "", True),
]

_SCOPES: dict[str, list[Binding]] = {}
for scope, bid, key, action, description, tooltip, show in _REGISTRY:
    group = VIEWS if bid in {f"app.{m}" for m in ("overview", "tasks", "samples", "triage", "compare", "live", "plots", "fixit")} else None
    _SCOPES.setdefault(scope, []).append(
        Binding(key, action, description, show=show, id=bid, tooltip=tooltip, group=group)
    )

# Keys a person reads, for the help screen.
KEY_NAMES = {
    "question_mark": "?", "slash": "/", "left_square_bracket": "[", "right_square_bracket": "]",
    "left_curly_bracket": "{", "right_curly_bracket": "}", "enter": "⏎", "escape": "esc",
}


def bindings(scope: str) -> list[Binding]:
    return list(_SCOPES[scope])


def all_bindings() -> dict[str, list[Binding]]:
    return {scope: list(b) for scope, b in _SCOPES.items()}


def ids() -> set[str]:
    return {bid for _, bid, *_ in _REGISTRY}
