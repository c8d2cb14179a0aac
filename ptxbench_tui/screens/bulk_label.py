"""One label for several selected samples: the label dialog, titled for all of them."""

from __future__ import annotations

from textual.widgets import Label, Static

from ptxbench.tui.screens.dialogs import LabelDialog


class BulkLabelDialog(LabelDialog):
    def __init__(self, sample_ids: list[int]) -> None:
        super().__init__(sample_ids[0], None, None)
        self.sample_ids = list(sample_ids)

    def on_mount(self) -> None:
        super().on_mount()
        shown = ", ".join(str(i) for i in self.sample_ids[:8]) + (" …" if len(self.sample_ids) > 8 else "")
        self.query_one("#label-dialog > Label", Label).update(f"[b]Label {len(self.sample_ids)} samples[/b]  ({shown})")
        self.query_one("#label-dialog > .dim", Static).update(
            "Each gets this label as a new row beside its automatic category; the categories stay.")
