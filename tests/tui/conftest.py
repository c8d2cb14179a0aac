"""Fixtures for the explorer's tests: a small store written through the store's
own functions (copied fresh for every test), and the app factory."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
# The explorer saves its store summary in the user's cache; tests keep theirs apart.
os.environ["PTXBENCH_CACHE_DIR"] = tempfile.mkdtemp(prefix="ptxbench-tui-test-cache-")

from fixture_store import FixtureIds, build_fixture_store  # noqa: E402

from ptxbench.tui.app import make_app  # noqa: E402
from ptxbench.tui.application import PtxbenchApp  # noqa: E402

REPLAY = HERE / "engine_replay.py"
STREAM = HERE / "data" / "eval_stream.jsonl"
SIZE = (140, 40)


@pytest.fixture(scope="session")
def _template(tmp_path_factory) -> tuple[Path, FixtureIds]:
    path = tmp_path_factory.mktemp("template") / "fixture.sqlite"
    ids = build_fixture_store(path)
    return path, ids


@pytest.fixture
def ids(_template) -> FixtureIds:
    return _template[1]


@pytest.fixture
def store(_template, tmp_path) -> Path:
    """A fresh copy of the fixture store for one test."""
    path = tmp_path / "store.sqlite"
    shutil.copyfile(_template[0], path)
    return path


def replay_cmd(*extra: str) -> list[str]:
    return [sys.executable, str(REPLAY), "--stream", str(STREAM), *extra]


@pytest.fixture
def app_for(store, tmp_path):
    def make(*engine_args: str, **kw) -> PtxbenchApp:
        return make_app(store, engine_cmd=replay_cmd(*engine_args), gpu_lock_dir=tmp_path, theme=kw.pop("theme", "ptxbench"), **kw)

    return make


async def settle(pilot) -> None:
    """Wait for every worker and the messages they posted."""
    app = pilot.app
    for _ in range(5):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if not any(w.is_running for w in app.workers):
            break
    await pilot.pause()


async def open_view(pilot, key: str, screen_type: type):
    """Press a view's number key once the app has settled; the view, checked to be that type."""
    await settle(pilot)
    await pilot.press(key)
    await settle(pilot)
    screen = pilot.app.screen
    assert isinstance(screen, screen_type), screen
    return screen
