"""How fast the explorer is on a store of 100 000 samples.

    python benchmarks/tui_speed.py                      # makes /tmp/ptxbench-tui-bench.sqlite once
    python benchmarks/tui_speed.py --store PATH --repeat 7
    python benchmarks/tui_speed.py --only views,diff  # some of it: paint, views, diff, memory

Prints medians (and the spread) of:
- first paint: a fresh `ptxbench-tui` process, headless, from launch to the
  overview table filled with the store's rates (and to the first frame), on
  the first start (no saved summary) and on a later one (summary_cache.py);
- filter change: the samples view, a selector changed → the new page on screen;
  the overview (filtered in memory) the same way;
- opening a long kernel: a sample with a ~3 000-line PTX (the attention expert
  solution) and one with a ~5 000-line PTX (the GEMM expert), from the request
  to the highlighted PTX painted;
- the diff of the largest expert: a GEMM mutation beside the GEMM expert it was
  made from (5 105 lines each; the first seeded fix pair whose PTX differs, in a
  store seeded from the repository), from the request to the highlighted diff
  painted, in a fresh process (the first open, what a person meets) and again in
  a warm one, then `N` (the noise shown) and `N` again; and the GEMM expert beside
  the attention expert (two different kernels, difflib's worst case) on the big store;
- a sort on 100 000 samples: the samples view sorted by a column (in SQL, every
  sample), from the request to the first sorted page painted, and whether the
  view stood at its first row after it (the cursor was on row 150 before);
- the label dialog: `l` on the GEMM expert → the dialog painted;
- memory: the peak RSS of an explorer process that visited every view.
Targets (issues 5, 16 and 29): first paint ≤ 1.0 s (a later start ≤ 0.6 s), filter
change ≤ 100 ms, opening a sample ≤ 150 ms (the 5 000-line GEMM too), the GEMM diff
≤ 0.3 s with the noise shown or hidden, sort ≤ 150 ms with the view at the first row,
RSS < 300 MB. The big store is synthetic (benchmarks/make_big_store.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_STORE = Path("/tmp/ptxbench-tui-bench.sqlite")
SEEDED_STORE = Path("/tmp/ptxbench-tui-bench-seeded.sqlite")  # the default store's seed: experts and mutations
SORT_COLUMNS = ("Speedup", "Category", "Model", "Task")
SIZE = (160, 45)

# Run in a child process: one explorer, headless, reporting what it measured as JSON.
CHILD = r'''
import asyncio, json, resource, sys, time
T0 = time.perf_counter()
# What `ptxbench-tui --db PATH` does, headless: open and check the store, start
# the summary query, import the views, mount.
from ptxbench.tui.app import create_app, parse_args, prepare_store

MODE = sys.argv[2]

async def painted(pilot):
    # Let pending messages run, then render the frame now. (pilot.pause() would also wait for the
    # CPU to go idle, i.e. for background re-reads the user never waits on.)
    await pilot._wait_for_screen()
    pilot.app.screen._on_timer_update()

async def until(pilot, check, limit=30.0):
    start = time.perf_counter()
    while not check():
        await pilot.pause(0.002)
        if time.perf_counter() - start > limit:
            raise SystemExit("timed out")
    return time.perf_counter()

async def main():
    args = parse_args(["--db", sys.argv[1]])
    app = create_app(args, prepare_store(args.db))
    out = {}
    async with app.run_test(size=(160, 45)) as pilot:
        await painted(pilot)
        out["first_frame_s"] = time.perf_counter() - T0
        screen = app.screen
        table = screen.query_one("#overview-table")
        t = await until(pilot, lambda: table.row_count > 0)
        await painted(pilot)
        out["first_paint_s"] = time.perf_counter() - T0
        out["overview_rows"] = table.row_count
        if MODE == "diff":
            from ptxbench.tui.messages import ShowDiff
            from ptxbench.tui.screens.diff import DiffScreen
            left, right = int(sys.argv[3]), int(sys.argv[4])
            t = time.perf_counter()
            app.post_message(ShowDiff(left, right))
            await until(pilot, lambda: isinstance(app.screen, DiffScreen) and app.screen.result_stats and not app.screen.computing)
            await painted(pilot)
            out["diff_open_s"] = time.perf_counter() - t
            out["diff_lines"] = len(app.screen.query_one("#diff-view").result.left_lines)
        if MODE == "visit":
            for key in "2345671":
                await pilot.press(key)
                await app.workers.wait_for_complete()
                await pilot.pause()
            from ptxbench.tui.messages import ShowSample, ShowDiff
            from ptxbench.db import browse
            conn = browse.connect(app.db_path)
            expert = browse.expert_sample_id(conn, "gemm_bf16_sm90a")
            app.post_message(ShowSample(expert))
            await app.workers.wait_for_complete(); await pilot.pause()
            for key in ("right_square_bracket",) * 5:
                await pilot.press(key); await pilot.pause()
            app.post_message(ShowDiff(expert, browse.expert_sample_id(conn, "attn_fwd_sm90a")))
            await app.workers.wait_for_complete(); await pilot.pause()
            out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(out), flush=True)

asyncio.run(main())
'''


def ensure_store(path: Path, n: int) -> None:
    if path.exists():
        return
    sys.path.insert(0, str(HERE))
    from make_big_store import build

    print(f"building {path} with {n:,} synthetic samples …", flush=True)
    for part, seconds in build(path, n, 0).items():
        print(f"  {part}: {seconds:.1f} s")


def child(store: Path, mode: str, *args: str, cold: bool = False) -> tuple[dict, float]:
    if cold:
        from ptxbench.tui.summary_cache import cache_file

        cache_file(store).unlink(missing_ok=True)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", CHILD, str(store), mode, *args], capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - start
    line = next((x for x in result.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"the explorer process failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(line[7:]), wall


async def painted(pilot) -> None:
    """Let pending messages run, then render the frame now. (pilot.pause() would also wait for the
    CPU to go idle, i.e. for background work the user never waits on, like the row count.)"""
    await pilot._wait_for_screen()
    pilot.app.screen._on_timer_update()


async def settle(pilot) -> None:
    """Wait for the app's workers (a cancelled one, replaced by a newer request, counts as done)."""
    from textual.worker import WorkerCancelled

    for _ in range(10):
        try:
            await pilot.app.workers.wait_for_complete()
            break
        except WorkerCancelled:
            continue
    await pilot.pause()


def seeded_store() -> tuple[Path, int, int, int]:
    """The default store's seed (tasks, experts, mutations with their fixes) and its GEMM fix pair."""
    from ptxbench.db import browse
    from ptxbench.db.seed import ensure_default_store

    ensure_default_store(SEEDED_STORE).conn.close()
    conn = browse.connect(SEEDED_STORE, cached=False)
    expert = browse.expert_sample_id(conn, "gemm_bf16_sm90a")
    ptx = browse.sample_detail(conn, expert).ptx
    # The first fix pair on the GEMM expert whose PTX differs (some fixes change only the manifest).
    failed = next((sid for (sid,) in conn.execute(
        "SELECT failed_sample_id FROM fixes WHERE fixed_sample_id = ? ORDER BY id", (expert,)).fetchall()
        if browse.sample_detail(conn, sid).ptx != ptx), None)
    if failed is None:
        raise SystemExit(f"{SEEDED_STORE} has no fix pair on the GEMM expert that changes its PTX")
    conn.close()
    return SEEDED_STORE, failed, expert, len(ptx.splitlines())


async def open_diffs(store: Path, pairs: list[tuple[int, int]], repeat: int, noise: bool = False) -> dict[str, list[float]]:
    """Request → highlighted diff painted, in ms, each pair `repeat` times in one warm app; with
    `noise`, also `N` (noise shown) → the new diff painted, and `N` again (noise hidden)."""
    from ptxbench.tui.app import make_app
    from ptxbench.tui.messages import ShowDiff
    from ptxbench.tui.screens.diff import DiffScreen

    out: dict[str, list[float]] = {"open": [], "noise_shown": [], "noise_hidden": []}
    app = make_app(store, theme="ptxbench")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for left, right in pairs * repeat:
            t = time.perf_counter()
            app.post_message(ShowDiff(left, right))
            while not (isinstance(app.screen, DiffScreen) and app.screen.result_stats and not app.screen.computing):
                await pilot.pause(0.001)
            await painted(pilot)
            out["open"].append((time.perf_counter() - t) * 1000)
            for key in ("noise_shown", "noise_hidden") if noise else ():
                screen = app.screen
                t = time.perf_counter()
                await pilot.press("N")
                while screen.computing:
                    await pilot.pause(0.001)
                await painted(pilot)
                out[key].append((time.perf_counter() - t) * 1000)
            app.pop_screen()
            await pilot.pause()
    return out


async def in_process(store: Path, repeat: int) -> dict[str, list[float]]:
    from ptxbench.db import browse
    from ptxbench.tui.app import make_app
    from ptxbench.tui.messages import ShowSample
    from ptxbench.tui.screens.sample import SampleScreen
    from ptxbench.tui.screens.samples import SamplesScreen
    from ptxbench.tui.widgets.code_view import PtxView
    from ptxbench.tui.widgets.row_table import RowTable

    out: dict[str, list[float]] = {"samples_filter_ms": [], "overview_filter_ms": [], "ptx_3k_open_ms": [], "ptx_5k_open_ms": []}
    app = make_app(store, theme="ptxbench")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # Overview: the filter runs over the cached cells.
        overview = app.screen
        arch = overview.query_one("#filter-arch")
        for value in ["sm_90a", "sm_100a"] * repeat:
            t = time.perf_counter()
            arch.value = value
            await painted(pilot)
            out["overview_filter_ms"].append((time.perf_counter() - t) * 1000)
        await pilot.press("3")
        await settle(pilot)
        samples = app.screen
        assert isinstance(samples, SamplesScreen)
        facets = app.facets
        changes = [("filter-category", c) for c in facets.categories[:6]] + [("filter-model", m) for m in facets.models[:3]] \
            + [("filter-task_id", t) for t in facets.tasks[:4]] + [("filter-context_level", lvl) for lvl in facets.levels]
        for _ in range(max(1, repeat // 3)):
            for select_id, value in changes:
                request = samples.request
                t = time.perf_counter()
                samples.query_one(f"#{select_id}").value = value
                while samples.request == request or samples.rows_request != samples.request:
                    await pilot.pause(0.001)
                await painted(pilot)
                out["samples_filter_ms"].append((time.perf_counter() - t) * 1000)
            samples.action_clear_filters()
            await settle(pilot)
        # Sort: every sample by a column, in SQL; request → the first sorted page painted. The
        # first sort by a column reads the order; the other direction (and paging) slice it.
        table = samples.query_one(RowTable)
        out["sort_at_top"] = []
        for _ in range(repeat):
            for column in SORT_COLUMNS:
                for kind in ("first", "reverse"):
                    table.move_cursor(row=150)  # a person a page down the table, who then sorts
                    await painted(pilot)
                    request = samples.request
                    t = time.perf_counter()
                    samples.set_sort(column)
                    while samples.request == request or samples.rows_request != samples.request:
                        await pilot.pause(0.001)
                    await painted(pilot)
                    out.setdefault(f"sort_{kind}_{column}_ms", []).append((time.perf_counter() - t) * 1000)
                    out["sort_at_top"].append(float(table.scroll_offset.y == 0 and table.cursor_row == 0))
                    # The whole order is read after the page is painted, while a person looks at it:
                    # wait for it, so the next measurement does not share the CPU with it.
                    while not (samples.order and samples.order[0][1] == column):
                        await pilot.pause(0.01)
                    await settle(pilot)
            samples.action_clear_filters()
            await settle(pilot)
        conn = browse.connect(store)
        for key, task in (("ptx_3k_open_ms", "attn_fwd_sm90a"), ("ptx_5k_open_ms", "gemm_bf16_sm90a")):
            sid = browse.expert_sample_id(conn, task)
            for _ in range(repeat):
                t = time.perf_counter()
                app.post_message(ShowSample(sid))
                while not (isinstance(app.screen, SampleScreen) and app.screen.detail is not None):
                    await pilot.pause(0.001)
                await painted(pilot)  # the highlighted lines painted
                out[key].append((time.perf_counter() - t) * 1000)
                lines = app.screen.query_one("#sample-ptx", PtxView).document.line_count
                out.setdefault(key + "_lines", [lines])
                app.pop_screen()
                await pilot.pause()
        # The label dialog on the GEMM expert: `l` → the dialog painted, its note taking keys.
        app.post_message(ShowSample(browse.expert_sample_id(conn, "gemm_bf16_sm90a")))
        while not (isinstance(app.screen, SampleScreen) and app.screen.detail is not None):
            await pilot.pause(0.001)
        await settle(pilot)
        out["label_dialog_ms"] = []
        for _ in range(repeat):
            t = time.perf_counter()
            await pilot.press("l")
            while type(app.screen).__name__ != "LabelDialog":
                await pilot.pause(0.001)
            await painted(pilot)
            out["label_dialog_ms"].append((time.perf_counter() - t) * 1000)
            await pilot.press("escape")
            await settle(pilot)
    return out


def describe(values: list[float], unit: str) -> str:
    med = statistics.median(values)
    return f"median {med:.3g} {unit} (min {min(values):.3g}, max {max(values):.3g}, n={len(values)})"


PARTS = ("paint", "views", "diff", "memory")


def report_paint(store: Path, repeat: int) -> None:
    child(store, "paint")  # one warm-up run: the OS page cache, compiled bytecode
    for label, cold in (("first start on this store (no saved summary)", True), ("a later start (store unchanged)", False)):
        firsts, frames, walls = [], [], []
        for _ in range(repeat):
            result, wall = child(store, "paint", cold=cold)
            firsts.append(result["first_paint_s"])
            frames.append(result["first_frame_s"])
            walls.append(wall)
        print(f"{label}:")
        print(f"  first frame (process start → app mounted):          {describe(frames, 's')}")
        target = "1.0" if cold else "0.6"
        print(f"  first paint (process start → overview rates shown): {describe(firsts, 's')}   target ≤ {target} s")
        print(f"  whole process incl. interpreter start and exit:     {describe(walls, 's')}")


def report_views(store: Path, repeat: int) -> None:
    import asyncio

    measured = asyncio.run(in_process(store, repeat))
    print(f"filter change, samples view (SQL page):               {describe(measured['samples_filter_ms'], 'ms')}   target ≤ 100 ms")
    print(f"filter change, overview (cached cells):               {describe(measured['overview_filter_ms'], 'ms')}")
    print(f"open a {measured['ptx_3k_open_ms_lines'][0]}-line PTX (request → painted):        {describe(measured['ptx_3k_open_ms'], 'ms')}   target ≤ 150 ms")
    print(f"open a {measured['ptx_5k_open_ms_lines'][0]}-line PTX (request → painted):        {describe(measured['ptx_5k_open_ms'], 'ms')}   target ≤ 150 ms")
    firsts = [v for c in SORT_COLUMNS for v in measured[f"sort_first_{c}_ms"]]
    reverses = [v for c in SORT_COLUMNS for v in measured[f"sort_reverse_{c}_ms"]]
    print(f"sort 100 000 samples by a column (request → first page): {describe(firsts, 'ms')}   target ≤ 150 ms")
    for column in SORT_COLUMNS:
        print(f"  by {column + ':':<10}{describe(measured[f'sort_first_{column}_ms'], 'ms')}")
    print(f"  the other direction (the order kept):               {describe(reverses, 'ms')}")
    tops = measured["sort_at_top"]
    print(f"  the view at the first row after a sort (from row 150): {sum(tops):.0f} of {len(tops)}")
    print(f"label dialog (l → the dialog painted):                {describe(measured['label_dialog_ms'], 'ms')}")


def report_diff(store: Path, repeat: int) -> None:
    import asyncio

    from ptxbench.db import browse

    seeded, failed, expert, raw_lines = seeded_store()
    firsts = [child(seeded, "diff", str(failed), str(expert))[0] for _ in range(repeat)]
    lines = firsts[0]["diff_lines"]
    print(f"diff of the largest expert, a GEMM mutation ⟷ the GEMM expert ({raw_lines:,} lines a side, {lines:,} after the noise filter):")
    print(f"  first open, fresh process (request → painted):     {describe([f['diff_open_s'] * 1000 for f in firsts], 'ms')}   target ≤ 300 ms")
    warm = asyncio.run(open_diffs(seeded, [(failed, expert)], repeat, noise=True))
    print(f"  again, warm (request → painted):                    {describe(warm['open'], 'ms')}")
    print(f"  N, noise shown (key → the new diff painted):        {describe(warm['noise_shown'], 'ms')}   target ≤ 300 ms")
    print(f"  N again, noise hidden (key → painted):              {describe(warm['noise_hidden'], 'ms')}   target ≤ 300 ms")
    conn = browse.connect(store)
    pair = (browse.expert_sample_id(conn, "gemm_bf16_sm90a"), browse.expert_sample_id(conn, "attn_fwd_sm90a"))
    unlike = asyncio.run(open_diffs(store, [pair], repeat, noise=True))
    print(f"  the GEMM expert ⟷ the attention expert (two kernels, big store): {describe(unlike['open'], 'ms')}")
    print(f"    the same with the noise shown:                    {describe(unlike['noise_shown'], 'ms')}")


def report_memory(store: Path, _repeat: int) -> None:
    result, _ = child(store, "visit")
    print(f"peak RSS after visiting every view, a 5k-line sample and a diff: {result['peak_rss_mb']:.0f} MB   target < 300 MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=DEFAULT_STORE)
    parser.add_argument("-n", "--samples", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts to measure: {', '.join(PARTS)} (default: all)")
    args = parser.parse_args()
    parts = [part.strip() for part in args.only.split(",") if part.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown part(s): {', '.join(sorted(unknown))}")
    ensure_store(args.store, args.samples)
    count = __import__("sqlite3").connect(args.store).execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    print(f"store: {args.store} ({count:,} samples, {args.store.stat().st_size / 1e6:.0f} MB)")
    reports = {"paint": report_paint, "views": report_views, "diff": report_diff, "memory": report_memory}
    for part in PARTS:
        if part in parts:
            reports[part](args.store, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
