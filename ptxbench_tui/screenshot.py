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

from ptxbench.db.corpus import add_mutation_corpus, assembler_failure
from ptxbench.db.seed import ensure_default_store


def build_store(path: Path) -> None:
    from ptxbench.tasks.mutations import all_variants

    db = ensure_default_store(path)
    try:
        add_mutation_corpus(db, all_variants())
    finally:
        db.conn.close()
    ptxbench = Path(sys.executable).with_name("ptxbench")
    subprocess.run([str(ptxbench), "eval", "--db", str(path), "--all-unjudged"], check=True,
                   stdout=subprocess.DEVNULL)


async def shoot(path: Path, out: Path, size: tuple[int, int]) -> str:
    from ptxbench.db.reader import StoreReader
    from ptxbench.tui.app import make_app
    from ptxbench.tui.messages import ShowSample

    reader = StoreReader(path)
    found = reader.read(assembler_failure)
    if found is None:
        raise SystemExit("no judged failing variant with an assembler message in the store")
    sample_id, category, task_id = found
    app = make_app(path, theme="ptxbench", reader=reader)
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        app.post_message(ShowSample(sample_id))
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("g")  # to the line ptxas complained about
        await pilot.pause()
        app.save_screenshot(filename=out.name, path=str(out.parent))
    return f"sample {sample_id} ({task_id}, {category}) at its assembler error"


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
