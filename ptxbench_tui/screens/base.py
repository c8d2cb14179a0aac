"""What every top-level view shares: the view bar, the footer, store reloads,
drills into the samples, and noticing another process's writes to the store."""

from __future__ import annotations

import weakref
from typing import Any

from textual import events
from textual.app import App, ComposeResult
from textual.screen import Screen

from ptxbench.db import browse
from ptxbench.db import browse_summary as summary
from ptxbench.tui.host import ExplorerHost, host
from ptxbench.tui.messages import ShowSamples
from ptxbench.tui.widgets.common import FilterPanel, ModeBar
from ptxbench.tui.widgets.key_bar import KeyBar
from ptxbench.tui.widgets.store_banner import StoreBanner

# How often the store is asked whether another process wrote to it: a label saved by another
# explorer, an `eval` or `import` shows within two of these.
POLL_S = 1.0


class ViewScreen(Screen):
    MODE = ""

    @property
    def ptx(self) -> ExplorerHost:
        return host(self)

    def compose(self) -> ComposeResult:
        yield ModeBar(self.MODE)
        yield StoreBanner()
        yield from self.compose_body()
        yield KeyBar()

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        self.watch(self.app, "data_version", self._data_changed, init=False)
        if self.ptx.cells is not None:
            self.call_after_refresh(self.refresh_data)
        StoreWatch.start(self.app)

    def on_resize(self, event: events.Resize) -> None:
        for panel in self.query(FilterPanel):
            panel.fit(event.size.width)

    def _data_changed(self, _version: int) -> None:
        self.refresh_data()

    def refresh_data(self) -> None:
        """The store's data changed (or was loaded): redraw from it."""

    def show_samples(self, flt: browse.SampleFilter) -> None:
        """Drill into the samples this filter selects; `esc` there comes back to this view."""
        _drilled_from[self.app] = self.MODE
        self.post_message(ShowSamples(flt, origin=self.MODE))


# The view a drill into the samples came from, until the samples view takes it.
_drilled_from: weakref.WeakKeyDictionary[App, str] = weakref.WeakKeyDictionary()


def take_drill_origin(app: App) -> str | None:
    """The view that just drilled into the samples (once; None when the samples were not drilled into)."""
    return _drilled_from.pop(app, None)


class StoreWatch:
    """One per explorer: polls PRAGMA data_version on a connection of its own (browse.ChangeWatch).
    A change with the store's summary unchanged (a label, a Fixit mark) redraws the views; one that
    changes it (new samples or evaluations) re-reads the summary too."""

    _watches: weakref.WeakKeyDictionary[App, StoreWatch] = weakref.WeakKeyDictionary()

    @classmethod
    def start(cls, app: App) -> None:
        if app in cls._watches:
            return
        explorer = host(app)
        try:
            change = browse.ChangeWatch(explorer.db_path)
        except Exception:  # a store that cannot be watched is still read on ctrl+r and after every write
            return
        watch = cls(app, change)
        cls._watches[app] = watch
        app.set_interval(POLL_S, watch.poll, name="store-watch")
        app.run_worker(watch.read_fingerprint, thread=True, group="store-watch", exit_on_error=False,
                       description="store fingerprint")

    def __init__(self, app: App, change: browse.ChangeWatch) -> None:
        self._app = weakref.ref(app)  # the app keeps the watch (its timer), never the other way round
        self.change = change
        self.fingerprint: list[Any] | None = None
        weakref.finalize(app, change.close)

    def read_fingerprint(self) -> bool:
        """In a worker thread: whether the summary's fingerprint moved since the last look."""
        app = self._app()
        if app is None:
            return False
        fingerprint = host(app).reader.read(summary.fingerprint)
        moved = self.fingerprint is not None and fingerprint != self.fingerprint
        self.fingerprint = fingerprint
        return moved

    def poll(self) -> None:
        app = self._app()
        if app is None or not app.is_running:
            self.change.close()
            return
        try:
            changed = self.change.changed()
        except Exception:  # a store gone or damaged meanwhile: the views' own reads say so
            return
        if changed:
            app.run_worker(self._changed, thread=True, group="store-watch", exit_on_error=False,
                           description="store changed")

    def _changed(self) -> None:
        app = self._app()
        if app is None:
            return
        moved = self.read_fingerprint()
        app.call_from_thread(self._redraw, moved)

    def _redraw(self, summary_moved: bool) -> None:
        app = self._app()
        if app is None:
            return
        explorer = host(app)
        if summary_moved:
            explorer.reload_store()  # the views redraw when the summary is in
        else:
            explorer.data_version += 1
