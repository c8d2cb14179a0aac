"""What the explorer is started with: store, engine command, theme, keymap."""

from __future__ import annotations

import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ptxbench.services.batch_process import default_engine_cmd
from ptxbench.themes.ptxbench import DEFAULT_THEME

KEYMAP_ENV = "PTXBENCH_KEYMAP"


def keymap_path() -> Path:
    env = os.environ.get(KEYMAP_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("ptxbench", appauthor=False)) / "keymap.toml"


def load_keymap(path: Path | None = None) -> dict[str, str]:
    """`[keys]` table of binding id → key(s), e.g. `"samples.diff" = "D"`.
    A missing file is an empty keymap; a broken one is reported, not fatal."""
    path = path or keymap_path()
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        print(f"ptxbench-tui: ignoring the keymap {path}: {exc}", file=sys.stderr)
        return {}
    keys = data.get("keys", {})
    return {str(k): str(v) for k, v in keys.items() if isinstance(v, str)}


@dataclass
class Config:
    db_path: Path
    engine_cmd: list[str] = field(default_factory=default_engine_cmd)
    theme: str = DEFAULT_THEME
    keymap: dict[str, str] = field(default_factory=dict)
    gpu_lock_dir: Path | None = None  # where the one-engine-per-GPU lock lives; default beside the store
