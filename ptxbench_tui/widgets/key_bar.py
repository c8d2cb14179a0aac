"""The footer: the screen's active, shown bindings as one line of text.

A click on a key presses it (each number of the view bar opens its view).

It reads the same `active_bindings` as Textual's Footer (and the command
palette, commands.py), so the three agree. Textual's Footer builds a widget
per key and rebuilds them on every focus change, which cost ~100 ms each
time a view opened; one line of text costs nothing.
"""

from __future__ import annotations

from textual import events
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Static

from ptxbench.tui.keys import KEY_NAMES
from ptxbench.tui.widgets.sideways import TRAILING_GROUPS


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
        return [(shown, description) for shown, description, _ in self._entries()]

    def _entries(self) -> list[tuple[str, str, list[str]]]:
        """(key as shown, description, the keys to press) for each entry; a code view's sideways
        keys (widgets/sideways.py) after the view's own, though the focused view lists them first."""
        out: list[tuple[str, str]] = []
        pressed: dict[str, list[str]] = {}
        groups: dict[str, list[str]] = {}
        seen: set[str] = set()
        bindings = self.screen.active_bindings.items()
        last = [a.binding.group in TRAILING_GROUPS for _, a in bindings]
        for key, active in [b for b, later in zip(bindings, last) if not later] + [b for b, later in zip(bindings, last) if later]:
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
                pressed.setdefault(name, []).append(key)
                continue
            if binding.action in seen:
                continue
            seen.add(binding.action)
            out.append((shown, binding.description))
            pressed[binding.description] = [key]
        # The views' digits run together (`12345678`); a pair of other keys is `n/p`, `[/]`.
        joined = lambda keys: "".join(keys) if all(k.isdigit() for k in keys) else "/".join(keys)
        return [(joined(groups[d]) if not k else k, d, pressed.get(d, [])) for k, d in out]

    def update_keys(self) -> None:
        if not self.is_attached:
            return
        key_style = "bold $footer-key-foreground"
        parts: list[tuple[str, str] | str] = []
        self._targets: list[tuple[int, int, str]] = []  # (first column, end, key) for clicks
        x = 1  # the bar's left padding
        for shown, description, keys in self._fitting([*self._entries(), ("^p", "palette", ["ctrl+p"])]):
            if len(keys) > 1:  # a group: each of its keys is its own target (`12345678`, `n/p`)
                step = 1 if len(shown) == len(keys) else 2
                self._targets += [(x + step * i, x + step * i + 1, key) for i, key in enumerate(keys)]
            elif keys:
                self._targets.append((x, x + len(shown) + 1 + len(description), keys[0]))
            parts += [(shown, key_style), f" {description}  "]
            x += len(shown) + len(description) + 3
        # Content, not markup: keys such as "[" must not be read as tags.
        self.update(Content.assemble(*parts))

    def _fitting(self, entries: list[tuple[str, str, list[str]]]) -> list[tuple[str, str, list[str]]]:
        """As many entries as the width holds, in order; help and the palette always end the line
        (the view bar at the top names the views when their keys do not fit here)."""
        width = self.size.width - 2 if self.size.width else 10_000
        last = [e for e in entries if e[1] in ("Help", "palette")]
        cost = lambda e: len(e[0]) + len(e[1]) + 3
        room = width - sum(cost(e) for e in last)
        out = []
        for entry in entries:
            if entry in last:
                continue
            if cost(entry) > room:
                if entry[1] == "Views":
                    continue  # the view bar above says the same
                out.append(("…", "", []))
                break
            out.append(entry)
            room -= cost(entry)
        return out + last

    def on_resize(self) -> None:
        self.update_keys()

    def key_at(self, x: int) -> str | None:
        return next((key for start, end, key in getattr(self, "_targets", []) if start <= x < end), None)

    def on_click(self, event: events.Click) -> None:
        key = self.key_at(event.x)
        if key is not None:
            self.app.simulate_key(key)
