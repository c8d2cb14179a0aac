"""Which evaluation speaks for a sample, and what it says: one rule and one
definition of every per-sample fact, applied by every view and count.

Evaluations are append-only, so a sample re-verified on another machine holds
several judgements. Re-verifying on a machine without the task's GPU gives a
judgement of fewer stages (`static`: the static stages only; `skipped: …`:
no device for the GPU stages) than the one recorded on the GPU (`judged`).
The newer, shallower row must not hide the deeper one, or the GPU verdict and
its timing vanish from the views, the metrics and the Fixit counts.

The rule (docs/store.md, "Which evaluation speaks"):

1. A complete judgement (status `judged`: the pipeline ran as far as the
   candidate let it) beats a partial one (`static`, `skipped: …`), whatever
   the engine versions.
2. Among equals, the newest engine version speaks (versions compare as
   numbers: 0.10.0 is newer than 0.9.0).
3. Among judgements of one version, the newest row.

A person can ask for the newest evaluation instead (`newest=True`); the
explorer's reader carries that choice on its connections, and every query
reads it from the connection it is given (`newest_of`). All evaluations stay
in the sample's history either way.

What the speaking evaluation `e` says is defined here once, as SQL for the
views and in Python for db/metrics.py: each fact is three-valued (true,
false, unknown), correctness is reported per split (train, held-out), and a
verdict carries the notes its category alone would hide (`NOTE_*`).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ptxbench.engine.categories import STAGE_OF

COMPLETE_STATUS = "judged"


def newest_of(db: Any) -> bool:
    """The choice carried by a connection (or a sqlite_utils.Database around one): False unless
    the explorer's reader was asked for the newest evaluation."""
    conn = getattr(db, "conn", db)
    return bool(getattr(conn, "newest_evaluation", False))


# --------------------------------------------------------------------------- engine versions

_PART_MAX = 999_999  # a part beyond this compares as this (three parts fit SQLite's 64-bit integers)


def version_key_sql(column: str) -> str:
    """SQL for a sortable integer of an engine version `MAJOR.MINOR.PATCH` (anything after a part's
    digits is ignored; a version that is not a number, like `fixture`, is 0.0.0)."""
    rest = f"substr({column}, instr({column}, '.') + 1)"
    parts = (
        f"CAST({column} AS INTEGER)",
        f"CASE WHEN instr({column}, '.') > 0 THEN CAST({rest} AS INTEGER) ELSE 0 END",
        f"CASE WHEN instr({column}, '.') > 0 AND instr({rest}, '.') > 0 "
        f"THEN CAST(substr({rest}, instr({rest}, '.') + 1) AS INTEGER) ELSE 0 END",
    )
    major, minor, patch = (f"min(max({p}, 0), {_PART_MAX})" for p in parts)
    return f"((({major}) * {_PART_MAX + 1} + ({minor})) * {_PART_MAX + 1} + ({patch}))"


def version_key(version: str | None) -> tuple[int, int, int]:
    """`version_key_sql` in Python."""
    parts = (version or "").split(".")
    out = []
    for i in range(3):
        digits = re.match(r"\s*[+-]?\d+", parts[i]) if i < len(parts) else None
        out.append(min(max(int(digits.group()), 0), _PART_MAX) if digits else 0)
    return out[0], out[1], out[2]


# --------------------------------------------------------------------------- which evaluation speaks


def shown_id(sample: str = "s.id", *, newest: bool = False) -> str:
    """SQL for the id of the evaluation that speaks for the sample whose id is the SQL
    expression `sample` (NULL when it has none). One index probe on evaluations(sample_id)
    and a sort of that sample's few rows."""
    if newest:
        return f"(SELECT MAX(vn.id) FROM evaluations vn WHERE vn.sample_id = {sample})"
    return (
        f"(SELECT vs.id FROM evaluations vs WHERE vs.sample_id = {sample} "
        f"ORDER BY vs.status = '{COMPLETE_STATUS}' DESC, {version_key_sql('vs.engine_version')} DESC, vs.id DESC "
        "LIMIT 1)"
    )


def shown_for(db: Any, sample: str = "s.id") -> str:
    """`shown_id` with the choice the connection carries."""
    return shown_id(sample, newest=newest_of(db))


def speaks(evaluations: list[Any]) -> Any | None:
    """The rule in Python, over records with `id`, `status` and `engine_version`."""
    if not evaluations:
        return None
    return max(evaluations, key=lambda e: (e.status == COMPLETE_STATUS, version_key(e.engine_version), e.id))


def describe(newest: bool) -> str:
    """How the views name the rule in force."""
    return "newest evaluation" if newest else "most complete evaluation, newest engine"


# --------------------------------------------------------------------------- per-sample facts

Tri = bool | None

# A NULL column is "not reached" (false) when the category failed at one of these
# stages, else "not measured" (unknown: a hardware skip or a static-only judgement).
NOT_REACHED: dict[str, frozenset[str]] = {
    "compiled": frozenset({"extract", "assemble"}),
    "uses": frozenset({"extract", "assemble"}),
    "correct": frozenset({"extract", "assemble", "load", "run", "verify"}),
    "executed": frozenset({"extract", "assemble", "load", "run"}),
}
# A kernel missing a requested family cannot have executed it.
NO_FAMILIES = frozenset({"required_missing_ptx", "required_missing_sass", "required_not_executed"})
SPLITS: tuple[str, ...] = ("train", "heldout")
# The column of each split's correctness; `correct_heldout` is reached at the same stages as `correct`.
CORRECT_COLUMN = {"train": "correct", "heldout": "correct_heldout"}


def fact(value: Any, category: str | None, fact_name: str) -> Tri:
    """A column of an evaluation as a three-valued fact (`fact_name` a key of NOT_REACHED)."""
    if value is not None:
        return bool(value)
    stage = STAGE_OF.get(category or "")
    if stage in NOT_REACHED[fact_name]:
        return False
    if fact_name == "executed" and category in NO_FAMILIES:
        return False
    return None


def uses(uses_ptx: Tri, uses_sass: Tri) -> Tri:
    """Uses every requested family: the SASS verdict where the engine made one (it implies the
    PTX one), else the PTX verdict; a false on either is false."""
    if uses_ptx is False or uses_sass is False:
        return False
    return uses_sass if uses_sass is not None else uses_ptx


def both(*values: Tri) -> Tri:
    if any(v is False for v in values):
        return False
    return None if any(v is None for v in values) else True


def fast(correct: Tri, uses_: Tri, speedup: float | None, p: float) -> Tri:
    """Correct, uses what was asked, and faster than the library by more than `p`
    (`speedup` None: not timed)."""
    if speedup is not None and speedup <= p:
        return False
    solved = both(correct, uses_)
    if solved is not True:
        return solved
    return None if speedup is None else True


def _in(stages: frozenset[str]) -> str:
    return ", ".join(f"'{c}'" for c, stage in sorted(STAGE_OF.items()) if stage in stages)


def fact_sql(column: str, fact_name: str, e: str = "e") -> str:
    """`fact` as SQL over the evaluation alias `e`: 1, 0 or NULL."""
    no_families = ", ".join(f"'{c}'" for c in sorted(NO_FAMILIES))
    extra = f" WHEN {e}.category IN ({no_families}) THEN 0" if fact_name == "executed" else ""
    return (f"(CASE WHEN {e}.{column} IS NOT NULL THEN {e}.{column} "
            f"WHEN {e}.category IN ({_in(NOT_REACHED[fact_name])}) THEN 0{extra} END)")


def compiled_sql(e: str = "e") -> str:
    return fact_sql("compiled", "compiled", e)


def correct_sql(split: str = "train", e: str = "e") -> str:
    """Correct at the split's sizes (train: `correct`; held-out: `correct_heldout`)."""
    return fact_sql(CORRECT_COLUMN[split], "correct", e)


def uses_sql(e: str = "e") -> str:
    ptx, sass = fact_sql("uses_ptx", "uses", e), fact_sql("uses_sass", "uses", e)
    return f"(CASE WHEN {ptx} = 0 OR {sass} = 0 THEN 0 ELSE COALESCE({sass}, {ptx}) END)"


def heldout_log_speedup_sql(e: str = "e") -> str:
    """The mean log speedup of the held-out measurements (their geometric mean's log; NULL: none timed)."""
    return (f"(SELECT avg(ln(ms.speedup)) FROM measurements ms "
            f"WHERE ms.evaluation_id = {e}.id AND ms.split = 'heldout' AND ms.speedup > 0)")


def fast_sql(split: str, p: float, e: str = "e") -> str:
    """`fast` as SQL: the train split reads the headline speedup, the held-out split the geometric
    mean of the held-out measurements (read only for a kernel not already known to fail)."""
    correct, uses_ = correct_sql(split, e), uses_sql(e)
    if split == "train":
        speed, slow = f"(CASE WHEN {e}.speedup > 0 THEN {e}.speedup END)", f"{e}.speedup > 0 AND {e}.speedup <= {p!r}"
        return (f"(CASE WHEN {slow} THEN 0 WHEN {correct} = 0 OR {uses_} = 0 THEN 0 "
                f"WHEN {correct} IS NULL OR {uses_} IS NULL OR {speed} IS NULL THEN NULL ELSE 1 END)")
    # Held-out: the measurements are read once, only for a kernel not already known to fail.
    log_p = repr(math.log(p)) if p > 0 else None
    timed = (f"FROM measurements ms WHERE ms.evaluation_id = {e}.id AND ms.split = 'heldout' AND ms.speedup > 0")
    mean = "avg(ln(ms.speedup))"
    when_solved = (f"(SELECT CASE WHEN count(*) = 0 THEN NULL "
                   f"WHEN {mean if log_p else '1'} > {log_p or '0'} THEN 1 ELSE 0 END {timed})")
    when_unknown = f"(SELECT CASE WHEN count(*) > 0 AND {mean} <= {log_p} THEN 0 END {timed})" if log_p else "NULL"
    return (f"(CASE WHEN {correct} = 0 OR {uses_} = 0 THEN 0 "
            f"WHEN {correct} IS NULL OR {uses_} IS NULL THEN {when_unknown} ELSE {when_solved} END)")


def passes_sql(e: str = "e") -> str:
    """Correct at every size it was run at: a complete judgement, correct on the train sizes and not
    wrong at a held-out one. What a bare `ok` (no note) means, and what Compare's best sample is first."""
    return f"({e}.status = '{COMPLETE_STATUS}' AND {e}.correct = 1 AND COALESCE({e}.correct_heldout, 1) = 1)"


# --------------------------------------------------------------------------- what a category alone hides

# The GPU stages never ran (a hardware skip or static-only judging); correct on the train sizes but
# wrong at a held-out one; the verdict of an older engine version than one that also judged the
# sample (only partly: else that one would speak). A note is these words, space-separated, in this order.
NOTE_NOT_RUN = "not_run"
NOTE_HELDOUT = "heldout"
NOTE_OLDER = "older"
NOTES: tuple[str, ...] = (NOTE_NOT_RUN, NOTE_HELDOUT, NOTE_OLDER)
# How every view, export and dialog writes them (ptxbench_tui/verdict.py has the legend).
NOTE_TEXT = {NOTE_NOT_RUN: "not run", NOTE_HELDOUT: "held-out ✗", NOTE_OLDER: "older engine"}


def written(category: str | None, note: str = "") -> str:
    """`ok`, `ok · held-out ✗`, `ok · not run`, `wrong_result · older engine`, or `—` (never evaluated)."""
    if category is None:
        return "—"
    return " · ".join([category, *(NOTE_TEXT.get(w, w) for w in note.split())])


def older_engine_sql(e: str = "e") -> str:
    """Another evaluation of the sample was made by a newer engine version than `e`."""
    return (f"EXISTS (SELECT 1 FROM evaluations vo WHERE vo.sample_id = {e}.sample_id AND vo.id <> {e}.id "
            f"AND {version_key_sql('vo.engine_version')} > {version_key_sql(f'{e}.engine_version')})")


def note_sql(e: str = "e", *, older: bool = True) -> str:
    """The verdict note of the evaluation `e` (`note_of` in SQL); '' when its category says it all.
    `older=False` leaves out the older-engine word (a probe of the sample's other evaluations): the
    summary cells and the filters that drill into them count by the rest."""
    base = (f"CASE WHEN {e}.status <> '{COMPLETE_STATUS}' THEN '{NOTE_NOT_RUN}' "
            f"WHEN {e}.correct = 1 AND {e}.correct_heldout = 0 THEN '{NOTE_HELDOUT}' ELSE '' END")
    if not older:
        return f"(CASE WHEN {e}.id IS NULL THEN '' ELSE {base} END)"
    return (f"(CASE WHEN {e}.id IS NULL THEN '' ELSE ltrim({base} || "
            f"CASE WHEN {older_engine_sql(e)} THEN ' {NOTE_OLDER}' ELSE '' END) END)")


def note_of(status: str | None, correct: Any, correct_heldout: Any, *, older: bool = False) -> str:
    """`note_sql` in Python, for one evaluation; `older`: a newer engine also judged the sample."""
    words = []
    if status is not None and status != COMPLETE_STATUS:
        words.append(NOTE_NOT_RUN)
    elif correct in (1, True) and correct_heldout in (0, False):
        words.append(NOTE_HELDOUT)
    if older:
        words.append(NOTE_OLDER)
    return " ".join(words)


def older_than_another(shown: Any, evaluations: list[Any]) -> bool:
    """`older_engine_sql` in Python: `shown` is one of `evaluations` (records with `engine_version`)."""
    if shown is None:
        return False
    mine = version_key(shown.engine_version)
    return any(version_key(e.engine_version) > mine for e in evaluations if e.id != shown.id)
