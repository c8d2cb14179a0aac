"""The PTXBench themes.

Besides Textual's colour system, these themes set `ptx-<role>` variables that
the code views use for PTX and SASS tokens (see ptxbench_tui/widgets/code_view.py);
any other theme colours code through its standard variables instead.
"""

from __future__ import annotations

from textual.theme import Theme

PTXBENCH_DARK = Theme(
    name="ptxbench",
    primary="#4FA3FF",
    secondary="#8B7CF6",
    accent="#FFB454",
    warning="#E6C15A",
    error="#F2617A",
    success="#5FD08A",
    foreground="#D8DEE9",
    background="#0F1419",
    surface="#161B22",
    panel="#1F2630",
    dark=True,
    variables={
        "ptx-opcode": "#FFB454",
        "ptx-family": "#5FD08A",
        "ptx-modifier": "#9AA5CE",
        "ptx-type": "#7DCFFF",
        "ptx-space": "#BB9AF7",
        "ptx-directive": "#4FA3FF",
        "ptx-guard": "#F2617A",
        "ptx-register": "#D8DEE9",
        "ptx-special": "#E0AF68",
        "ptx-label": "#E6C15A",
        "ptx-number": "#FF9E64",
        "ptx-string": "#9ECE6A",
        "ptx-comment": "#5C6773",
        "ptx-operator": "#F2617A",
        "ptx-marked": "#3A3320",
        "ptx-evidence": "#4A1F28",
        "footer-key-foreground": "#FFB454",
    },
)

PTXBENCH_LIGHT = Theme(
    name="ptxbench-light",
    primary="#0B63C4",
    secondary="#6A4FD8",
    accent="#B35C00",
    warning="#9A6B00",
    error="#C0223F",
    success="#1E7F45",
    foreground="#1F2328",
    background="#FAFAF7",
    surface="#F0F0EB",
    panel="#E4E6EA",
    dark=False,
    variables={
        "ptx-opcode": "#B35C00",
        "ptx-family": "#1E7F45",
        "ptx-modifier": "#57606A",
        "ptx-type": "#0B63C4",
        "ptx-space": "#6A4FD8",
        "ptx-directive": "#0B63C4",
        "ptx-guard": "#C0223F",
        "ptx-register": "#1F2328",
        "ptx-special": "#8A5A00",
        "ptx-label": "#8A5A00",
        "ptx-number": "#A0430A",
        "ptx-string": "#1E7F45",
        "ptx-comment": "#8C959F",
        "ptx-operator": "#C0223F",
        "ptx-marked": "#FFF1C2",
        "ptx-evidence": "#FFD8DE",
    },
)

THEMES: tuple[Theme, ...] = (PTXBENCH_DARK, PTXBENCH_LIGHT)
DEFAULT_THEME = PTXBENCH_DARK.name
