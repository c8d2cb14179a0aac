"""The command palette offers exactly the actions the footer shows.

Hits come from the screen's active bindings (the focused widget's, the
screen's and the app's, as the footer collects them), so a remapped key or
a new binding in keys.py shows up in both without a second list.
"""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from ptxbench.tui.keys import KEY_NAMES


class BindingCommands(Provider):
    def _commands(self) -> list[tuple[str, str, object]]:
        screen = self.screen
        out = []
        seen: set[str] = set()
        for key, active in screen.active_bindings.items():
            binding = active.binding
            if not binding.description or not active.enabled:
                continue
            name = binding.description
            ident = f"{name}|{binding.action}"
            if ident in seen:
                continue
            seen.add(ident)
            shown = self.app.get_key_display(binding) if binding.key_display is None else binding.key_display
            help_text = f"key {KEY_NAMES.get(key, shown)}" + (f" · {binding.tooltip}" if binding.tooltip else "")
            run = partial(self.app.call_later, self.app.run_action, binding.action, active.node)
            out.append((name, help_text, run))
        return sorted(out, key=lambda c: c[0])

    async def discover(self) -> Hits:
        for name, help_text, run in self._commands():
            yield DiscoveryHit(name, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, run in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), run, help=help_text)
