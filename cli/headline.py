"""`ptxbench report --headline` and `--fallback`: the paper's table and the generic-fallback finding,
as a table, CSV, JSON or Markdown.

Headline: one row per model × device × arch × task × context level at turn budgets 1, 4 and 8 (the
paper's turn limits), counting the trajectories run with at least that many turns; the columns are
db/headline.py's. The paper's best published number for the task at exactly that budget stands in
its own column, labelled as theirs with their device (tasks/published.toml, docs/headline.md).
Fallback: db/fallback.py's rows.

A table is rich where it fits the terminal, else Markdown with every cell whole (cli/render.py).
"""

from __future__ import annotations

import json
from typing import Any

HEADLINE_SCHEMA = "ptxbench.headline/2"

# (short title for the terminal, title for Markdown and notes, field, format) after the key columns.
COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("n", "n", "trajectories", "int"),
    ("as run", "budgets as run", "budgets_as_run", "str"),
    ("comp", "compile", "compile_rate", "pct"),
    ("train", "correct (train)", "correct_train", "pct"),
    ("held", "correct (held-out)", "correct_heldout", "pct"),
    ("solved", "solved", "solved", "pct"),
    ("+exec", "solved + executed", "solved_executed", "pct"),
    ("f₁.₀", "fast₁.₀", "fast_1", "pct"),
    ("f₁.₂", "fast₁.₂", "fast_1.2", "pct"),
    ("best", "best", "best_speedup", "x"),
    ("SoL", "best SoL", "best_sol_fraction", "pct"),
    ("gm solved", "geomean (solved)", "geomean_solved", "x"),
    ("gm correct", "geomean (correct)", "geomean_correct", "x"),
    ("mean₀", "mean (unsolved = 0)", "mean_speedup_fail0", "x"),
    ("p@1", "pass@1", "pass@1", "pct"),
    ("p@5", "pass@5", "pass@5", "pct"),
    ("tokens", "tokens", "tokens", "tokens"),
    ("cost", "cost", "cost", "cost"),
    ("hacks", "reward hacks", "reward_hacks", "int"),
)
KEYS = (("model", "model"), ("device", "device"), ("arch", "arch"), ("task", "task"), ("context", "context"),
        ("T", "turn_budget"))
NOTE = ("T: turn budget; a row counts the trajectories run with at least T turns (as run: their budgets; open: "
        "an MCP session, which has no limit), each with its turns up to T. train / held: correct at the train / "
        "held-out sizes. Solved: correct at both, every requested family in the code, in one turn. Rates are over "
        "trajectories whose fact is known (— where none is: correctness without a GPU). + executed: solved and "
        "seen to run (the marked copy, or Nsight Compute), where measured. f_p: solved and faster than the "
        "library by more than p. best: over solved trajectories (0 where every one is known unsolved, as the "
        "paper writes it); SoL: that kernel's fraction of the speed of light. Geomeans over solved trajectories "
        "and over correct ones (train sizes, any code); mean₀ over all, an unsolved one counted as 0. p@k: pass@k, "
        "success = solved. Paper: the paper's best published number for the task at exactly that turn limit, "
        "theirs, on their device (docs/headline.md).")


def cell(value: Any, kind: str) -> str:
    if value is None:
        return "—"
    if kind == "pct":
        return f"{100 * value:.1f}%"
    if kind == "x":
        return f"{value:.3f}×"
    if kind == "tokens":
        return f"{value:,.0f}"
    if kind == "cost":
        return f"{value:.4g}"
    return str(value)


def paper_cell(paper: Any, *, short: bool = False) -> str:
    if paper is None:
        return "—"
    if short:
        return f"{paper.best_speedup:.3f}× ({paper.device})"
    return f"{paper.best_speedup:.3f}× ({paper.model}, {paper.device})"


def flat(line: Any) -> dict[str, Any]:
    d = line.row.as_dict()
    p = line.paper
    d["paper_best_speedup"] = p.best_speedup if p else None
    d["paper_model"] = p.model if p else None
    d["paper_device"] = p.device if p else None
    return d


def _cells(line: Any, *, short: bool) -> list[str]:
    d = flat(line)
    return ([str(d[attr]) for _, attr in KEYS] + [cell(d[attr], kind) for _, _, attr, kind in COLUMNS]
            + [paper_cell(line.paper, short=short)])


def markdown(lines: list[Any], source: str) -> str:
    from ptxbench.cli.render import markdown_table

    head = ["turns" if k == "T" else k for k, _ in KEYS] + [t for _, t, _, _ in COLUMNS] + ["paper (theirs)"]
    return (markdown_table(head, [_cells(line, short=False) for line in lines])
            + f"\n{NOTE}\n\nPaper's numbers: {source}.\n")


def render(console: Any, lines: list[Any], source: str) -> None:
    from ptxbench.cli.render import print_grid

    if not lines:
        console.print("no judged model samples match (expert and mutation rows are left out without "
                      "--include-reference)", markup=False)
    else:
        headers = [(k, "left") for k, _ in KEYS] + [(t, "right") for t, _, _, _ in COLUMNS] + [("paper", "right")]
        print_grid(console, "PTXBench headline", headers, [_cells(line, short=True) for line in lines], [NOTE])
    console.print()
    _paper_table(console, source)


def _paper_table(console: Any, source: str) -> None:
    """Theirs alone: the best published number per shared task at each turn limit."""
    from ptxbench.cli.render import print_grid
    from ptxbench.services.metrics import paper_best

    limits = (1, 4, 8)
    rows = [[task, *[paper_cell(by_limit.get(limit)) for limit in limits]] for task, by_limit in paper_best()]
    print_grid(console, "The paper's published best speedups (theirs)",
               [("task", "left"), *[(f"turns {limit}", "right") for limit in limits]], rows, [f"from {source}"])


def json_text(lines: list[Any], source: str) -> str:
    return json.dumps({"schema": HEADLINE_SCHEMA, "paper_source": source, "rows": [flat(line) for line in lines]},
                      indent=2, default=str) + "\n"


# -- the generic-fallback finding ------------------------------------------------------------------

FALLBACK_COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("kernels", "kernels", "kernels", "int"),
    ("correct", "correct", "correct", "int"),
    ("families", "uses the families", "families_share", "pct"),
    ("generic", "generic fallback", "generic_share", "pct"),
    ("earlier .target", "of which an earlier .target", "earlier_target_share", "pct"),
    ("unknown", "use not known", "unknown", "int"),
    ("× families", "speedup (families)", "families_geomean", "x"),
    ("× generic", "speedup (generic)", "generic_geomean", "x"),
    ("timed", "timed (families / generic)", "timed", "str"),
    ("targets", "earlier targets", "targets", "str"),
)
FALLBACK_KEYS = ("model", "device", "arch", "task", "context")
FALLBACK_NOTE = ("Kernels: judged samples (every turn). Correct: at the train and the held-out sizes. Of the "
                 "correct kernels whose use of the requested families is known: the share with every family in "
                 "the code (SASS where the engine made a verdict, else PTX), and the share without (generic code), "
                 "of which those whose module's .target was an earlier architecture than the task's. Speedup: "
                 "geometric mean over the library of each group's timed kernels. Task *: the model's tasks pooled.")


def fallback_cells(row: Any) -> list[str]:
    from ptxbench.db.fallback import targets_written

    d = row.as_dict()
    d["timed"] = f"{row.families_timed} / {row.generic_timed}"
    d["targets"] = targets_written(row.targets) or "—"
    return [str(d[k]) for k in FALLBACK_KEYS] + [cell(d[attr], kind) for _, _, attr, kind in FALLBACK_COLUMNS]


def fallback_markdown(rows: list[Any]) -> str:
    from ptxbench.cli.render import markdown_table

    head = list(FALLBACK_KEYS) + [t for _, t, _, _ in FALLBACK_COLUMNS]
    return markdown_table(head, [fallback_cells(r) for r in rows]) + f"\n{FALLBACK_NOTE}\n"


def fallback_render(console: Any, rows: list[Any]) -> None:
    from ptxbench.cli.render import print_grid

    if not rows:
        console.print("no judged model samples match (expert and mutation rows are left out without "
                      "--include-reference)", markup=False)
        return
    headers = [(k, "left") for k in FALLBACK_KEYS] + [(t, "right") for t, _, _, _ in FALLBACK_COLUMNS]
    print_grid(console, "Generic fallback among correct kernels", headers, [fallback_cells(r) for r in rows],
               [FALLBACK_NOTE])


def fallback_json(rows: list[Any]) -> str:
    from ptxbench.db.fallback import SCHEMA

    return json.dumps({"schema": SCHEMA, "rows": [r.as_dict() for r in rows]}, indent=2) + "\n"
