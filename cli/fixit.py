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
not load); 2 a usage mistake (a bad option, a missing file, a store that will not open).
The work itself is services/fixit.py, fixit_models.py and fixit_training.py.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ptxbench.cli.conventions import ExitCode, fail, register, reported
from ptxbench.cli.fixit_train import COMMANDS as TRAINING
from ptxbench.engine.inert import inert

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Fixit: fix pairs, explanations, a fine-tuning set, LoRA training and re-measurement.")

DbOpt = Annotated[Optional[Path], typer.Option("--db", help="store file (default: the user's store)")]
TaskOpt = Annotated[Optional[list[str]], typer.Option("--task", help="only these tasks (repeatable)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object instead of tables")]
CreateOpt = Annotated[bool, typer.Option("--create", help="make a new store at --db if there is none (without it a --db that is not a store is refused)")]


def _console() -> Any:
    from ptxbench.cli.terminal import console

    return console()


def _open(db: Path | None, command: str, *, create: bool = False, hint: str | None = None) -> Any:
    """The store a command reads and adds to: a named one must exist unless `create`. What its
    recovery journal holds is written first (a named store's by `open_for_writing`)."""
    from ptxbench.db.recovery import replay
    from ptxbench.db.store import say_on_stderr
    from ptxbench.services.fixit import open_store

    with reported(f"fixit {command}"):
        store = open_store(db, create=create, hint=hint)
        if db is None:
            said = replay(store).message()
            if said:
                say_on_stderr(said)
        return store


def _open_to_read(db: Path | None, command: str) -> Any:
    """The store a command only reads: as a reader where it cannot be written (read-only media, a
    read-only file or folder), else as `_open` does (a writable store is migrated and its recovery
    journal written)."""
    from ptxbench.db.access import require_store, store_access
    from ptxbench.db.store import default_store_path, open_store

    path = db if db is not None else default_store_path()
    with reported(f"fixit {command}"):
        if path.exists() and not store_access(path).writable:
            require_store(path, hint="check the --db path")
            return open_store(path, readonly=True, create=False)
    return _open(db, command, hint="check the --db path")


def _table(title: str, rows: list[tuple[Any, ...]], headers: tuple[str, ...]) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for h in headers:
        t.add_column(h)
    for r in rows:
        t.add_row(*(str(x) for x in r))
    return t


# -- pairs ------------------------------------------------------------------------------------------

def pairs(
    db: DbOpt = None,
    task: TaskOpt = None,
    model: Annotated[Optional[list[str]], typer.Option("--model", help="only failures of these models")] = None,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", help="later_turn, same_model, expert (default all)")] = None,
    allow_static: Annotated[bool, typer.Option("--allow-static", help="count fixes that passed statically only (no GPU evaluation)")] = False,
    marked_only: Annotated[bool, typer.Option("--marked-only", help="only samples a person marked as Fixit candidates")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="report, store nothing")] = False,
    as_json: JsonOpt = False,
    create: CreateOpt = False,
) -> None:
    """Find fix pairs for failed samples and store the verified ones.

    The fix is a later turn, another sample of the same model, or the expert solution; a pair
    is stored (with a derived explanation) when its fix passes the train sizes."""
    from ptxbench.services.fixit import find_pairs

    store = _open(db, "pairs", create=create)
    with reported("fixit pairs"):
        outcome = find_pairs(store, tasks=task, models=model, kinds=kind, allow_static=allow_static,
                             marked_only=marked_only, dry_run=dry_run)
    found, stored, result = outcome.found, outcome.stored, outcome.to_dict()
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
    create: CreateOpt = False,
) -> None:
    """Ask a (stronger) model to repair failed samples.

    Up to --turns answers each, every answer judged by the engine; a repair that passes the
    train sizes becomes a fix pair."""
    from ptxbench.services.catalogue import require_context
    from ptxbench.services.fixit import repair_targets
    from ptxbench.services.fixit_models import RepairConfig, api_key
    from ptxbench.services.fixit_models import repair as run_repair
    from ptxbench.services.runs import EndpointError

    with reported("fixit repair"):
        require_context(context)
        key = api_key(api_key_env)
    store = _open(db, "repair", create=create)
    with reported("fixit repair"):
        targets = repair_targets(store, tasks=task, allow_static=allow_static, include_fixed=include_fixed, limit=limit)
    if not targets:
        typer.echo("no failed samples to repair")
        return
    cfg = RepairConfig(model=model, base_url=base_url, api_key=key, turns=turns, temperature=temperature,
                       max_tokens=max_tokens, concurrency=concurrency, timeout_s=timeout_s, retries=retries,
                       gpu=gpu, allow_static=allow_static, context=context)
    progress = (lambda e: typer.echo(json.dumps(e))) if as_json else None
    try:
        report = run_repair(store, cfg, targets, progress)
    except EndpointError as exc:
        raise fail("fixit repair", str(exc), ExitCode.TOOL) from None
    if as_json:
        typer.echo(json.dumps({"event": "done", **report.to_dict()}))
        return
    _console().print(f"{report.attempted} failed sample(s) sent to {model}: {report.repaired} repaired (stored as fix "
                     f"pairs), {report.unverified} passed statically only, {report.failed} not repaired; "
                     f"{report.requests} request(s); categories {dict(report.categories)}")
    for err in report.errors:
        typer.echo(inert(f"  sample {err['failed_sample_id']} turn {err['turn']}: {err['error']}"), err=True)


# -- explain ----------------------------------------------------------------------------------------

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
    create: CreateOpt = False,
) -> None:
    """Explain the stored pairs, by a model or derived from the diff.

    A model writes from the pair and the engine's evidence; with no model configured the
    explanation is derived from the diff and the failure category."""
    from ptxbench.services.fixit import counting_pairs
    from ptxbench.services.fixit_models import api_key
    from ptxbench.services.fixit_models import explain as run_explain
    from ptxbench.services.runs import EndpointError

    if (model is None) != (base_url is None):
        raise fail("fixit explain", "--model and --base-url go together (leave both out for derived explanations)")
    store = _open(db, "explain", create=create)
    with reported("fixit explain"):
        pairs_ = counting_pairs(store, tasks=task, allow_static=allow_static)
        try:
            report = run_explain(store, pairs_, limit=limit, redo=redo, model=model, base_url=base_url,
                                 **({} if model is None else {"api_key": api_key(api_key_env), "temperature": temperature,
                                                              "max_tokens": max_tokens, "concurrency": concurrency}))
        except EndpointError as exc:
            raise fail("fixit explain", str(exc), ExitCode.TOOL) from None
    if as_json:
        typer.echo(json.dumps(report.to_dict()))
        return
    if model is None:
        typer.echo(f"{report.derived} derived explanation(s) added ({len(pairs_)} pair(s) considered)")
    else:
        typer.echo(inert(f"{report.written} explanation(s) written by {model} ({report.asked} asked, "
                         f"{report.empty} empty, {len(report.errors)} error(s))"))


# -- export -----------------------------------------------------------------------------------------

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
    create: CreateOpt = False,
) -> None:
    """Write the fine-tuning set (JSONL, optionally Parquet) and its statistics.

    Verified pairs, deduplicated, capped, split into train, val and held-out; the diversity
    statistics are printed, kept in the store and written to OUT.stats.json."""
    from ptxbench.services.fixit import ExportRequest, export_set

    with reported("fixit export"):
        request = ExportRequest(out=out, parquet=parquet, tasks=task, cap_per_task=cap_per_task,
                                cap_per_category=cap_per_category, val_fraction=val_fraction,
                                heldout_tasks=tuple(heldout_task or ()), heldout_variants=tuple(heldout_variant or ()),
                                heldout_size_failures=heldout_size_failures, dedup_threshold=dedup_threshold,
                                allow_static=allow_static, context=context, explanation=explanation, seed=seed)
        store = _open(db, "export", create=create)
        stats, considered = export_set(store, request)
    if as_json:
        typer.echo(json.dumps(stats, default=str))
        return
    _print_stats(stats, considered)


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


def stats(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """What the store holds for Fixit: pairs per category, task, arch, kind; the last export."""
    from ptxbench.services.fixit import store_stats

    result = store_stats(_open_to_read(db, "stats"))
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


COMMANDS = (("pairs", pairs), ("repair", repair), ("explain", explain), ("export", export), ("stats", stats),
            *TRAINING)
register(app, COMMANDS, group="fixit")
