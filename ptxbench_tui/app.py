"""ptxbench-tui: the explorer (placeholder until the app lands)."""


def main() -> None:
    print("ptxbench-tui: the explorer is not built yet")
