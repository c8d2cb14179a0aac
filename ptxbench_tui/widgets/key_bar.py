"""The footer: the screen's active, shown bindings as one line of text.

It reads the same `active_bindings` as Textual's Footer (and the command
palette, commands.py), so the three agree. Textual's Footer builds a widget
per key and rebuilds them on every focus change, which cost ~100 ms each
time a view opened; one line of text costs nothing.
"""

from __future__ import annotations

from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from ptxbench.tui.keys import KEY_NAMES


class KeyBar(Static):
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        width: 1fr;
        background: $footer-background;
        color: $footer-foreground;
        padding: 0 1;
    }
    """

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)
        self.call_after_refresh(self.update_keys)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen) -> None:
        if self.is_attached and screen is self.screen:
            self.update_keys()

    def entries(self) -> list[tuple[str, str]]:
        """(key as shown, description) for every shown, enabled binding, grouped keys together."""
        out: list[tuple[str, str]] = []
        groups: dict[str, list[str]] = {}
        seen: set[str] = set()
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if not binding.show or not binding.description or not active.enabled:
                continue
            shown = KEY_NAMES.get(key) or self.app.get_key_display(binding)
            if binding.group is not None:
                name = binding.group.description
                if name not in groups:
                    groups[name] = []
                    out.append(("", name))
                groups[name].append(shown)
                continue
            if binding.action in seen:
                continue
            seen.add(binding.action)
            out.append((shown, binding.description))
        return [("".join(groups[d]) if not k else k, d) for k, d in out]

    def update_keys(self) -> None:
        if not self.is_attached:
            return
        key_style = "bold $footer-key-foreground"
        parts: list[tuple[str, str] | str] = []
        for key, description in [*self.entries(), ("^p", "palette")]:
            parts += [(key, key_style), f" {description}  "]
        # Content, not markup: keys such as "[" must not be read as tags.
        self.update(Content.assemble(*parts))
