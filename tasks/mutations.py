"""Failing variants made by mutating the expert solutions, each with the fix explained.

They seed the store with realistic failures (and the Fixit pairs that repair
them) without pretending to be model output: every variant's source says
"mutation of expert:<task>". A mutation is a literal or regex edit of the
expert's `kernel.ptx` or `manifest.json`; it must match exactly as many times
as it says, so a regenerated expert that no longer fits fails loudly instead
of silently producing an unmutated copy.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

MUTATIONS_FILE = Path(__file__).with_name("mutations.toml")
SOLUTIONS_DIR = Path(__file__).with_name("solutions")
EDITABLE = ("kernel.ptx", "manifest.json")


class MutationError(ValueError):
    pass


@dataclass(frozen=True)
class Edit:
    file: str  # kernel.ptx | manifest.json
    find: str
    replace: str
    regex: bool = False
    count: int = 1  # how many matches the expert must have; 0 = at least one, all replaced


@dataclass(frozen=True)
class Mutation:
    id: str
    task: str
    what: str  # the defect, in a few words
    expect: str  # the category the defect should produce (the recorded evaluation says what did)
    fix: str  # why the expert's version works: the explanation stored with the fix pair
    edits: tuple[Edit, ...]
    # "heldout": the defect shows only at held-out sizes (a generalization failure: the
    # train verdict is ok and the held-out measurements carry `expect`).
    shows_at: str = "train"
    # Categories the defect may show instead, where a race or the drawn inputs decide (a missing fence
    # reads stale values that are sometimes NaN): each is the same defect seen another way.
    also: tuple[str, ...] = ()

    def shows(self, category: str) -> bool:
        return category == self.expect or category in self.also

    @property
    def source(self) -> str:
        return f"mutation of expert:{self.task} ({self.what})"


@dataclass(frozen=True)
class Variant:
    mutation: Mutation
    code: str
    manifest: str | None


def load_mutations(path: Path = MUTATIONS_FILE) -> list[Mutation]:
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise MutationError(f"{path}: {exc}") from None
    out: list[Mutation] = []
    seen: set[str] = set()
    for i, m in enumerate(raw.get("mutation", [])):
        where = f"{path.name}: mutation #{i + 1} ({m.get('id', '?')})"
        missing = [k for k in ("id", "task", "what", "expect", "fix", "edit") if k not in m]
        if missing:
            raise MutationError(f"{where}: missing {', '.join(missing)}")
        if m["id"] in seen:
            raise MutationError(f"{where}: duplicate id")
        seen.add(m["id"])
        edits = []
        for e in m["edit"]:
            if e.get("file", "kernel.ptx") not in EDITABLE:
                raise MutationError(f"{where}: edit file must be one of {EDITABLE}")
            edits.append(
                Edit(
                    file=e.get("file", "kernel.ptx"),
                    find=e["find"],
                    replace=e.get("replace", ""),
                    regex=bool(e.get("regex", False)),
                    count=int(e.get("count", 1)),
                )
            )
        shows_at = m.get("shows_at", "train")
        if shows_at not in ("train", "heldout"):
            raise MutationError(f"{where}: shows_at must be train or heldout")
        also = m.get("also", [])
        if not isinstance(also, list) or not all(isinstance(c, str) for c in also):
            raise MutationError(f"{where}: also must be a list of category names")
        out.append(Mutation(m["id"], m["task"], m["what"], m["expect"], m["fix"].strip(), tuple(edits), shows_at,
                            tuple(also)))
    return out


def _apply(text: str, edit: Edit, where: str) -> str:
    pattern = edit.find if edit.regex else re.escape(edit.find)
    try:
        compiled = re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise MutationError(f"{where}: bad pattern: {exc}") from None
    found = len(compiled.findall(text))
    if (edit.count and found != edit.count) or (not edit.count and found == 0):
        want = edit.count or "at least 1"
        raise MutationError(f"{where}: pattern {edit.find!r} matched {found} times in {edit.file}, expected {want}")
    replacement = edit.replace if edit.regex else edit.replace.replace("\\", "\\\\")
    return compiled.sub(replacement, text)


def apply(mutation: Mutation, solutions_dir: Path = SOLUTIONS_DIR) -> Variant:
    """The mutated candidate: the expert's files with the edits applied."""
    folder = solutions_dir / mutation.task
    files = {name: (folder / name).read_text() for name in EDITABLE if (folder / name).exists()}
    if "kernel.ptx" not in files:
        raise MutationError(f"{mutation.id}: no expert kernel.ptx in {folder}")
    for edit in mutation.edits:
        if edit.file not in files:
            raise MutationError(f"{mutation.id}: expert has no {edit.file}")
        files[edit.file] = _apply(files[edit.file], edit, mutation.id)
    return Variant(mutation, files["kernel.ptx"], files.get("manifest.json"))


def all_variants(solutions_dir: Path = SOLUTIONS_DIR) -> list[Variant]:
    return [apply(m, solutions_dir) for m in load_mutations()]
