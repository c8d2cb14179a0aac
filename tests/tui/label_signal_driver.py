"""A real explorer in its own process that labels a sample while another writer holds the store,
then waits to be stopped: by a signal, as a logout or a closed terminal stops it.

    python label_signal_driver.py STORE SAMPLE NOTE

It prints `ready` once the explorer is up (the caller then holds the store and answers a line),
types NOTE into the label dialog of SAMPLE, prints one JSON line once the label is waiting for
the store (`{"entry": …}`), and, when the explorer has ended, says each label it did not save as
`ptxbench-tui` does and exits with the explorer's return code.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from ptxbench.db.reader import StoreReader, prepare_store
from ptxbench.tui.application import PtxbenchApp
from ptxbench.tui.config import Config

SIZE = (140, 40)


async def until(pilot, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out; screen {type(pilot.app.screen).__name__}, notice {pilot.app.store_notice}")
        await pilot.pause(0.05)


async def main() -> int:
    store, sample, note = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    access = prepare_store(store)
    app = PtxbenchApp(Config(db_path=store), reader=StoreReader(store, access=access, write_timeout=0.2))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: not any(w.is_running for w in app.workers))
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        app.ask_label(sample)
        await until(pilot, lambda: app.focused is not None and app.focused.id == "label-note")
        await pilot.press(*note, "enter")
        await until(pilot, lambda: app.store_notice[0].startswith("1 label not saved yet"))
        print(json.dumps({"entry": str(app.unsaved[0].entry), "notice": app.store_notice[0]}), flush=True)
        while app.is_running:
            await asyncio.sleep(0.05)
        code = app.return_code  # before the test harness closes the app its own way
    for item in app.unsaved:
        print(f"ptxbench-tui: label not saved, {item.describe()}", file=sys.stderr)
    return code or 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
