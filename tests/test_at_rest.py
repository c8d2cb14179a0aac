"""The harness's cached copies are masked at rest (engine/gpu/at_rest.py): the keystream, the round trip, and the
reference cache that keeps its entries masked except inside `opened`."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ptxbench.engine.gpu import at_rest  # noqa: E402
from ptxbench.engine.gpu.datacache import DataCache  # noqa: E402
from ptxbench.tasks.inputs import make_inputs  # noqa: E402
from ptxbench.tasks.reference import reference  # noqa: E402
from ptxbench.tasks.spec import get_task  # noqa: E402

# Known answers of Philox4x32-10 (Random123's kat_vectors): counter, key, output.
KATS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter,key,expected", KATS)
def test_the_keystream_is_philox_4x32_10(counter, key, expected):
    block = np.array([counter[0] | counter[1] << 32], dtype=np.uint64)
    assert tuple(int(w) for w in at_rest.philox(block, key, (counter[2], counter[3]))[0]) == expected


@pytest.mark.parametrize("dtype,n", [(torch.float32, 1000), (torch.bfloat16, 4097), (torch.float64, 3),
                                     (torch.uint8, 17)])
def test_masking_twice_gives_back_every_byte(dtype, n):
    t = torch.randn(n).to(dtype) if dtype.is_floating_point else torch.randint(0, 255, (n,), dtype=dtype)
    plain = t.clone()
    at_rest.xor_in_place(t, (1, 2), (3, 4))
    changed = (t.reshape(-1).view(torch.uint8) != plain.reshape(-1).view(torch.uint8)).float().mean()
    assert changed > 0.95                   # a keystream byte is zero one time in 256
    at_rest.xor_in_place(t, (1, 2), (3, 4))
    assert torch.equal(t.view(torch.uint8) if dtype == torch.uint8 else t, plain)


def test_no_two_tensors_share_a_keystream():
    """A candidate knows its inputs' plain bytes: their mask must say nothing of the reference's."""
    a, b = at_rest.Veil([torch.zeros(64)]), at_rest.Veil([torch.zeros(64)])
    a.close()
    b.close()
    assert not torch.equal(a.tensors[0], b.tensors[0])
    assert len({tag for v in (a, b) for tag in v.tags}) == 2


def test_an_entry_is_plain_only_inside_opened_even_when_the_block_raises():
    t = torch.arange(10, dtype=torch.float32)
    veil = at_rest.Veil([t])
    veil.close()
    masked = t.clone()
    with pytest.raises(RuntimeError), veil.opened():
        assert torch.equal(t, torch.arange(10, dtype=torch.float32))
        raise RuntimeError("the harness's read failed")
    assert torch.equal(t, masked) and veil.masked


def test_the_reference_cache_keeps_entries_masked_and_still_sees_a_write():
    task = get_task("vector_add_smoke")
    sizes = {"N": 4096}
    cache = DataCache(torch.device("cpu"), 1 << 30)
    entry = cache.get(task, sizes, 7)
    plain = make_inputs(task, sizes, 7)
    expected = reference(task, plain)["Z"]
    assert not torch.equal(entry.inputs["X"], plain["X"]) and not torch.equal(entry.reference["Z"], expected)
    with entry.opened():
        assert torch.equal(entry.inputs["X"], plain["X"]) and torch.equal(entry.reference["Z"], expected)
    assert cache.get(task, sizes, 7) is entry and cache.hits == 1
    entry.reference["Z"][5] += 1            # a write into the masked copy breaks its seal: drawn again
    again = cache.get(task, sizes, 7)
    assert again is not entry and cache.corrupted == 1
    with again.opened():
        assert torch.equal(again.reference["Z"], expected)


def test_nothing_to_scrub_off_a_cuda_device():
    assert at_rest.scrub(torch.device("cpu")) == 0
