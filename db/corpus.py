"""The mutation corpus in a store: defective variants of the expert solutions, each with
its fix, for the README's screenshot and for trying the explorer on failures.

The variants come from tasks/mutations.toml (`ptxbench.tasks.mutations`); each is
stored under its mutation's `source`, so adding the corpus twice adds nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

import sqlite_utils

from ptxbench.db.records import Fix, Sample
from ptxbench.db.writes import add_fix, add_sample, get_or_create_model

# Assembler categories whose evidence names a PTX line (the screenshot jumps to it).
ASSEMBLER_LINE_CATEGORIES = ("unknown_instruction", "operand_mismatch", "invalid_operand", "undefined_symbol", "syntax")


def add_mutation_corpus(db: sqlite_utils.Database, variants: Iterable[Any]) -> int:
    """Store each variant (a `ptxbench.tasks.mutations.Variant`) not stored yet as a sample of
    the model `mutation`, with a fix pointing at its task's expert sample. Returns how many."""
    have = {r[0] for r in db.execute("SELECT source FROM samples")}
    experts = {task: sid for sid, task in db.execute(
        "SELECT s.id, s.task_id FROM samples s JOIN models m ON m.id = s.model_id WHERE m.kind = 'expert'")}
    model_id = get_or_create_model(db, "mutation", kind="mutation", source="tasks/mutations.toml").id
    added = 0
    for variant in variants:
        m = variant.mutation
        if m.source in have or m.task not in experts:
            continue
        sample = add_sample(db, Sample(task_id=m.task, language="ptx", source=m.source, code=variant.code,
                                       model_id=model_id, manifest=None))
        add_fix(db, Fix(failed_sample_id=sample.id, fixed_sample_id=experts[m.task], explanation=m.fix,
                        explanation_source="written with the mutation", source="tasks/mutations.toml"))
        added += 1
    return added


def assembler_failure(conn: sqlite3.Connection) -> tuple[int, str, str] | None:
    """(sample id, category, task) of a judged failure whose assembler message names a line,
    GEMM and attention first: the README's screenshot shows one."""
    marks = ", ".join("?" for _ in ASSEMBLER_LINE_CATEGORIES)
    row = conn.execute(
        f"""SELECT s.id, e.category, s.task_id FROM samples s JOIN evaluations e ON e.sample_id = s.id
            WHERE e.category IN ({marks})
            ORDER BY (s.task_id LIKE 'gemm%' OR s.task_id LIKE 'attn%') DESC, e.category = 'operand_mismatch' DESC, s.id
            LIMIT 1""",
        ASSEMBLER_LINE_CATEGORIES,
    ).fetchone()
    return (row[0], row[1], row[2]) if row else None
