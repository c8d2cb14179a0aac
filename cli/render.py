"""Rich rendering of engine results for the terminal.

Everything here that came from the candidate, a model or a tool (evidence, ptxas's messages, entry
and block names, notes, the origin) is made inert (engine/inert.py) before it goes into a `Text`;
strings handed to rich as they are (table cells, titles) are made inert by the CLI's console
(cli/terminal.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ptxbench.db.browse_sample import coverage_of
from ptxbench.engine.categories import DESCRIPTIONS, OK, SKIPPED_PREFIX
from ptxbench.engine.inert import inert

if TYPE_CHECKING:
    from ptxbench.engine.static import StaticVerdict


def _mark(value: bool | None) -> Text:
    if value is None:
        return Text("—", style="dim")
    return Text("yes", style="green") if value else Text("no", style="red")


def category_text(category: str) -> Text:
    if category == OK:
        return Text("ok", style="bold green")
    if category.startswith(SKIPPED_PREFIX):
        return Text(inert(category), style="yellow")
    return Text(inert(category), style="bold red")


def families_table(verdict: StaticVerdict) -> Table | None:
    if not verdict.families:
        return None
    table = Table(title="requested families", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("family", "kind", "PTX", "SASS", "verdict"):
        table.add_column(col)
    for row in verdict.families:
        verdict_cell = Text("ok", style="green") if row.ok else Text(inert(f"missing in {row.missing}"), style="red")
        table.add_row(row.family, row.kind, _mark(row.in_ptx), _mark(row.in_sass), verdict_cell)
    return table


# Long (C++ mangled) entry names are cut in the middle so that a table stays within 80 columns;
# the full names are in --json.
ENTRY_WIDTH = 28


def short_name(name: str, width: int = ENTRY_WIDTH) -> str:
    name = inert(name)  # cut as it will be shown
    if len(name) <= width:
        return name
    head = (width - 1) * 2 // 3
    return f"{name[:head]}…{name[-(width - 1 - head):]}"


def resources_table(resources: dict[str, dict[str, Any]]) -> Table | None:
    entries = {k: v for k, v in resources.items() if v.get("registers") is not None}
    if not entries:
        return None
    table = Table(title="resources (ptxas -v; bytes)", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("entry", "regs", "barriers", "smem", "stack", "spills st/ld"):
        table.add_column(col, justify="left" if col == "entry" else "right", no_wrap=True)
    for name, r in entries.items():
        spills = f"{r.get('spill_store_bytes', 0)}/{r.get('spill_load_bytes', 0)}"
        table.add_row(
            short_name(name), str(r.get("registers")), str(r.get("barriers", "")), str(r.get("shared_bytes", 0)),
            str(r.get("stack_frame_bytes", 0)),
            Text(spills, style="yellow") if spills != "0/0" else Text(spills),
        )
    return table


def entries_table(verdict: StaticVerdict) -> Table | None:
    """What each entry can run, and which of them the launch manifest runs."""
    if not verdict.entries or (verdict.launched is None and len(verdict.entries) == 1):
        return None
    title = "entries (launched: a launch runs it; calls: functions it reaches)"
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("entry", no_wrap=True)
    table.add_column("launched")
    table.add_column("calls", justify="right")
    table.add_column("SASS families")
    for e in verdict.entries:
        fams = e.sass_families if e.sass_families is not None else e.ptx_families
        table.add_row(short_name(e.entry), _mark(e.launched), str(len(e.reaches) - 1), ", ".join(fams) or "none")
    return table


def blocks_text(extract_evidence: dict[str, Any]) -> Text | None:
    """Which blocks of a response were used, and which were set aside and why."""
    used = extract_evidence.get("blocks_used")
    aside = extract_evidence.get("blocks_set_aside") or []
    if not used:
        return None
    t = Text("\n")
    t.append("blocks used: ", style="bold")
    t.append(inert(", ".join(f"{b['block']} ({b['as']})" for b in used)))
    for b in aside:
        t.append(inert(f"\n  set aside: block {b['block']}: {b['why']}"), style="dim")
    return t


def render_check(console: Console, verdict: StaticVerdict, gpu: str) -> None:
    head = Text()
    head.append_text(category_text(verdict.category))
    head.append(inert(f"   stage {verdict.stage}"), style="dim")
    if verdict.category != OK and verdict.category in DESCRIPTIONS:
        head.append(f"\n{DESCRIPTIONS[verdict.category]}", style="italic")
    where = " · ".join(x for x in (verdict.task_id or "no task", verdict.arch, verdict.language or "", verdict.origin) if x)
    head.append("\n" + inert(where), style="dim")  # the origin is a file name or a model's
    parts: list[Any] = [head]

    if verdict.evidence:
        ev = Text("\nevidence: ", style="bold")
        if verdict.evidence_line:
            ev.append(inert(f"line {verdict.evidence_line}: "), style="cyan")
        ev.append(inert(verdict.evidence))  # ptxas's message, quoting the candidate
        if verdict.evidence_source:
            ev.append("\n    " + inert(verdict.evidence_source), style="dim")  # the candidate's own line
        parts.append(ev)

    blocks = blocks_text(verdict.extract_evidence)
    if blocks is not None:
        parts.append(blocks)

    fam = Text("\n")
    if verdict.launched is not None:
        fam.append("launched:      ", style="bold")
        fam.append(", ".join(short_name(e) for e in verdict.launched) + "\n")
    fam.append("PTX families:  ", style="bold")
    fam.append(inert(", ".join(verdict.ptx_families) or "none"))
    fam.append("\nSASS families: ", style="bold")
    fam.append(inert(", ".join(verdict.sass_families) or ("none" if verdict.assembled else "— (not assembled)")))
    parts.append(fam)

    for table in (families_table(verdict), entries_table(verdict), resources_table(verdict.resources)):
        if table is not None:
            parts.append(Text(""))
            parts.append(table)

    if verdict.launch_problems and verdict.category == OK:
        p = Text("\nheld-out launches that cannot work:", style="bold yellow")
        for x in verdict.launch_problems:
            p.append(inert(f"\n  {x['category']}: {x['message']}"))
        parts.append(p)

    if verdict.notes:
        n = Text("\nnotes:", style="bold")
        for note in verdict.notes:
            n.append(inert(f"\n  {note}"))
        parts.append(n)

    box = verdict.sandbox
    if box and not (box.get("filesystem") and box.get("limits")):
        # Said once per check: the tools that read this candidate were less confined than docs/security.md
        # promises (no Landlock on this kernel, or PTXBENCH_SANDBOX=off).
        s = Text("\nsandbox: ", style="bold yellow")
        s.append(inert(f"{box.get('sandbox')}: the tools ran without " + " and ".join(
            w for w, on in (("filesystem confinement", box.get("filesystem")), ("resource limits", box.get("limits")))
            if not on) + " (docs/security.md)"))
        parts.append(s)

    if verdict.warnings:
        w = Text("\nwarnings:", style="bold yellow")
        for m in verdict.warnings:
            code = f"({m['code']}) " if m.get("code") else ""
            line = f"line {m['line']}: " if m.get("line") else ""
            w.append(inert(f"\n  {m['tool']} {line}{code}{m['text']}"))
        parts.append(w)

    tail = Text("\n")
    tail.append("GPU: ", style="bold")
    tail.append_text(category_text(gpu) if gpu.startswith(SKIPPED_PREFIX) else Text(inert(gpu)))
    secs = ", ".join(f"{k} {v:.2f}s" for k, v in verdict.seconds.items())
    tail.append(f"\n{secs}{' (cached)' if verdict.cached else ''}", style="dim")
    parts.append(tail)
    console.print(Panel(Group(*parts), title="ptxbench check", title_align="left", expand=False))


def render_tasks(console: Console, rows: list[dict[str, Any]]) -> None:
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("id", no_wrap=True)
    table.add_column("arch", no_wrap=True)
    table.add_column("families")
    table.add_column("expert solution", overflow="fold")
    for r in rows:
        table.add_row(r["id"], r["arch"], ", ".join(r["families"]) or "—", r["expert"] or Text("—", style="dim"))
    console.print(table)


def render_judgement(console: Any, j: Any) -> None:
    table = Table(title=f"GPU: {j.device.name if j.device else '?'} — {j.category}", title_justify="left")
    for col in ("split", "sizes", "category", "error", "ms", "library ms", "speedup", "TFLOP/s", "of SOL"):
        table.add_column(col)

    def num(x: Any, fmt: str) -> str:
        return format(x, fmt) if isinstance(x, (int, float)) else "—"

    for m in j.measurements:
        sizes = " ".join(f"{k}={v}" for k, v in m.sizes.items())
        table.add_row(m.split, sizes, m.category, num(m.max_rel_err, ".2e"), num(m.time_ms, ".4f"),
                      num(m.baseline_ms, ".4f"), num(m.speedup, ".3f"), num(m.tflops, ".1f"),
                      num(m.sol_fraction, ".0%"))
    console.print(table)
    sol = j.evidence.get("speed_of_light")
    if sol:
        console.print(f"speed of light here: {sol['time_ms']:.4g} ms ({sol['peaks']}); the library reaches "
                      f"{format(sol['baseline_fraction'], '.0%') if sol.get('baseline_fraction') else '—'} of it",
                      markup=False, highlight=False, soft_wrap=True)
    if j.evidence.get("baseline_missing"):
        console.print(f"speed not judged: {j.evidence['baseline_missing']}", markup=False, highlight=False)
    for m in j.measurements:
        if m.message:
            console.print(f"{m.split} {m.sizes}: {m.message}", markup=False, highlight=False, soft_wrap=True)
    ran = families_ran(j.evidence)
    if ran:
        console.print(ran, markup=False, highlight=False, soft_wrap=True)
    if j.baseline:
        console.print(f"library: {j.baseline}", markup=False, highlight=False)


def families_ran(evidence: dict[str, Any]) -> str | None:
    """One line on what the marked copy saw (engine/coverage.py): per requested family, the sizes it ran at."""
    cov = coverage_of(evidence)
    if cov is None:
        return None
    if cov.note:
        return f"requested families run: not measured ({cov.note})"
    parts = [f"{f.family} at {f.ran} of {f.looked} sizes" for f in cov.families]
    return "requested families run (the marked copy): " + ", ".join(parts) if parts else None


# -- tables that read anywhere ---------------------------------------------------------------------

# At this width or under a wide table's cells would be cut to `…`: Markdown, with every cell whole.
NARROW = 80


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    """A Markdown table with every cell whole (`|` escaped, line breaks as spaces)."""

    def cell(value: str) -> str:
        return " ".join(str(value).split("\n")).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def fits(console: Console, table: Table) -> bool:
    """Whether `table` shows whole: on a terminal wider than NARROW columns that holds its every cell."""
    if not console.is_terminal or console.width <= NARROW:
        return False
    # Measured without the terminal's bound (a measurement is clamped to the width it is given).
    unbounded = console.options.update(max_width=1 << 20)
    return console.measure(table, options=unbounded).maximum <= console.width


def print_grid(console: Console, title: str, headers: list[tuple[str, str]], rows: list[list[str]],
               notes: list[str] | None = None) -> None:
    """A rich table (`headers`: title and justification of each column) where it fits the terminal;
    piped, on a narrow terminal, or too wide for it, the same cells as a Markdown table."""
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for head, justify in headers:
        table.add_column(head, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*row)
    if fits(console, table):
        console.print(table)
        for note in notes or []:
            console.print(note, style="dim", markup=False, highlight=False)
        return
    text = f"{title}\n\n" + markdown_table([h for h, _ in headers], rows)
    if notes:
        text += "\n" + "\n\n".join(notes) + "\n"
    console.print(text, markup=False, highlight=False, soft_wrap=True, end="")
