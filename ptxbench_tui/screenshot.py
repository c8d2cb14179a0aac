"""Make the README's screenshot of the explorer from real data.

    python -m ptxbench.tui.screenshot docs/screenshot.svg [--store PATH]

The store is the default store's seed (the tasks and the expert solutions)
plus the mutation corpus of tasks/mutations.toml (failing variants of the
expert solutions, each with its fix), judged by the real engine
(`ptxbench eval`; on a machine without a GPU that is the static stages).
Nothing in it is invented. The screenshot shows a failing variant's PTX at
the line the assembler rejected, with the requested families' instructions marked.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

from ptxbench.db.records import Fix, Sample
from ptxbench.db.seed import ensure_default_store
from ptxbench.db.writes import add_fix, add_sample


def build_store(path: Path) -> None:
    from ptxbench.tasks.mutations import all_variants

    db = ensure_default_store(path)
    try:
        have = {r[0] for r in db.execute("SELECT source FROM samples")}
        experts = {task: sid for sid, task in db.execute(
            "SELECT s.id, s.task_id FROM samples s JOIN models m ON m.id = s.model_id WHERE m.kind = 'expert'")}
        mutation_model = db.execute("SELECT id FROM models WHERE name = 'mutation'").fetchone()
        if mutation_model is None:
            from ptxbench.db.writes import get_or_create_model

            model_id = get_or_create_model(db, "mutation", kind="mutation", source="tasks/mutations.toml").id
        else:
            model_id = mutation_model[0]
        for variant in all_variants():
            m = variant.mutation
            if m.source in have or m.task not in experts:
                continue
            sample = add_sample(db, Sample(task_id=m.task, language="ptx", source=m.source, code=variant.code,
                                           model_id=model_id, manifest=None))
            add_fix(db, Fix(failed_sample_id=sample.id, fixed_sample_id=experts[m.task], explanation=m.fix,
                            explanation_source="written with the mutation", source="tasks/mutations.toml"))
    finally:
        db.conn.close()
    ptxbench = Path(sys.executable).with_name("ptxbench")
    subprocess.run([str(ptxbench), "eval", "--db", str(path), "--all-unjudged"], check=True,
                   stdout=subprocess.DEVNULL)


async def shoot(path: Path, out: Path, size: tuple[int, int]) -> str:
    from ptxbench.db import browse
    from ptxbench.tui.app import make_app
    from ptxbench.tui.messages import ShowSample

    conn = browse.connect(path)
    row = conn.execute(
        """SELECT s.id, e.category, s.task_id FROM samples s JOIN evaluations e ON e.sample_id = s.id
           WHERE e.category IN ('unknown_instruction', 'operand_mismatch', 'invalid_operand', 'undefined_symbol', 'syntax')
           ORDER BY (s.task_id LIKE 'gemm%' OR s.task_id LIKE 'attn%') DESC, e.category = 'operand_mismatch' DESC, s.id LIMIT 1"""
    ).fetchone()
    if row is None:
        raise SystemExit("no judged failing variant with an assembler message in the store")
    app = make_app(path, theme="ptxbench")
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        app.post_message(ShowSample(row[0]))
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("g")  # to the line ptxas complained about
        await pilot.pause()
        app.save_screenshot(filename=out.name, path=str(out.parent))
    return f"sample {row[0]} ({row[2]}, {row[1]}) at its assembler error"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--store", type=Path, help="an existing store to shoot (default: build one as described above)")
    parser.add_argument("--width", type=int, default=140)
    parser.add_argument("--height", type=int, default=36)
    args = parser.parse_args()
    if args.store is None:
        folder = Path(tempfile.mkdtemp(prefix="ptxbench-screenshot-"))
        store = folder / "store.sqlite"
        build_store(store)
    else:
        store = args.store
    what = asyncio.run(shoot(store, args.out.resolve(), (args.width, args.height)))
    print(f"{args.out}: {what} (store {store})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
