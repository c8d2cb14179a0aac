"""Re-measuring after training: the base model and the tuned one (the same object with its
adapter turned off and on) generate in-process, and the engine's static stages judge what
they wrote, side by side per split and per failure category.

Two measurements:

- `fresh`: the task prompts a model run sends (train tasks, held-out tasks), n samples
  each: extract rate, assemble rate, uses-what-was-asked rate, static pass rate, and the
  categories;
- `repair`: the Fixit examples' own conversations up to the judgement (validation and
  held-out splits): the same rates, plus how often the reply names the failure's category.

With the loss per split (mean per learned token), base and tuned. GPU stages are not run
here: a static pass means "assembles for the target and uses every requested family".
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ptxbench.engine.categories import OK
from ptxbench.fixit.export import Example, task_prompt
from ptxbench.fixit.train import eval_loss, load_tuned

VARIANTS = ("base", "tuned")
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class RemeasureConfig:
    samples_per_task: int = 2
    max_new_tokens: int = 256
    temperature: float = 0.8          # 0: greedy
    top_p: float = 0.95
    context: str = "brief"
    max_prompt_tokens: int | None = None   # cut prompts from the front (the training length, for a tiny model)
    batch_size: int = 8
    repair_examples: int = 16         # per split
    loss_max_len: int = 1024
    seed: int = 0
    device: str | None = None


def judge_reply(text: str, task_id: str) -> dict[str, Any]:
    """The static engine's verdict on a generated reply (never raises for the reply)."""
    from ptxbench.engine.extract import extract
    from ptxbench.engine.static import judge_static

    res = extract(text)
    row: dict[str, Any] = {"extracted": res.ok, "category": res.category, "compiled": False, "uses": False,
                           "static_ok": False}
    if not res.ok:
        return row
    try:
        verdict = judge_static(res, task_id)
    except (RuntimeError, OSError) as exc:  # a missing assembler is a gap in the measurement, not a verdict
        row.update(category=NOT_MEASURED, compiled=None, uses=None, static_ok=None, note=str(exc)[:200])
        return row
    row.update(category=verdict.category, compiled=verdict.assembled,
               uses=verdict.stage == "inspect" and not verdict.required_missing, static_ok=verdict.category == OK)
    return row


def _rate(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    known = [r[key] for r in rows if r.get(key) is not None]
    return round(sum(1 for v in known if v) / len(known), 4) if known else None


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "n": len(rows),
        "extract_rate": _rate(rows, "extracted"),
        "compile_rate": _rate(rows, "compiled"),
        "uses_rate": _rate(rows, "uses"),
        "static_ok_rate": _rate(rows, "static_ok"),
        "categories": dict(Counter(r["category"] for r in rows).most_common()),
    }
    if any("names_category" in r for r in rows):
        out["names_category_rate"] = _rate(rows, "names_category")
    return out


def generate(model: Any, tokenizer: Any, conversations: Sequence[list[dict[str, str]]], config: RemeasureConfig,
             device: Any) -> list[str]:
    """One reply per conversation, in batches, left-padded."""
    import torch

    prompts = []
    for conv in conversations:
        text = tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if config.max_prompt_tokens and len(ids) > config.max_prompt_tokens:
            ids = ids[len(ids) - config.max_prompt_tokens:]
        prompts.append(ids)
    pad = tokenizer.pad_token_id
    out: list[str] = []
    for i in range(0, len(prompts), config.batch_size):
        chunk = prompts[i:i + config.batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.full((len(chunk), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, p in enumerate(chunk):
            ids[row, width - len(p):] = torch.tensor(p)
            mask[row, width - len(p):] = 1
        sampling = {"do_sample": True, "temperature": config.temperature, "top_p": config.top_p} \
            if config.temperature > 0 else {"do_sample": False}
        with torch.no_grad():
            gen = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                                 max_new_tokens=config.max_new_tokens, pad_token_id=pad,
                                 eos_token_id=tokenizer.eos_token_id, **sampling)
        for row in gen[:, width:]:
            out.append(tokenizer.decode(row.tolist(), skip_special_tokens=True))
    return out


def remeasure(model_dir: str, adapter_dir: str, *, task_splits: dict[str, Sequence[str]],
              examples: Sequence[Example] = (), config: RemeasureConfig = RemeasureConfig(),
              prompt_for: Any = task_prompt, keep_replies: int = 3) -> dict[str, Any]:
    """Base vs tuned, side by side: see the module docstring. `task_splits` maps a split name
    to task ids; `examples` are the set's examples (their `val` and `heldout` splits are used
    for the repair measurement and all splits for the loss)."""
    import torch

    started = time.perf_counter()
    device = torch.device(config.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model, tokenizer = load_tuned(model_dir, adapter_dir, device)
    repair_sets = {split: [e for e in examples if e.split == split][:config.repair_examples]
                   for split in ("val", "heldout")}
    report: dict[str, Any] = {
        "model_dir": str(model_dir), "adapter_dir": str(adapter_dir), "device": str(device),
        "config": asdict(config), "task_splits": {k: list(v) for k, v in task_splits.items()},
        "fresh": {}, "fresh_per_task": {}, "repair": {}, "repair_per_category": {}, "loss": {}, "replies": {},
    }
    for variant in VARIANTS:
        ctx = model.disable_adapter() if variant == "base" else contextlib.nullcontext()
        with ctx:
            fresh: dict[str, Any] = {}
            per_task: dict[str, Any] = {}
            replies: list[dict[str, Any]] = []
            for split, task_ids in task_splits.items():
                convs, owners = [], []
                for task_id in task_ids:
                    system, user = prompt_for(task_id, config.context)
                    for _ in range(config.samples_per_task):
                        convs.append([{"role": "system", "content": system}, {"role": "user", "content": user}])
                        owners.append(task_id)
                torch.manual_seed(config.seed)
                texts = generate(model, tokenizer, convs, config, device) if convs else []
                rows = [{"task_id": t, **judge_reply(x, t)} for t, x in zip(owners, texts)]
                fresh[split] = summarize(rows)
                for task_id in task_ids:
                    per_task[f"{split}:{task_id}"] = summarize([r for r in rows if r["task_id"] == task_id])
                replies.extend({"kind": "fresh", "split": split, "task_id": t, "text": x[:400]}
                               for t, x in list(zip(owners, texts))[:keep_replies])
            repair: dict[str, Any] = {}
            repair_cat: dict[str, Any] = {}
            for split, items in repair_sets.items():
                if not items:
                    continue
                torch.manual_seed(config.seed)
                texts = generate(model, tokenizer, [e.messages[:-1] for e in items], config, device)
                rows = []
                for e, x in zip(items, texts):
                    cat = str(e.meta.get("category", ""))
                    rows.append({"category_expected": cat, **judge_reply(x, e.meta["task_id"]),
                                 "names_category": bool(cat) and cat in x})
                repair[split] = summarize(rows)
                by_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
                for r in rows:
                    by_cat[r["category_expected"]].append(r)
                repair_cat[split] = {c: summarize(rs) for c, rs in sorted(by_cat.items())}
                replies.extend({"kind": "repair", "split": split, "task_id": e.meta["task_id"], "text": x[:400]}
                               for e, x in list(zip(items, texts))[:keep_replies])
            loss = {split: eval_loss(model, tokenizer, [e for e in examples if e.split == split],
                                     max_len=config.loss_max_len, device=device)
                    for split in ("train", "val", "heldout")}
        report["fresh"][variant] = fresh
        report["fresh_per_task"][variant] = per_task
        report["repair"][variant] = repair
        report["repair_per_category"][variant] = repair_cat
        report["loss"][variant] = {k: (None if v is None else round(v, 4)) for k, v in loss.items()}
        report["replies"][variant] = replies
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


# -- the side-by-side table -------------------------------------------------------------------------

_RATES = ("extract_rate", "compile_rate", "uses_rate", "static_ok_rate", "names_category_rate")


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def report_markdown(report: dict[str, Any]) -> str:
    """Base vs tuned as Markdown tables: fresh prompts and repairs per split, repairs per
    category, and the loss per split."""
    lines: list[str] = []
    for part in ("fresh", "repair"):
        base, tuned = report[part].get("base", {}), report[part].get("tuned", {})
        splits = sorted(set(base) | set(tuned))
        if not splits:
            continue
        lines += [f"### {'Task prompts' if part == 'fresh' else 'Repair prompts (the set’s own conversations)'}", "",
                  "| split | n | " + " | ".join(f"{r.removesuffix('_rate')} base → tuned" for r in _RATES) + " |",
                  "|---|---|" + "---|" * len(_RATES)]
        for s in splits:
            b, t = base.get(s, {}), tuned.get(s, {})
            cells = [f"{_fmt(b.get(r))} → {_fmt(t.get(r))}" for r in _RATES]
            lines.append(f"| {s} | {b.get('n', t.get('n', 0))} | " + " | ".join(cells) + " |")
        lines.append("")
        for s in splits:
            b, t = base.get(s, {}).get("categories", {}), tuned.get(s, {}).get("categories", {})
            cats = ", ".join(f"{c} {b.get(c, 0)} → {t.get(c, 0)}" for c in sorted(set(b) | set(t)))
            lines.append(f"- {s} categories (base → tuned): {cats}")
        lines.append("")
    per_cat = report.get("repair_per_category", {})
    if per_cat.get("tuned"):
        lines += ["### Repair prompts per failure category", "",
                  "| split | category | n | names category base → tuned | extract base → tuned |", "|---|---|---|---|---|"]
        for split, cats in sorted(per_cat["tuned"].items()):
            for cat, t in cats.items():
                b = per_cat.get("base", {}).get(split, {}).get(cat, {})
                lines.append(f"| {split} | {cat} | {t['n']} | {_fmt(b.get('names_category_rate'))} → "
                             f"{_fmt(t.get('names_category_rate'))} | {_fmt(b.get('extract_rate'))} → "
                             f"{_fmt(t.get('extract_rate'))} |")
        lines.append("")
    loss = report.get("loss", {})
    if loss:
        lines += ["### Loss per learned token", "", "| split | base | tuned |", "|---|---|---|"]
        for split in ("train", "val", "heldout"):
            lines.append(f"| {split} | {_fmt(loss.get('base', {}).get(split))} | {_fmt(loss.get('tuned', {}).get(split))} |")
        lines.append("")
    return "\n".join(lines)
