"""On the GPU: at every trial launch of a candidate, nothing in reach of a memory scan holds the answer to that
trial or to a later one: no reference of a seed still to run, no library output on it (engine/gpu/at_rest.py,
datacache.py). The scan is the one a kernel would make: every segment PyTorch's allocator has mapped,
allocated or free, read from this process at the moment the candidate's launches are enqueued."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
cupy = pytest.importorskip("cupy")

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cuda() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


def _words(t: torch.Tensor) -> tuple[int, int]:
    w = t.reshape(-1).view(torch.uint8)[:16].cpu().numpy().view("<i8")
    return int(w[0]), int(w[1])


def _found(needles: dict[str, tuple[int, int]]) -> dict[str, str]:
    """Where each needle (a tensor's first 16 bytes) lies in PyTorch's mapped segments: 'allocated' or 'free'."""
    torch.cuda.synchronize()
    hits: dict[str, str] = {}
    for seg in torch.cuda.memory_snapshot():
        size = seg["total_size"] // 8 * 8
        mem = cupy.cuda.UnownedMemory(seg["address"], size, None)
        words = torch.as_tensor(cupy.ndarray((size // 8,), dtype=cupy.int64, memptr=cupy.cuda.MemoryPointer(mem, 0)),
                                device="cuda")
        for name, (a, b) in needles.items():
            at = torch.nonzero((words[:-1] == a) & (words[1:] == b))
            for i in at[:, 0].tolist():
                address, state, start = seg["address"] + 8 * i, "allocated", seg["address"]
                for block in seg["blocks"]:
                    start = block.get("address", start)
                    if start <= address < start + block["size"]:
                        state = "allocated" if block["state"].startswith("active") else "free"
                    start += block["size"]
                hits.setdefault(name, state)
    return hits


def test_no_answer_is_in_reach_of_a_trial_launch(cuda, monkeypatch):
    from ptxbench.engine.gpu import session as session_mod
    from ptxbench.engine.gpu.datacache import draw
    from ptxbench.engine.gpu.protocol import Job, TimingConfig
    from ptxbench.engine.pipeline import plan_sizes
    from ptxbench.engine.static import judge_static
    from ptxbench.tasks.spec import get_task

    task = get_task("vector_add_smoke")
    sizes = [("train", dict(task.headline))]
    seeds = (11, 12, 13)
    static = judge_static(ROOT / "tasks" / "solutions" / task.id / "kernel.ptx", task)
    sess = session_mod.Session(0)
    plans, _ = plan_sizes(static.candidate, task, static.ptx, torch.cuda.get_device_properties(0).multi_processor_count,
                          seeds=seeds, sizes=sizes)
    job = Job(task.id, static.cubin, tuple(plans), TimingConfig(min_reps=10, max_reps=12))

    # The needles: each seed's reference (float64) and its sum in float32 (the library's answer).
    needles: dict[str, tuple[int, int]] = {}
    heads: dict[int, torch.Tensor] = {}
    for s in seeds:
        d = draw(task, dict(task.headline), s, sess.device)
        needles[f"reference {s}"] = _words(d.reference["Z"])
        needles[f"library {s}"] = _words(d.inputs["X"] + d.inputs["Y"])
        heads[s] = d.inputs["X"][:4].cpu()
        if s == seeds[0]:
            # The scan sees what the scrub must clear: a plain reference, alive and then freed.
            alive = _found(needles)
            assert alive.get(f"reference {s}") == "allocated", alive
            del d
            stale = _found(needles)
            assert stale.get(f"reference {s}") == "free", stale
            continue
        del d

    seen: list[dict[str, str]] = []
    run = session_mod.Bench.run

    def scanned(bench) -> None:
        head = bench.arena.buffers["X"].tensor[:4].cpu()
        current = next((i for i, s in enumerate(seeds) if torch.equal(head, heads[s])), None)
        if current is not None:                 # a trial on a shared seed (the job's own set and timed rounds: new)
            # This trial's answer and every later one's; an earlier trial of this job leaves its own, of other inputs.
            later = {f"{what} {s}" for s in seeds[current:] for what in ("reference", "library")}
            seen.append({name: where for name, where in _found(needles).items() if name in later})
        run(bench)

    monkeypatch.setattr(session_mod.Bench, "run", scanned)
    for _ in range(2):
        result = sess.judge(job, lambda event: None)
        assert result.fatal is None and all(size.category == "ok" for size in result.sizes), result
    assert len(seen) == 2 * len(seeds)
    assert all(not hits for hits in seen), seen
