"""GPU tests: one real worker for the module, skipped cleanly where there is no GPU of the arch."""

from __future__ import annotations

from pathlib import Path

import pytest

from ptxbench.engine.runner import Runner, WorkerUnavailable

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu"


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.fixture(scope="session")
def runner():
    if not _has_cuda():
        pytest.skip("no CUDA device")
    r = Runner()
    try:
        device = r.start()
    except WorkerUnavailable as exc:
        pytest.skip(f"the GPU worker cannot start here: {exc}")
    if device is None:
        pytest.skip(f"no GPU: {r.no_device_reason}")
    if device.arch != "sm_90a":
        pytest.skip(f"these kernels are sm_90a; the device is {device.arch}")
    yield r
    r.close()


@pytest.fixture(scope="session")
def cuda_here() -> None:
    """Skips where there is no CUDA device, without starting a worker (for tests that run the CLI)."""
    if not _has_cuda():
        pytest.skip("no CUDA device")


@pytest.fixture
def data() -> Path:
    return DATA
