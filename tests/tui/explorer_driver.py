"""Drive a real explorer over a store from its own process, headless through Textual's Pilot.

    python explorer_driver.py STORE OUT.json soak --seconds 12 --tag A
    python explorer_driver.py STORE OUT.json readonly

`soak` labels samples and flips Fixit marks through the label dialog and the keys, as a
person would, and visits the views between; at the end it waits (bounded) until every label
is in the store. `readonly` tries the writing actions on a store it cannot write. Both write
what they did and what the explorer reported to OUT.json.

What the soak reports is what the explorer took, not what was typed at it: the note is typed
only once the dialog has mounted and its note field has the focus (on a busy machine the
dialog is on the screen stack well before that, and keys sent then reach no field), the field
must hold the note before Enter, and every label is counted from the explorer's own
`save_label` (`kept`). A note the explorer did not take ends the driver with an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from ptxbench.db.reader import StoreReader, prepare_store
from ptxbench.tui.application import PtxbenchApp
from ptxbench.tui.config import Config
from ptxbench.tui.screens.dialogs import LabelDialog
from ptxbench.tui.widgets.row_table import RowTable
from ptxbench.tui.widgets.store_banner import StoreBanner

SIZE = (140, 40)


class RecordingApp(PtxbenchApp):
    """The explorer, keeping every store failure and notification it showed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failures: list[str] = []
        self.said: list[str] = []
        self.kept: list[list] = []  # every label the explorer was given to keep: [sample, note, fixit, what]

    def save_label(self, sample_id: int, category: str | None, note: str, fixit: bool, what: str) -> None:
        self.kept.append([sample_id, note, fixit, what])
        super().save_label(sample_id, category, note, fixit, what)

    def on_store_failed(self, message) -> None:
        self.failures.append(message.error)
        super().on_store_failed(message)

    def notify(self, message, *args, **kwargs) -> None:
        self.said.append(str(message))
        super().notify(message, *args, **kwargs)


async def settle(pilot) -> None:
    for _ in range(5):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if not any(w.is_running for w in pilot.app.workers):
            break


async def until(pilot, condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await pilot.pause(0.05)
    return True


async def soak(app: RecordingApp, pilot, seconds: float, tag: str) -> dict:
    notes: list[tuple[int, str]] = []
    saves = 0
    await settle(pilot)
    await pilot.press("3")
    await settle(pilot)
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        screen = app.screen
        if not getattr(screen, "rows", None):
            await settle(pilot)
            continue
        screen.query_one(RowTable).move_cursor(row=n % len(screen.rows))
        note = f"{tag}-{n}"
        notes.append((await label_once(app, pilot, note), note))
        saves += 1
        await settle(pilot)
        if n % 3 == 2:
            kept = len(app.kept)
            await pilot.press("f")  # the Fixit mark: one more label row, with the current note
            if not await until(pilot, lambda kept=kept: len(app.kept) > kept, 10):
                raise SystemExit("f kept no Fixit mark")
            saves += 1
            await settle(pilot)
        if n % 4 == 3:
            for key in ("1", "4", "8", "3"):  # read the other views between labels
                await pilot.press(key)
                await settle(pilot)
        n += 1
    all_saved = await until(pilot, lambda: not app.unsaved and not any(w.is_running for w in app.workers), 20)
    return {"notes": notes, "saves": saves, "kept": app.kept, "all_saved": all_saved, "unsaved": len(app.unsaved)}


def note_field(app: RecordingApp):
    screen, focused = app.screen, app.focused
    if isinstance(screen, LabelDialog) and screen.is_mounted and focused is not None and focused.id == "label-note":
        return focused
    return None


async def label_once(app: RecordingApp, pilot, note: str) -> int:
    """`l` on the row under the cursor, `note` typed into the dialog, Enter: returns the sample
    the explorer kept the label for. Raises SystemExit where the explorer did not take `note`."""
    await pilot.press("l")
    # The dialog is on the screen stack before it has mounted; keys sent then reach no field.
    if not await until(pilot, lambda: note_field(app) is not None, 10):
        raise SystemExit(f"no label dialog ready to type into after l (screen {type(app.screen).__name__}, "
                         f"focus {type(app.focused).__name__})")
    dialog, field = app.screen, note_field(app)
    field.value = ""  # the sample's current note is filled in
    await pilot.press(*note)
    if not await until(pilot, lambda: field.value == note, 10):
        raise SystemExit(f"typed {note!r}, the note field holds {field.value!r}")
    kept = len(app.kept)
    await pilot.press("enter")
    if not await until(pilot, lambda: app.screen is not dialog and len(app.kept) > kept, 10):
        raise SystemExit(f"Enter did not save {note!r} (screen {type(app.screen).__name__})")
    sample, typed = app.kept[kept][:2]
    if (sample, typed) != (dialog.sample_id, note):
        raise SystemExit(f"typed {note!r} for sample {dialog.sample_id}; the explorer kept {typed!r} for {sample}")
    return sample


async def readonly(app: RecordingApp, pilot) -> dict:
    await settle(pilot)
    out = {"notice": app.store_notice[0], "banner": bool(app.screen.query_one(StoreBanner).display)}
    await pilot.press("3")
    await settle(pilot)
    for key in ("l", "f", "r", "R"):
        await pilot.press(key)
        await settle(pilot)
        out[f"screen_after_{key}"] = type(app.screen).__name__
    out["labels"] = app.reader.read(lambda c: c.execute("SELECT COUNT(*) FROM labels").fetchone()[0])
    return out


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("scenario", choices=("soak", "readonly"))
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tag", default="A")
    args = parser.parse_args()
    access = prepare_store(args.store)
    app = RecordingApp(Config(db_path=args.store), reader=StoreReader(args.store, access=access))
    started = time.monotonic()
    async with app.run_test(size=SIZE) as pilot:
        if args.scenario == "soak":
            out = await soak(app, pilot, args.seconds, args.tag)
        else:
            out = await readonly(app, pilot)
        out.update(failures=app.failures, said=app.said, damage=app.reader.damage,
                   seconds=round(time.monotonic() - started, 1))
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
