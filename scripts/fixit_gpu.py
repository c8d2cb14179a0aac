"""The whole Fixit loop in one process, sized to finish in about two minutes on one H200:
store → pairs → export → tiny checkpoint (tokenizer + pre-training on the PTX corpus) →
LoRA training → re-measurement (base vs tuned) → a JSON report.

    python scripts/fixit_gpu.py --out $OUT/fixit-gpu.json --markdown $OUT/fixit-gpu.md

The store is a fresh default store in a temporary folder, seeded from the repository (the
expert solutions, the mutation corpus and their recorded H200 evaluations), so the fix pairs
are the recorded mutation → expert pairs verified on a GPU. Held out: the whole
`rmsnorm_bf16_sm90a` task, the causal attention variants, and failures seen only at held-out
sizes. Each phase has a time cap (`--budget-s` in all); what ran is in the report. Without
CUDA it runs on the CPU with the `small` preset (`--preset cpu` runs longer). The tiny model will not write working kernels: the
point is that every number in the report is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

HELDOUT_TASKS = ("rmsnorm_bf16_sm90a",)
HELDOUT_VARIANTS = ("causal",)
FRESH_HELDOUT = ("rmsnorm_bf16_sm90a", "attn_fwd_causal_sm90a", "attn_bwd_causal_sm90a")

PRESETS: dict[str, dict[str, Any]] = {
    # an H200: a 4-layer, 256-wide model; pre-training and LoRA capped in seconds as well as steps
    "gpu": dict(vocab=4096, hidden=256, layers=4, heads=8, pretrain_steps=600, pretrain_seq=512, pretrain_batch=32,
                pretrain_max_s=25, lora_steps=400, lora_batch=8, max_len=1024, lora_lr=2e-3, lora_max_s=20,
                samples=4, max_new_tokens=256, repair_examples=16, gen_batch=32),
    # a CPU with time to spare (a few minutes): enough steps for the tuned model to differ
    "cpu": dict(vocab=2048, hidden=128, layers=2, heads=4, pretrain_steps=300, pretrain_seq=256, pretrain_batch=8,
                pretrain_max_s=150, lora_steps=300, lora_batch=4, max_len=384, lora_lr=3e-3, lora_max_s=150,
                samples=2, max_new_tokens=96, repair_examples=8, gen_batch=8),
    # a CPU: the same loop, small enough for a laptop or a test
    "small": dict(vocab=1024, hidden=64, layers=2, heads=4, pretrain_steps=40, pretrain_seq=256, pretrain_batch=8,
                  pretrain_max_s=30, lora_steps=40, lora_batch=4, max_len=256, lora_lr=5e-3, lora_max_s=30,
                  samples=2, max_new_tokens=48, repair_examples=4, gen_batch=8),
}


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": platform.python_version()}
    for name in ("torch", "transformers", "peft", "tokenizers", "ptxbench"):
        try:
            from importlib.metadata import version

            out[name] = version(name)
        except Exception:  # a missing package is reported, not fatal
            out[name] = None
    try:
        import torch

        out["cuda"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            out["device_name"] = torch.cuda.get_device_name(0)
    except ImportError:
        out["cuda"] = False
    return out


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSON report")
    ap.add_argument("--markdown", help="also write the side-by-side tables here")
    ap.add_argument("--work", help="working folder (default: a temporary one)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default=None, help="sizes (default: gpu with CUDA, else small)")
    ap.add_argument("--small", action="store_true", help="the same as --preset small")
    ap.add_argument("--budget-s", type=float, default=110.0, help="stop adding work past this (seconds)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    started = time.perf_counter()
    report: dict[str, Any] = {"script": "scripts/fixit_gpu.py", "argv": sys.argv[1:], "versions": versions(),
                              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "phases": {}}
    out_path = Path(args.out)

    def save() -> None:
        report["seconds"] = round(time.perf_counter() - started, 2)
        out_path.write_text(json.dumps(report, indent=2, default=str))

    def left() -> float:
        return args.budget_s - (time.perf_counter() - started)

    def phase(name: str):
        class _Phase:
            def __enter__(self) -> dict[str, Any]:
                self.t = time.perf_counter()
                self.d: dict[str, Any] = {}
                report["phases"][name] = self.d
                return self.d

            def __exit__(self, et, ev, tb) -> bool:
                self.d["seconds"] = round(time.perf_counter() - self.t, 2)
                if et is not None:
                    self.d["error"] = f"{et.__name__}: {ev}"
                    self.d["traceback"] = traceback.format_exc()[-3000:]
                save()
                return False

        return _Phase()

    name = "small" if args.small else args.preset or ("gpu" if _has_cuda() else "small")
    preset = PRESETS[name]
    report["preset"] = {"name": name, **preset}
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="fixit-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["PTXBENCH_DB"] = str(work / "store.sqlite")
    try:
        run(args, preset, work, report, phase, left)
        report["ok"] = True
    except Exception as exc:  # the report keeps what ran and why it stopped
        report["ok"] = False
        report["error"] = f"{type(exc).__name__}: {exc}"
    save()
    if args.markdown and report.get("remeasure"):
        from ptxbench.fixit.remeasure import report_markdown

        Path(args.markdown).write_text(markdown(report, report_markdown(report["remeasure"])))
    print(json.dumps({k: report[k] for k in ("ok", "seconds") if k in report}))
    return 0 if report.get("ok") else 1


def run(args: argparse.Namespace, p: dict[str, Any], work: Path, report: dict[str, Any], phase: Any, left: Any) -> None:
    from ptxbench.db.fixit import load_samples, save_export_stats, store_pairs, stored_pairs
    from ptxbench.db.seed import ensure_default_store
    from ptxbench.fixit.explain import DERIVED_SOURCE, derived_explanation
    from ptxbench.fixit.export import build_examples, write_jsonl
    from ptxbench.fixit.pairing import propose_pairs
    from ptxbench.fixit.remeasure import RemeasureConfig, remeasure
    from ptxbench.fixit.select import SelectConfig, leaks, select_pairs
    from ptxbench.fixit.stats import diversity_stats
    from ptxbench.fixit.tiny import TinyConfig, build_tiny_checkpoint, ptx_corpus
    from ptxbench.fixit.train import TrainConfig, train_lora
    from ptxbench.tasks.spec import task_ids

    with phase("store") as d:
        db = ensure_default_store(work / "store.sqlite")
        found = propose_pairs(load_samples(db), existing={q.key for q in stored_pairs(db, include_code=False)})
        store_pairs(db, [(q, derived_explanation(q), DERIVED_SOURCE) for q in found.pairs])
        pairs = stored_pairs(db)
        verified = [q for q in pairs if q.counts()]
        allow_static = not verified  # only when the store holds no GPU-verified pair (said in the report)
        d.update(stored_pairs=len(pairs), gpu_verified=len(verified), new_pairs=found.summary(),
                 allow_static=allow_static)

    with phase("export") as d:
        config = SelectConfig(heldout_tasks=HELDOUT_TASKS, heldout_variants=HELDOUT_VARIANTS, val_fraction=0.1,
                              allow_static=allow_static, seed=args.seed)
        selection = select_pairs(pairs, config)
        # Derived explanations name the failure category in a fixed form, which gives the tiny model a
        # pattern to learn and the re-measurement a number to read (names_category_rate).
        examples = build_examples(selection, explanation="derived")
        data = work / "fixit-set.jsonl"
        write_jsonl(data, examples)
        stats = diversity_stats(examples, selection)
        save_export_stats(db, stats, str(data))
        problems = leaks(selection)
        d.update(examples=len(examples), leaks=problems, splits={s: stats[s]["pairs"] for s in ("train", "val", "heldout")})
        report["export_stats"] = stats
        if problems:
            raise RuntimeError(f"the held-out split leaks into training: {problems[:3]}")

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    report["device"] = device
    with phase("tiny_checkpoint") as d:
        # The base model knows PTX from the expert kernels of the train tasks only: nothing held out.
        held = set(HELDOUT_TASKS) | {t for t in task_ids() if any(v in t.split("_") for v in HELDOUT_VARIANTS)}
        texts = ptx_corpus(exclude_tasks=held)
        d["corpus_excludes"] = sorted(held)
        tiny = TinyConfig(vocab_size=p["vocab"], hidden=p["hidden"], layers=p["layers"], heads=p["heads"],
                          seed=args.seed, pretrain_steps=p["pretrain_steps"], pretrain_seq=p["pretrain_seq"],
                          pretrain_batch=p["pretrain_batch"], pretrain_max_s=min(p["pretrain_max_s"], max(5.0, left() * 0.3)))
        d.update(build_tiny_checkpoint(work / "base", texts, tiny, device=device))

    with phase("train") as d:
        tcfg = TrainConfig(steps=p["lora_steps"], lr=p["lora_lr"], batch_size=p["lora_batch"], max_len=p["max_len"],
                           seed=args.seed, device=device, max_seconds=min(p["lora_max_s"], max(5.0, left() * 0.35)))
        result = train_lora(data, work / "base", work / "adapter", tcfg)
        d.update({k: v for k, v in result.to_dict().items() if k != "losses"})
        d["losses_every_10"] = result.losses[::10]

    with phase("remeasure") as d:
        train_tasks = sorted({e.meta["task_id"] for e in examples if e.split in ("train", "val")})
        rcfg = RemeasureConfig(samples_per_task=p["samples"], max_new_tokens=p["max_new_tokens"],
                               max_prompt_tokens=p["max_len"], repair_examples=p["repair_examples"],
                               batch_size=p["gen_batch"], loss_max_len=p["max_len"], seed=args.seed, device=device)
        result = remeasure(str(work / "base"), str(work / "adapter"),
                           task_splits={"train": train_tasks, "heldout": list(FRESH_HELDOUT)},
                           examples=examples, config=rcfg)
        report["remeasure"] = result
        d["seconds_inside"] = result["seconds"]


def markdown(report: dict[str, Any], tables: str) -> str:
    ph = report["phases"]
    tr = ph.get("train", {})
    tiny = ph.get("tiny_checkpoint", {})
    ex = report.get("export_stats", {})
    v = report["versions"]
    lines = [
        f"Device: {v.get('device_name') or report.get('device')}; torch {v.get('torch')}, transformers "
        f"{v.get('transformers')}, peft {v.get('peft')}; total {report.get('seconds')} s.", "",
        "| phase | seconds |", "|---|---|",
        *[f"| {k} | {d.get('seconds')} |" for k, d in ph.items()], "",
        f"Set: {ph.get('export', {}).get('splits')} (train/val/held-out), from {ph.get('store', {}).get('stored_pairs')} "
        f"stored pairs ({ph.get('store', {}).get('gpu_verified')} verified on a GPU); categories in train: "
        f"{len(ex.get('train', {}).get('per_category', {}))}; leaks: {ph.get('export', {}).get('leaks')}.", "",
        f"Tiny model: {tiny.get('params')} parameters, vocab {tiny.get('vocab')}, {tiny.get('layers')} layers × "
        f"{tiny.get('hidden')}; pre-training {tiny.get('pretrain')}.", "",
        f"LoRA: {tr.get('steps')} steps in {tr.get('seconds')} s on {tr.get('device')}, {tr.get('trainable_params')} "
        f"trainable of {tr.get('total_params')}; loss {tr.get('loss_first')} → {tr.get('loss_last')}; val loss "
        f"{tr.get('val_loss_before')} → {tr.get('val_loss_after')}.", "",
        tables,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
