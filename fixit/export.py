"""Fixit examples in chat format, written as JSONL (and Parquet).

One example is one conversation, as a multi-turn model run would have had it:

    system     the task's system message
    user       the task prompt (the run's context level)
    assistant  the failed candidate
    user       the engine's judgement of it
    assistant  the explanation, then the fixed candidate

Training learns the last message only. Examples of the training and
validation splits carry only train-size results; held-out sizes appear only
in the held-out split.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ptxbench.fixit.explain import derived_explanation
from ptxbench.fixit.judgement import judgement_text
from ptxbench.fixit.records import FixitSample
from ptxbench.fixit.select import Selected, Selection

FORMAT_VERSION = 1
DEFAULT_CONTEXT = "brief"   # for samples made outside a run (mutations, imports)

PromptFor = Callable[[str, str], tuple[str, str]]  # (task id, context level) → (system, user)
EXPLANATIONS = ("preferred", "derived")  # the pair's preferred explanation, or always the one derived from the diff


def task_prompt(task_id: str, context: str) -> tuple[str, str]:
    """The system and user messages a model run sends for this task."""
    from ptxbench.tasks.prompts import build_prompt
    from ptxbench.tasks.spec import get_task

    prompt = build_prompt(get_task(task_id), context)
    return prompt.system, prompt.user


def candidate_text(sample: FixitSample) -> str:
    """A candidate as a model would have answered with it: one code block, and the manifest."""
    if sample.language == "none":
        return (sample.response or "").strip() or "(no reply)"
    fence = "cuda" if sample.language == "cuda" else "ptx"
    text = f"```{fence}\n{sample.code.rstrip()}\n```"
    if sample.manifest:
        text += "\n\n```json\n" + json.dumps(sample.manifest, indent=2) + "\n```"
    return text


@dataclass
class Example:
    id: str
    split: str
    messages: list[dict[str, str]]
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "split": self.split, "messages": self.messages, "meta": self.meta}

    @property
    def chars(self) -> int:
        return sum(len(m["content"]) for m in self.messages)


def build_example(chosen: Selected, *, prompt_for: PromptFor = task_prompt, context: str | None = None,
                  explanation: str = "preferred") -> Example:
    if explanation not in EXPLANATIONS:
        raise ValueError(f"explanation must be one of {', '.join(EXPLANATIONS)}, got {explanation!r}")
    pair = chosen.pair
    f, g = pair.failed, pair.fixed
    level = context or (f.context_level if f.run_id is not None else DEFAULT_CONTEXT)
    system, user = prompt_for(f.task_id, level)
    heldout = chosen.split == "heldout"
    stored = pair.explanation if explanation == "preferred" and pair.explanation and pair.explanation.strip() else None
    text = stored or derived_explanation(pair)
    source = pair.explanation_source if stored else "derived from diff"
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
        {"role": "assistant", "content": candidate_text(f)},
        {"role": "user", "content": judgement_text(f, include_heldout=heldout)},
        {"role": "assistant", "content": text.strip() + "\n\n" + candidate_text(g)},
    ]
    meta = {
        "format": FORMAT_VERSION,
        "task_id": f.task_id,
        "arch": f.arch,
        "category": pair.category,
        "stage_category": f.category,
        "kind": pair.kind,
        "verification": pair.verification,
        "explanation_source": source,
        "heldout_reason": chosen.heldout_reason,
        "context_level": level,
        "failed_sample_id": f.id,
        "fixed_sample_id": g.id,
        "fix_id": pair.fix_id,
        "model": f.model,
        "fixed_model": g.model,
        "fixed_device": g.device,
        "pair_key": chosen.key,
        "failed_lines": len(f.code.splitlines()),
        "fixed_lines": len(g.code.splitlines()),
    }
    return Example(f"fixit-{chosen.key[:16]}", chosen.split, messages, meta)


def build_examples(selection: Selection, *, prompt_for: PromptFor = task_prompt, context: str | None = None,
                   explanation: str = "preferred") -> list[Example]:
    order = {"train": 0, "val": 1, "heldout": 2}
    chosen = sorted(selection.chosen, key=lambda s: (order[s.split], s.pair.task_id, s.key))
    return [build_example(s, prompt_for=prompt_for, context=context, explanation=explanation) for s in chosen]


def write_jsonl(path: Path | str, examples: Iterable[Example]) -> int:
    """One JSON object per line; written to a temporary file and renamed, so a failed
    write never leaves half a set behind."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        n = dump_jsonl(fh, examples)
    tmp.replace(path)
    return n


def dump_jsonl(fh: IO[str], examples: Iterable[Example]) -> int:
    """The examples as JSON lines to an open text file; how many."""
    n = 0
    for ex in examples:
        fh.write(json.dumps(ex.to_dict(), ensure_ascii=False) + "\n")
        n += 1
    return n


def read_jsonl(path: Path | str, split: str | None = None) -> list[Example]:
    """Examples from a file `write_jsonl` wrote; a bad line is an error that names the line."""
    out: list[Example] = []
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                ex = Example(d["id"], d["split"], d["messages"], d.get("meta", {}))
                if not all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in ex.messages):
                    raise ValueError("every message needs a role and a content")
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{i}: not a Fixit example ({exc})") from None
            if split is None or ex.split == split:
                out.append(ex)
    return out


def write_parquet(path: Path | str, examples: Iterable[Example]) -> int:
    """The same examples as a Parquet table: id, split, messages (list of role/content), and the
    meta fields as columns."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    n = dump_parquet(tmp, examples)
    tmp.replace(path)
    return n


def dump_parquet(where: Path | str | IO[bytes], examples: Iterable[Example]) -> int:
    """The examples as a Parquet table (`write_parquet`) to a path or an open binary file; how many."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise RuntimeError("Parquet export needs pyarrow: pip install 'ptxbench[train]'") from None

    rows = []
    for ex in examples:
        row: dict[str, Any] = {"id": ex.id, "split": ex.split, "messages": ex.messages}
        for k, v in ex.meta.items():
            row[k] = v if v is None or isinstance(v, (int, float, str, bool)) else json.dumps(v)
        rows.append(row)
    if rows:
        table = pa.Table.from_pylist(rows)
    else:
        table = pa.table({"id": pa.array([], pa.string()), "split": pa.array([], pa.string())})
    pq.write_table(table, where)
    return len(rows)
