"""`ptxbench report --headline`: the paper's table over the store, as rich, CSV, JSON or Markdown.

One row per model × arch × task × context level at turn budgets 1, 4 and 8 (cut at each run's own
budget); the columns are db/headline.py's. The paper's best published number for the task at that
budget stands in its own column, labelled as theirs (tasks/published.toml, docs/headline.md).
"""

from __future__ import annotations

import json
from typing import Any

# (title, getter, format) of every column after the key columns; "paper" is theirs.
COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    # (short title for the terminal, title for Markdown, field, format)
    ("n", "n", "trajectories", "int"),
    ("comp", "compile", "compile_rate", "pct"),
    ("train", "correct (train)", "correct_train", "pct"),
    ("held", "correct (held-out)", "correct_heldout", "pct"),
    ("+SASS", "+ SASS families", "correct_sass", "pct"),
    ("+exec", "+ executed", "correct_executed", "pct"),
    ("f₁.₀", "fast₁.₀", "fast_1", "pct"),
    ("f₁.₂", "fast₁.₂", "fast_1.2", "pct"),
    ("best", "best", "best_speedup", "x"),
    ("SoL", "best SoL", "best_sol_fraction", "pct"),
    ("gmean", "geomean (correct)", "geomean_speedup", "x"),
    ("mean₀", "mean (fail = 0)", "mean_speedup_fail0", "x"),
    ("p@1", "pass@1", "pass@1", "pct"),
    ("p@5", "pass@5", "pass@5", "pct"),
    ("tokens", "tokens", "tokens", "tokens"),
    ("cost", "cost", "cost", "cost"),
    ("hacks", "reward hacks", "reward_hacks", "int"),
)
KEYS = (("model", "model"), ("arch", "arch"), ("task", "task"), ("context", "context"), ("T", "turn_budget"))
NOTE = ("T: turn budget. train / held: correct at the train / held-out sizes. Rates are over trajectories whose fact is known (— where none is: correctness without a GPU). "
        "+SASS: correct with every requested family in the machine code; + executed: and seen to run at "
        "every train size (the marked copy, or Nsight Compute), where measured. f_p: that, and faster than the library by p. best / geomean over "
        "correct trajectories; mean₀ over all, a failure counted as 0; p@k: pass@k. SoL: fraction of the speed of "
        "light of the best kernel. Paper: the paper's best published number for the task at that turn limit, "
        "theirs, on their H100/B200 (docs/headline.md).")


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
        return f"{paper.best_speedup:.3f}×"
    return f"{paper.best_speedup:.3f}× ({paper.model}, {paper.device})"


def flat(line: Any) -> dict[str, Any]:
    d = line.row.as_dict()
    p = line.paper
    d["paper_best_speedup"] = p.best_speedup if p else None
    d["paper_model"] = p.model if p else None
    d["paper_device"] = p.device if p else None
    return d


def markdown(lines: list[Any], source: str) -> str:
    head = ["turns" if k == "T" else k for k, _ in KEYS] + [t for _, t, _, _ in COLUMNS] + ["paper (theirs)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in lines:
        d = flat(line)
        cells = [str(d[attr]) for _, attr in KEYS] + [cell(d[attr], kind) for _, _, attr, kind in COLUMNS]
        cells.append(paper_cell(line.paper))
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    out += ["", NOTE, "", f"Paper's numbers: {source}."]
    return "\n".join(out) + "\n"


def render(console: Any, lines: list[Any], source: str) -> None:
    from rich.table import Table

    if not lines:
        console.print("no judged model samples match (expert and mutation rows are left out without "
                      "--include-reference)", markup=False)
    else:
        table = Table(title="PTXBench headline", title_justify="left", show_edge=False, pad_edge=False)
        for key, _ in KEYS:
            table.add_column(key, no_wrap=True)
        for title, _, _, _ in COLUMNS:
            table.add_column(title, justify="right")
        table.add_column("paper", justify="right")
        for line in lines:
            d = flat(line)
            table.add_row(*[str(d[attr]) for _, attr in KEYS], *[cell(d[attr], kind) for _, _, attr, kind in COLUMNS],
                          paper_cell(line.paper, short=True))
        console.print(table)
        console.print(NOTE, style="dim", markup=False)
    _paper_table(console, source)


def _paper_table(console: Any, source: str) -> None:
    """Theirs alone: the best published number per shared task at each turn limit."""
    from rich.table import Table

    from ptxbench.services.metrics import paper_best

    table = Table(title="The paper's published best speedups (theirs)", title_justify="left", show_edge=False)
    table.add_column("task", no_wrap=True)
    for limit in (1, 4, 8):
        table.add_column(f"turns {limit}", justify="right")
    for task, by_limit in paper_best():
        table.add_row(task, *[paper_cell(by_limit.get(limit)) for limit in (1, 4, 8)])
    console.print(table)
    console.print(f"from {source}", style="dim", markup=False)


def json_text(lines: list[Any]) -> str:
    return json.dumps([flat(line) for line in lines], indent=2, default=str) + "\n"
