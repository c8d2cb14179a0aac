"""`ptxbench fixit`: from a model's failures to a balanced fine-tuning set, a LoRA run on a
local checkpoint, and re-measurement. docs/fixit.md walks through the loop.

    ptxbench fixit pairs        find fix pairs in the store and keep the verified ones
    ptxbench fixit repair       ask a (stronger) model to repair failures, judge every answer
    ptxbench fixit explain      written explanations, by a model or derived from the diff
    ptxbench fixit export       the chat-format JSONL (and Parquet) set with its statistics
    ptxbench fixit stats        what the store holds for Fixit
    ptxbench fixit tiny         a tiny local checkpoint to prove the loop (no downloads)
    ptxbench fixit train        LoRA fine-tuning on a local checkpoint
    ptxbench fixit remeasure    base vs tuned on train and held-out tasks

Exit status: 0 done; 1 the work failed (an endpoint that refuses, a checkpoint that does
not load); 2 a usage mistake (a bad option, a missing file).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Fixit: fix pairs, explanations, a fine-tuning set, LoRA training and re-measurement.")

EXIT_FAILED = 1
EXIT_USAGE = 2

DbOpt = Annotated[Optional[Path], typer.Option("--db", help="store file (default: the user's store)")]
TaskOpt = Annotated[Optional[list[str]], typer.Option("--task", help="only these tasks (repeatable)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object instead of tables")]


def _console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def _fail(message: str, code: int = EXIT_USAGE) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _open(db: Path | None) -> Any:
    from ptxbench.db.seed import ensure_default_store
    from ptxbench.db.store import StoreError, open_store

    try:
        return open_store(db) if db is not None else ensure_default_store()
    except StoreError as exc:
        _fail(str(exc), EXIT_FAILED)


def _tasks(task: list[str] | None) -> list[str] | None:
    if not task:
        return None
    from ptxbench.tasks.spec import task_ids

    known = set(task_ids())
    bad = [t for t in task if t not in known]
    if bad:
        _fail(f"unknown task {', '.join(bad)} (known: {', '.join(sorted(known))})")
    return list(task)


def _table(title: str, rows: list[tuple[Any, ...]], headers: tuple[str, ...]) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for h in headers:
        t.add_column(h)
    for r in rows:
        t.add_row(*(str(x) for x in r))
    return t


def _api_key(env: str | None) -> str | None:
    if env is None:
        return None
    value = os.environ.get(env)
    if not value:
        _fail(f"--api-key-env {env}: the variable is not set")
    return value


# -- pairs ------------------------------------------------------------------------------------------

@app.command()
def pairs(
    db: DbOpt = None,
    task: TaskOpt = None,
    model: Annotated[Optional[list[str]], typer.Option("--model", help="only failures of these models")] = None,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", help="later_turn, same_model, expert (default all)")] = None,
    allow_static: Annotated[bool, typer.Option("--allow-static", help="count fixes that passed statically only (no GPU evaluation)")] = False,
    marked_only: Annotated[bool, typer.Option("--marked-only", help="only samples a person marked as Fixit candidates")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="report, store nothing")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Find fix pairs for failed samples and store the verified ones.

    The fix is a later turn, another sample of the same model, or the expert solution; a pair
    is stored (with a derived explanation) when its fix passes the train sizes."""
    from ptxbench.db.fixit import load_samples, stored_pairs, store_pairs
    from ptxbench.engine.fixit.explain import DERIVED_SOURCE, derived_explanation
    from ptxbench.engine.fixit.pairing import AUTO_KINDS, propose_pairs

    kinds = tuple(kind) if kind else AUTO_KINDS
    bad = [k for k in kinds if k not in AUTO_KINDS]
    if bad:
        _fail(f"--kind {', '.join(bad)}: pairing finds {', '.join(AUTO_KINDS)}")
    store = _open(db)
    tasks = _tasks(task)
    samples = load_samples(store, task_ids=tasks, models=model)
    existing = {p.key for p in stored_pairs(store, task_ids=tasks, include_code=False)}
    found = propose_pairs(samples, existing=existing, kinds=kinds, allow_static=allow_static, marked_only=marked_only)
    stored = []
    if not dry_run and found.pairs:
        for p in found.pairs:
            if p.verification != "gpu":
                p.source = f"{p.source} (static only)"
        stored = store_pairs(store, [(p, derived_explanation(p), DERIVED_SOURCE) for p in found.pairs])
    result = {
        **found.summary(), "stored": len(stored), "dry_run": dry_run,
        "pairs_found": [{"failed": p.failed.id, "fixed": p.fixed.id, "kind": p.kind, "category": p.category,
                         "task": p.task_id, "verification": p.verification} for p in found.pairs],
        "unverified_pairs": [{"failed": p.failed.id, "fixed": p.fixed.id, "kind": p.kind, "task": p.task_id,
                              "why": "the fix passed the static stages only; run it on a GPU "
                                     "(ptxbench eval) or pass --allow-static"} for p in found.unverified],
    }
    if as_json:
        typer.echo(json.dumps(result))
        return
    con = _console()
    by = Counter((p.kind, p.category) for p in found.pairs)
    con.print(_table("fix pairs that count" + (" (dry run: not stored)" if dry_run else ""),
                     [(k, c, n) for (k, c), n in sorted(by.items())], ("kind", "category", "pairs")))
    if found.unverified:
        shown = found.unverified[:20]
        con.print(_table("unverified: the fix passed statically only (excluded; --allow-static counts them)",
                         [(p.failed.id, p.fixed.id, p.kind, p.task_id) for p in shown], ("failed", "fixed", "kind", "task")))
        if len(found.unverified) > len(shown):
            con.print(f"… and {len(found.unverified) - len(shown)} more (--json lists them all)")
    con.print(f"{len(found.pairs)} pair(s) found, {len(stored)} stored; {found.already_stored} already stored; "
              f"{len(found.unverified)} unverified; {len(set(found.failed_without_fix))} failed sample(s) with no fix")


# -- repair -----------------------------------------------------------------------------------------

@app.command()
def repair(
    model: Annotated[str, typer.Option("--model", help="the repairing model's name at the endpoint")],
    base_url: Annotated[str, typer.Option("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")],
    db: DbOpt = None,
    task: TaskOpt = None,
    turns: Annotated[int, typer.Option("--turns", min=1, help="repair answers per failed sample")] = 2,
    limit: Annotated[int, typer.Option("--limit", min=1, help="at most this many failed samples")] = 50,
    include_fixed: Annotated[bool, typer.Option("--include-fixed", help="also failures that already have a counting fix")] = False,
    gpu: Annotated[bool, typer.Option("--gpu/--static", help="judge repairs on the GPU (needed for a repair to count)")] = False,
    allow_static: Annotated[bool, typer.Option("--allow-static", help="count repairs that pass statically")] = False,
    context: Annotated[Optional[str], typer.Option("--context", help="prompt level (default: the failed run's)")] = None,
    temperature: Annotated[Optional[float], typer.Option("--temperature")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 4,
    timeout_s: Annotated[float, typer.Option("--timeout-s")] = 600.0,
    retries: Annotated[int, typer.Option("--retries", min=0)] = 6,
    api_key_env: Annotated[Optional[str], typer.Option("--api-key-env", help="name of the variable holding the key")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Ask a (stronger) model to repair failed samples.

    Up to --turns answers each, every answer judged by the engine; a repair that passes the
    train sizes becomes a fix pair."""
    from ptxbench.cli.fixit_models import RepairConfig, Repairer
    from ptxbench.db.fixit import load_samples, stored_pairs
    from ptxbench.models.client import EndpointError

    if context is not None and context not in ("none", "brief", "full"):
        _fail("--context must be none, brief or full")
    key = _api_key(api_key_env)
    store = _open(db)
    tasks = _tasks(task)
    fixed = {p.failed.id for p in stored_pairs(store, task_ids=tasks, include_code=False)
             if p.counts(allow_static=allow_static)}
    targets = [s for s in load_samples(store, task_ids=tasks) if s.train_failure and s.model_kind != "expert"
               and (include_fixed or s.id not in fixed) and not s.source.startswith("fixit repair of sample")]
    targets = targets[:limit]
    if not targets:
        typer.echo("no failed samples to repair")
        return
    cfg = RepairConfig(model=model, base_url=base_url, api_key=key, turns=turns, temperature=temperature,
                       max_tokens=max_tokens, concurrency=concurrency, timeout_s=timeout_s, retries=retries,
                       gpu=gpu, allow_static=allow_static, context=context)
    progress = (lambda e: typer.echo(json.dumps(e))) if as_json else None
    try:
        report = asyncio.run(Repairer(store, cfg, progress).repair_all(targets))
    except EndpointError as exc:
        _fail(str(exc), EXIT_FAILED)
    if as_json:
        typer.echo(json.dumps({"event": "done", **report.to_dict()}))
        return
    _console().print(f"{report.attempted} failed sample(s) sent to {model}: {report.repaired} repaired (stored as fix "
                     f"pairs), {report.unverified} passed statically only, {report.failed} not repaired; "
                     f"{report.requests} request(s); categories {dict(report.categories)}")
    for err in report.errors:
        typer.echo(f"  sample {err['failed_sample_id']} turn {err['turn']}: {err['error']}", err=True)


# -- explain ----------------------------------------------------------------------------------------

@app.command()
def explain(
    db: DbOpt = None,
    task: TaskOpt = None,
    model: Annotated[Optional[str], typer.Option("--model", help="the explaining model (needs --base-url)")] = None,
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="OpenAI-compatible endpoint")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1)] = 200,
    redo: Annotated[bool, typer.Option("--redo", help="ask again for pairs a model already explained")] = False,
    allow_static: Annotated[bool, typer.Option("--allow-static", help="also explain pairs whose fix passed statically only")] = False,
    temperature: Annotated[Optional[float], typer.Option("--temperature")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens")] = None,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 4,
    api_key_env: Annotated[Optional[str], typer.Option("--api-key-env")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Explain the stored pairs, by a model or derived from the diff.

    A model writes from the pair and the engine's evidence; with no model configured the
    explanation is derived from the diff and the failure category."""
    from ptxbench.cli.fixit_models import derive_missing, explain_pairs, has_model_explanation
    from ptxbench.db.fixit import stored_pairs
    from ptxbench.models.client import EndpointError

    if (model is None) != (base_url is None):
        _fail("--model and --base-url go together (leave both out for derived explanations)")
    store = _open(db)
    pairs_ = [p for p in stored_pairs(store, task_ids=_tasks(task)) if p.counts(allow_static=allow_static)]
    if model is None:
        report = derive_missing(store, pairs_[:limit])
    else:
        todo = [p for p in pairs_ if redo or not has_model_explanation(store, p)][:limit]
        try:
            report = asyncio.run(explain_pairs(store, todo, model=model, base_url=base_url or "",
                                               api_key=_api_key(api_key_env), temperature=temperature,
                                               max_tokens=max_tokens, concurrency=concurrency))
        except EndpointError as exc:
            _fail(str(exc), EXIT_FAILED)
    if as_json:
        typer.echo(json.dumps(report.to_dict()))
        return
    if model is None:
        typer.echo(f"{report.derived} derived explanation(s) added ({len(pairs_)} pair(s) considered)")
    else:
        typer.echo(f"{report.written} explanation(s) written by {model} ({report.asked} asked, {report.empty} empty, "
                   f"{len(report.errors)} error(s))")


# -- export -----------------------------------------------------------------------------------------

@app.command()
def export(
    out: Annotated[Path, typer.Argument(help="the JSONL file to write")],
    parquet: Annotated[Optional[Path], typer.Option("--parquet", help="also write this Parquet file")] = None,
    db: DbOpt = None,
    task: TaskOpt = None,
    cap_per_task: Annotated[int, typer.Option("--cap-per-task", min=0, help="0: no cap")] = 200,
    cap_per_category: Annotated[int, typer.Option("--cap-per-category", min=0, help="0: no cap")] = 100,
    val_fraction: Annotated[float, typer.Option("--val-fraction", min=0.0, max=0.9)] = 0.1,
    heldout_task: Annotated[Optional[list[str]], typer.Option("--heldout-task", help="hold out a whole task (repeatable)")] = None,
    heldout_variant: Annotated[Optional[list[str]], typer.Option("--heldout-variant", help="hold out tasks whose id or arch has this word: causal, bwd, sm_100a … (repeatable)")] = None,
    heldout_size_failures: Annotated[bool, typer.Option("--heldout-size-failures/--drop-size-failures", help="failures seen only at held-out sizes go to the held-out split (or are left out)")] = True,
    dedup_threshold: Annotated[float, typer.Option("--dedup-threshold", min=0.5, max=1.0)] = 0.9,
    allow_static: Annotated[bool, typer.Option("--allow-static", help="also pairs whose fix passed statically only")] = False,
    context: Annotated[Optional[str], typer.Option("--context", help="prompt level (default: each failed sample's run's)")] = None,
    explanation: Annotated[str, typer.Option("--explanation", help="preferred (a model's, then one written with the data, then derived) or derived")] = "preferred",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Write the fine-tuning set (JSONL, optionally Parquet) and its statistics.

    Verified pairs, deduplicated, capped, split into train, val and held-out; the diversity
    statistics are printed, kept in the store and written to OUT.stats.json."""
    from ptxbench.cli.fixit_models import attach_feedback
    from ptxbench.db.fixit import save_export_stats, stored_pairs
    from ptxbench.engine.fixit.export import build_examples, write_jsonl, write_parquet
    from ptxbench.engine.fixit.select import SelectConfig, select_pairs
    from ptxbench.engine.fixit.stats import diversity_stats

    if context is not None and context not in ("none", "brief", "full"):
        _fail("--context must be none, brief or full")
    if explanation not in ("preferred", "derived"):
        _fail("--explanation must be preferred or derived")
    if not out.parent.is_dir():
        _fail(f"{out.parent} is not a folder")
    _tasks(heldout_task)
    store = _open(db)
    try:
        config = SelectConfig(cap_per_task=cap_per_task or None, cap_per_category=cap_per_category or None,
                              val_fraction=val_fraction, heldout_tasks=tuple(heldout_task or ()),
                              heldout_variants=tuple(heldout_variant or ()),
                              heldout_size_failures=heldout_size_failures, dedup_threshold=dedup_threshold,
                              allow_static=allow_static, seed=seed)
    except ValueError as exc:
        _fail(str(exc))
    found = stored_pairs(store, task_ids=_tasks(task))
    attach_feedback(store, [p.failed for p in found])
    selection = select_pairs(found, config)
    examples = build_examples(selection, context=context, explanation=explanation)
    write_jsonl(out, examples)
    if parquet is not None:
        write_parquet(parquet, examples)
    stats = diversity_stats(examples, selection)
    stats["files"] = {"jsonl": str(out), "parquet": str(parquet) if parquet else None}
    stats["explanation"] = explanation
    stats["dropped_pairs"] = [{"failed": p.failed.id, "fixed": p.fixed.id, "reason": r} for p, r in selection.dropped]
    out.with_name(out.name.removesuffix(".jsonl") + ".stats.json").write_text(json.dumps(stats, indent=2, default=str))
    save_export_stats(store, {k: v for k, v in stats.items() if k != "dropped_pairs"}, str(out))
    if as_json:
        typer.echo(json.dumps(stats, default=str))
        return
    _print_stats(stats, len(found))


def _print_stats(stats: dict[str, Any], candidates: int) -> None:
    con = _console()
    splits = ("train", "val", "heldout")
    con.print(f"{stats['all']['pairs']} example(s) from {candidates} stored pair(s): "
              + ", ".join(f"{s} {stats[s]['pairs']}" for s in splits))
    for key, title in (("per_category", "category"), ("per_task", "task"), ("per_arch", "arch"), ("per_kind", "kind"),
                       ("per_explanation_source", "explanation")):
        names = sorted(set().union(*(stats[s][key] for s in splits)))
        con.print(_table(f"pairs per {title}", [(n, *(stats[s][key].get(n, 0) for s in splits)) for n in names],
                         (title, *splits)))
    length = stats["all"]["length_chars"]
    con.print(f"length (characters): min {length['min']}, median {length['p50']}, p90 {length['p90']}, "
              f"max {length['max']}; category entropy {stats['train']['category_entropy_bits']} bits (train)")
    if stats.get("dropped"):
        con.print("dropped: " + ", ".join(f"{k} {v}" for k, v in sorted(stats["dropped"].items())))


@app.command()
def stats(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """What the store holds for Fixit: pairs per category, task, arch, kind; the last export."""
    from ptxbench.db.fixit import fixit_stats

    result = fixit_stats(_open(db))
    if as_json:
        typer.echo(json.dumps(result, default=str))
        return
    con = _console()
    con.print(f"{result['pairs']} stored pair(s): {result['verified']} verified ({result['gpu_verified']} on a GPU), "
              f"{result['unverified']} not counting; {result['failed_samples']} failed sample(s), "
              f"{result['failed_with_a_verified_pair']} with a verified pair")
    for key in ("per_category", "per_task", "per_arch", "per_kind", "per_explanation_source"):
        if result[key]:
            con.print(_table(key.replace("_", " "), list(result[key].items()), ("", "pairs")))
    if result["last_export"]:
        last = result["last_export"]
        con.print(f"last export: {last.get('path')}: " + ", ".join(
            f"{s} {last.get(s, {}).get('pairs', 0)}" for s in ("train", "val", "heldout")))


from ptxbench.cli.fixit_train import register as _register_training  # noqa: E402

_register_training(app)
