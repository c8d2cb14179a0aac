"""No answer is kept where a candidate's kernel could read it: the reference cache holds inputs only, a
reference lives from its trial's verification to the end of the size, and each task has its own trial seeds
(engine/gpu/datacache.py, engine/gpu/at_rest.py, engine/pipeline.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from ptxbench.engine.gpu import at_rest  # noqa: E402
from ptxbench.engine.gpu.datacache import DataCache, LazyReference  # noqa: E402
from ptxbench.engine.pipeline import session_seeds  # noqa: E402
from ptxbench.tasks.inputs import make_inputs  # noqa: E402
from ptxbench.tasks.reference import reference  # noqa: E402
from ptxbench.tasks.spec import get_task  # noqa: E402


def test_the_cache_keeps_inputs_and_makes_each_reference_when_read_and_forgets_it():
    task = get_task("vector_add_smoke")
    sizes = {"N": 4096}
    cache = DataCache(torch.device("cpu"), 1 << 30)
    entry = cache.get(task, sizes, 7)
    assert isinstance(entry.reference, LazyReference) and entry.reference._outputs is None
    plain = make_inputs(task, sizes, 7)
    assert torch.equal(entry.reference["Z"], reference(task, plain)["Z"])      # made now, from the cached inputs
    assert entry.nbytes == 2 * 4096 * 4 + 4096 * 8
    entry.release()
    assert entry.reference._outputs is None and entry.nbytes == 2 * 4096 * 4
    assert cache.get(task, sizes, 7) is entry and cache.hits == 1


def test_a_write_into_a_cached_input_breaks_its_seal():
    task = get_task("vector_add_smoke")
    cache = DataCache(torch.device("cpu"), 1 << 30)
    entry = cache.get(task, {"N": 4096}, 7)
    entry.inputs["X"].view(torch.int32)[5] ^= 1
    again = cache.get(task, {"N": 4096}, 7)
    assert again is not entry and cache.corrupted == 1
    assert torch.equal(again.inputs["X"], make_inputs(task, {"N": 4096}, 7)["X"])


def test_each_task_has_its_own_trial_seeds_fixed_for_the_process():
    """Attention backward's inputs hold forward's output of the same Q, K, V: on the same seeds, one task's
    cached inputs would answer the other's trials."""
    fwd, bwd = session_seeds("attn_fwd_sm90a"), session_seeds("attn_bwd_sm90a")
    assert len(fwd) == len(bwd) == 3 and not set(fwd) & set(bwd)
    assert session_seeds("attn_fwd_sm90a") == fwd and all(0 < s < 1 << 62 for s in fwd)


def test_nothing_to_scrub_off_a_cuda_device():
    assert at_rest.scrub(torch.device("cpu")) == 0
