"""Text the explorer did not write reaches the terminal inert: a store holds a candidate whose code,
assembler log, evidence, origin, label note, fix explanation, model name and agent replies carry
terminal control sequences, bidi overrides and markup, and Pilot walks every view over it.

A recording driver keeps every byte the explorer writes (what a terminal would receive); none of
the planted sequences may be in it, the markup must be shown as written, and the escapes must be
visible where the text is shown (engine/inert.py). The same walk with the last line filter taken
away (`InertLines`) shows that each view makes the text inert itself.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from conftest import settle
from textual.drivers import headless_driver

from ptxbench.db.records import Evaluation, Fix, Label, Measurement, Run, Sample, Task
from ptxbench.db.store import open_store
from ptxbench.db.trajectories import Episode, Step, add_step, finish_episode, start_episode
from ptxbench.db.writes import add_evaluation, add_fix, add_label, add_sample, create_run, get_or_create_model, upsert_task
from ptxbench.tui.app import make_app
from ptxbench.tui.messages import Reverify, ShowDiff, ShowSample, StoreFailed
from ptxbench.tui.screens.agents import AgentStepsScreen
from ptxbench.tui.screens.dialogs import LabelDialog
from ptxbench.tui.screens.diff import DiffScreen
from ptxbench.tui.screens.live import LiveScreen
from ptxbench.tui.screens.sample import TABS, SampleScreen
from ptxbench.tui.untrusted import InertLines

DATA = Path(__file__).parent / "data"
SIZE = (150, 44)

# What a candidate, a model or a tool may try to send a terminal.
HOSTILE = {
    "clipboard": "\x1b]52;c;cm0gLXJmIH4K\x07",  # OSC 52: write the clipboard
    "title": "\x1b]0;pwned-title\x07\x1b]2;pwned-two\x1b\\",  # OSC 0 and 2: the window title
    "clear": "\x1b[2J\x1b[H",  # CSI: clear the screen, cursor home
    "cursor": "\x1b[5A\x1b[20C",  # CSI: cursor up and right
    "fake_ok": "\x1b[32mok\x1b[0m",  # a green "ok" that is not one
    "c1_csi": "\x9b2J",  # the one-byte CSI of C1
    "overwrite": "looks fine\roverwritten",
    "backspace": "safe\x08\x08\x08\x08evil",
    "bidi": "\u202eexe.txt\u202c \u2066iso\u2069",
    "zero_width": "pay\u200bpal",
    "bell": "\x07",
    "markup": "[green]ok[/]",
    "link": "[link=file:///etc/passwd]x[/link]",
    "click": "[@click=app.quit]quit[/]",
    "variable": "[$accent]v[/]",
    "backslash": "ends in a backslash\\",
}
PLANTED = " ".join(HOSTILE.values())
NAME = "m\x1b]0;T\x07[red]x\u202e"  # a model's name, short enough for a table cell
# Sequences that must never reach the terminal (Textual writes SGR and cursor positions of its own).
FORBIDDEN = ("\x1b]52", "\x1b]0;", "\x1b]2;", "\x1b]8;", "\x1b[2J", "\x1b[5A", "\x1b[20C", "\x1b[32mok", "\x9b", "\x08",
             "\r", "\u202e", "\u202c", "\u2066", "\u2069", "\u200b")
TEXTUAL_OWN_OSC = re.compile(r"\x1b\]22;[^\x07\x1b]*(?:\x07|\x1b\\)")  # the mouse pointer's shape


def build_hostile_store(path: Path) -> dict[str, int]:
    """A store whose every text field a front end shows carries PLANTED."""
    db = open_store(path)
    source = "fixture: tests/tui/test_inert_text.py"
    spec = {"id": "vector_add_smoke", "title": PLANTED, "arch": "sm_90a", "families": [],
            "description": PLANTED, "sizes": {"headline": {"N": 1 << 24}, "train": [{"N": 1 << 24}],
                                              "heldout": [{"N": 1 << 24}]}}
    upsert_task(db, Task(id="vector_add_smoke", title=PLANTED, operation="vector_add", arch="sm_90a", families=[],
                         spec=spec, source=source))
    hostile_model = get_or_create_model(db, NAME, kind="import", source=PLANTED).id
    expert_model = get_or_create_model(db, "expert", kind="expert", source=source).id
    run = create_run(db, Run(model_id=hostile_model, name=PLANTED, context_level="brief", source=source)).id

    good = (DATA / "vecadd.ptx").read_text()
    bad = f"// {PLANTED}\n" + (DATA / "vecadd_syntax.ptx").read_text().replace("\n", f" // {PLANTED}\n", 3)
    fixed = add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", source="expert", code=good,
                                  model_id=expert_model)).id
    add_evaluation(db, Evaluation(sample_id=fixed, engine_version="fixture", status="judged", category="ok",
                                  source=source, compiled=True, correct=True, correct_heldout=True, uses_ptx=True,
                                  uses_sass=True, ptx=good, speedup=1.0, time_ms=0.1, baseline_ms=0.1))
    hostile = add_sample(db, Sample(task_id="vector_add_smoke", language="ptx", source=f"import:{PLANTED}", code=bad,
                                    response=PLANTED, run_id=run, model_id=hostile_model,
                                    manifest={"note": PLANTED})).id
    log = (DATA / "vecadd_syntax.ptxas.log").read_text() + PLANTED + "\n"
    add_evaluation(db, Evaluation(
        sample_id=hostile, engine_version="fixture", status="judged", category="syntax", stage="assemble",
        source=PLANTED, device=PLANTED, compiled=False, assembler_log=log, ptx=bad, sass=PLANTED + "\n",
        evidence={"message": PLANTED, "line": 3, "source": PLANTED, "tool": "ptxas", "also": PLANTED},
        warnings=[{"tool": "ptxas", "text": PLANTED}], resources={PLANTED: {"registers": 8, "note": PLANTED}},
    ), [Measurement(split="train", sizes={"N": 1 << 24}, category="syntax", worst={"at": PLANTED})])
    add_fix(db, Fix(failed_sample_id=hostile, fixed_sample_id=fixed, explanation=PLANTED, explanation_source=PLANTED,
                    source=source))
    add_label(db, Label(sample_id=hostile, author=PLANTED, category="syntax", note=PLANTED))

    episode = start_episode(db, Episode(run_id=run, task_id="vector_add_smoke", agent=PLANTED, source=source))
    add_step(db, Step(episode_id=episode.id, step=1, kind="model", status="ok", turn=1,
                      result={"content": PLANTED, "tool_calls": [{"name": PLANTED, "id": PLANTED}]}))
    add_step(db, Step(episode_id=episode.id, step=2, kind="tool", status=f"error: {PLANTED}", turn=1, tool="check",
                      arguments=json.dumps({"code": bad, "note": PLANTED}),
                      result={"category": "syntax", "message": PLANTED}))
    finish_episode(db, episode, "submitted", hostile)
    db.conn.close()
    return {"hostile": hostile, "fixed": fixed, "episode": episode.id}


# An engine for the Live view whose every line quotes the candidate, and whose standard error does too.
HOSTILE_ENGINE = """
import json, sys
planted = json.loads(sys.argv[1])
ids = [int(v) for k, v in zip(sys.argv, sys.argv[1:]) if k == "--sample"]
def emit(**e):
    print(json.dumps(e, ensure_ascii=False), flush=True)
emit(event="start", t=0.0, total=len(ids), device=planted, static_only=False)
for i, sid in enumerate(ids):
    emit(event="sample", t=0.1, sample_id=sid, task_id=planted, index=i)
    emit(event="stage", t=0.2, sample_id=sid, stage=planted, status="begin", category=planted)
    emit(event="log", t=0.3, level="warning", message=planted)
    emit(event="log", t=0.3, level=planted, message=planted)
    emit(event="error", t=0.4, sample_id=sid, message=planted)
print(planted, flush=True)
emit(event="mystery", t=0.5, note=planted)
print(planted, file=sys.stderr, flush=True)
sys.exit(3)
"""


class RecordingDriver(headless_driver.HeadlessDriver):
    """The headless driver, except that the app writes to it as to a terminal, and it keeps it all."""

    written: list[str] = []

    @property
    def is_headless(self) -> bool:
        return False

    def write(self, data: str) -> None:
        RecordingDriver.written.append(data)


@pytest.fixture
def recorded(monkeypatch) -> list[str]:
    RecordingDriver.written = []
    monkeypatch.setattr(headless_driver, "HeadlessDriver", RecordingDriver)
    return RecordingDriver.written


@pytest.fixture(scope="module")
def hostile_template(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    path = tmp_path_factory.mktemp("hostile") / "hostile.sqlite"
    return path, build_hostile_store(path)


@pytest.fixture
def hostile_app(hostile_template, tmp_path):
    import shutil

    path = tmp_path / "store.sqlite"
    shutil.copyfile(hostile_template[0], path)
    engine = tmp_path / "hostile_engine.py"
    engine.write_text(HOSTILE_ENGINE)
    return make_app(path, engine_cmd=[sys.executable, str(engine), json.dumps(PLANTED)], gpu_lock_dir=tmp_path,
                    theme="ptxbench"), hostile_template[1]


def screen_text(app) -> str:
    """The characters on screen, line by line (the top screen over the ones it covers)."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    return "\n".join("".join(segment.text for strip in line for segment in strip) for line in update.strips)


def widget_text(app) -> str:
    """What the widgets on the screen hold, each whole (the screen cuts and wraps it): the text of
    every Static, Label and toast, code view, table and log."""
    from textual.widgets import DataTable, RichLog, Static, TextArea

    from ptxbench.tui.widgets.row_table import RowTable

    screens = [*app._background_screens, app.screen]
    parts: list[str] = []
    for screen in screens:
        parts += [str(w.render()) for w in screen.query(Static)]
        parts += [w.document.text for w in screen.query(TextArea)]
        parts += [" ".join(row) for w in screen.query(RowTable) for row in w.rows]
        parts += [" ".join(str(c) for c in w.get_row_at(i)) for w in screen.query(DataTable) for i in range(w.row_count)]
        parts += [" ".join(str(c.label) for c in w.columns.values()) for w in screen.query(DataTable)]
        parts += [line.text for w in screen.query(RichLog) for line in w.lines]
    return "\n".join(parts)


def assert_inert(data: str, where: str) -> None:
    data = TEXTUAL_OWN_OSC.sub("", data)
    for sequence in FORBIDDEN:
        assert sequence not in data, f"{where}: {sequence!r} reached the terminal"
    assert "\x07" not in data and "\x1b]" not in data, f"{where}: an OSC or a bell reached the terminal"


class Walk:
    """Each view in turn, the text on screen kept per view."""

    def __init__(self, pilot, recorded: list[str]) -> None:
        self.pilot = pilot
        self.recorded = recorded
        self.seen: dict[str, str] = {}

    async def look(self, where: str) -> str:
        await settle(self.pilot)
        assert_inert(screen_text(self.pilot.app), where)
        assert_inert("".join(self.recorded), where)
        text = self.seen[where] = widget_text(self.pilot.app)
        return text


async def walk_every_view(pilot, recorded: list[str], ids: dict[str, int]) -> Walk:
    app = pilot.app
    walk = Walk(pilot, recorded)
    await walk.look("overview")
    for key, view in (("2", "tasks"), ("3", "samples"), ("4", "triage"), ("L", "triage by label"), ("5", "compare"),
                      ("7", "plots"), ("8", "fixit"), ("i", "fixit explanation"), ("escape", "fixit again"),
                      ("E", "fixit export dialog"), ("escape", "fixit at last")):
        await pilot.press(key)
        await walk.look(view)
    await pilot.press("3")
    await settle(pilot)

    app.post_message(ShowSample(ids["hostile"]))
    await settle(pilot)
    sample = app.screen
    assert isinstance(sample, SampleScreen)
    for tab in TABS:
        sample.query_one("#sample-tabs").active = tab
        await walk.look(f"sample {tab}")

    await pilot.press("l")
    await settle(pilot)
    assert isinstance(app.screen, LabelDialog)
    await walk.look("label dialog")
    await pilot.press("escape")
    await settle(pilot)

    await pilot.press("A")
    await settle(pilot)
    steps = app.screen
    assert isinstance(steps, AgentStepsScreen)
    await walk.look("agent step 1")
    await pilot.press("down")
    await walk.look("agent step 2")
    await pilot.press("escape")
    await settle(pilot)

    app.post_message(ShowDiff(ids["hostile"], ids["fixed"]))
    await settle(pilot)
    diff = app.screen
    assert isinstance(diff, DiffScreen)
    for target in ("ptx", "manifest", "sass", "log", "evidence"):
        diff._set(target=target)
        await walk.look(f"diff {target}")
    await pilot.press("escape")
    await settle(pilot)

    app.post_message(StoreFailed(PLANTED))
    app.notify(PLANTED, title=PLANTED, markup=True)
    await walk.look("notifications")

    app.post_message(Reverify([ids["hostile"]]))
    await settle(pilot)
    await pilot.press("enter")  # no GPU here: yes to a static judgement
    await settle(pilot)
    live = app.screen
    assert isinstance(live, LiveScreen) and live.last_exit is not None
    await walk.look("live")
    return walk


async def test_every_view_keeps_planted_sequences_from_the_terminal(hostile_app, recorded):
    app, ids = hostile_app
    async with app.run_test(size=SIZE) as pilot:
        walk = await walk_every_view(pilot, recorded, ids)
    assert len("".join(recorded)) > 100_000  # the views were written to the driver
    assert_inert("".join(recorded), "the whole session")
    seen = {where: re.sub(r"\s+", "", text) for where, text in walk.seen.items()}  # wrapped lines joined

    def shown(needle: str, where: str) -> bool:
        return re.sub(r"\s+", "", needle) in seen[where]

    # Shown, written out: the escapes are on screen where the text is.
    assert shown("// \\x1b]52;c;cm0gLXJmIH4K\\x07 \\x1b]0;pwned-title", "sample tab-ptx")  # the code view
    assert shown("import:\\x1b]52", "sample tab-ptx")  # the origin, in the sample's head
    assert shown("\\u202eexe.txt\\u202c", "sample tab-evidence")
    assert shown("looks fine\\x0doverwritten", "sample tab-asm") and shown("safe\\x08\\x08", "sample tab-asm")
    assert shown("looks fine\\x0doverwritten", "live")  # the engine's standard error, one line
    assert shown("pay\\u200bpal", "agent step 2")
    # Markup shown as written, never applied (no link, no click action, no style).
    for view in ("tasks", "samples", "compare", "fixit explanation", "sample tab-evidence", "agent step 1", "agent step 2", "diff log",
                 "notifications", "live"):
        assert shown("[green]ok[/]", view), view
        assert shown("[link=file:///etc/passwd]x[/link]", view), view
        assert shown("[@click=app.quit]quit[/]", view) and shown("[$accent]v[/]", view), view
    assert shown("m\\x1b]0;T\\x07[red]x\\u202e", "compare")  # a model's name, in a column title
    assert shown("\\x1b]52", "notifications") and shown("\\x1b]52", "diff ptx")
    assert app.return_code in (None, 0)  # `[@click=app.quit]` quit nothing


async def test_each_view_makes_the_text_inert_itself(hostile_app, recorded, monkeypatch):
    """Without the last line filter, nothing planted reaches the terminal either: the views made
    the text inert, the filter only catches what a view might miss."""
    from ptxbench.tui.application import PtxbenchApp

    monkeypatch.setattr(PtxbenchApp, "get_line_filters",
                        lambda self: [f for f in super(PtxbenchApp, self).get_line_filters()
                                      if not isinstance(f, InertLines)])
    app, ids = hostile_app
    async with app.run_test(size=SIZE) as pilot:
        assert not any(isinstance(f, InertLines) for f in app.get_line_filters())
        await walk_every_view(pilot, recorded, ids)
    assert_inert("".join(recorded), "the whole session, no line filter")


async def test_the_line_filter_drops_what_a_view_let_through(hostile_app, recorded):
    """A widget that shows raw text (here a Static with a control sequence put in as a Content, the
    way a new view might forget to): the filter keeps it from the terminal and the line its width."""
    from textual.content import Content
    from textual.widgets import Static

    app, _ = hostile_app
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await app.screen.mount(Static(Content("before " + HOSTILE["clipboard"] + HOSTILE["fake_ok"] + " after"),
                                      id="raw"))
        await settle(pilot)
        assert "before ]52;c;cm0gLXJmIH4K[32mok[0m after" in screen_text(app)
    assert_inert("".join(recorded), "a raw Static")
