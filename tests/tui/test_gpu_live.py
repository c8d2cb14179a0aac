"""On the GPU machine: re-verify and re-time expert solutions through the explorer.

Drives the app with Pilot: the Live view starts the real `ptxbench eval` as a
child process on a store seeded from the repository, follows its progress
and shows the new evaluations. Skipped where no NVIDIA GPU is present.
Set PTXBENCH_GPU_OUT to a folder to keep the screenshots and a JSON summary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import settle

from ptxbench.tui.messages import Reverify, ShowSample


def _gpu_name() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    result = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True)
    return result.stdout.strip().splitlines()[0] if result.returncode == 0 and result.stdout.strip() else None


pytestmark = [pytest.mark.gpu, pytest.mark.timing]

TASKS = ("vector_add_smoke", "gemm_bf16_sm90a")


@pytest.mark.skipif(_gpu_name() is None, reason="no NVIDIA GPU here")
async def test_live_reverify_and_retime_expert_solutions_on_the_gpu(tmp_path):
    from ptxbench.db import browse
    from ptxbench.db.seed import ensure_default_store
    from ptxbench.tui.app import make_app

    store = tmp_path / "store.sqlite"
    ensure_default_store(store).conn.close()
    conn = browse.connect(store, cached=False)
    ids = [browse.expert_sample_id(conn, task) for task in TASKS]
    conn.close()
    assert all(ids), ids
    out = Path(os.environ["PTXBENCH_GPU_OUT"]) if os.environ.get("PTXBENCH_GPU_OUT") else None
    engine = [sys.executable, "-m", "ptxbench.cli.main", "eval"]
    app = make_app(store, engine_cmd=engine, gpu_lock_dir=tmp_path, theme="ptxbench")
    async with app.run_test(size=(150, 40)) as pilot:
        await settle(pilot)
        app.post_message(Reverify(ids))
        await settle(pilot)
        assert type(app.screen).__name__ == "ConfirmDialog"  # more than one sample: it asks first
        await pilot.press("enter")
        await settle(pilot)
        live = app.screen
        if out:
            app.save_screenshot(filename="gpu_live.svg", path=str(out))
        assert live.last_exit is not None and live.last_exit.returncode == 0, live.last_exit
        assert live.static_only is False, "the engine saw no GPU"
        results = {r.sample_id: r for r in live.results}
        assert set(results) == set(ids)
        summary = {"gpu": _gpu_name(), "results": list(results.values())}
        for sid in ids:
            app.post_message(ShowSample(sid))
            await settle(pilot)
            sample = app.screen
            latest = sample.detail.latest
            assert latest.id == results[sid].evaluation_id and latest.status == "judged", latest.status
            assert latest.category in ("ok", "slower_than_baseline"), latest.category
            assert latest.speedup is not None and latest.time_ms is not None
            summary[f"sample_{sid}"] = {
                "task": sample.detail.task_id, "category": latest.category, "device": latest.device,
                "time_ms": latest.time_ms, "baseline_ms": latest.baseline_ms, "speedup": latest.speedup,
                "tflops": latest.tflops,
            }
            if out:
                for _ in range(4):
                    await pilot.press("right_square_bracket")  # to the Timing tab
                await pilot.pause()
                app.save_screenshot(filename=f"gpu_sample_{sample.detail.task_id}.svg", path=str(out))
            await pilot.press("escape")
            await pilot.pause()
    if out:
        (out / "gpu_live.json").write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, indent=2, default=str))
