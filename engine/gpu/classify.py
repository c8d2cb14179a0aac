"""CUDA driver errors and process deaths → the failure vocabulary (engine/categories.py).

Plain Python: the worker classifies the error it sees; the parent classifies a
worker that died or had to be killed.
"""

from __future__ import annotations

import signal as _signal

# Driver error codes (cuda.h, CUresult) that a candidate's launch can produce.
CUDA_ERROR_NAMES: dict[int, str] = {
    1: "CUDA_ERROR_INVALID_VALUE",
    2: "CUDA_ERROR_OUT_OF_MEMORY",
    9: "CUDA_ERROR_INVALID_CONFIGURATION",
    200: "CUDA_ERROR_INVALID_IMAGE",
    209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
    218: "CUDA_ERROR_INVALID_PTX",
    222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    300: "CUDA_ERROR_INVALID_SOURCE",
    500: "CUDA_ERROR_NOT_FOUND",
    700: "CUDA_ERROR_ILLEGAL_ADDRESS",
    701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    702: "CUDA_ERROR_LAUNCH_TIMEOUT",
    710: "CUDA_ERROR_ASSERT",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR",
    715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS",
    717: "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED",
    720: "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
    721: "CUDA_ERROR_TENSOR_MEMORY_LEAK",
    912: "CUDA_ERROR_INVALID_CLUSTER_SIZE",
    999: "CUDA_ERROR_UNKNOWN",
}
CUDA_ERROR_CODES: dict[str, int] = {v: k for k, v in CUDA_ERROR_NAMES.items()}

# Errors raised while a kernel runs. They leave the context unusable ("sticky"):
# every later call in the process fails, so the worker must be replaced.
_RUN_ERRORS: dict[int, str] = {
    700: "illegal_address",
    717: "illegal_address",
    716: "misaligned_address",
    715: "illegal_instruction",
    718: "illegal_instruction",
    702: "hang_timeout",
    710: "runtime_other",
    714: "runtime_other",
    719: "runtime_other",
    721: "runtime_other",
    999: "runtime_other",
}
# Errors a launch is refused with before anything runs; the context stays usable.
_LAUNCH_ERRORS: dict[int, str] = {
    1: "launch_config",
    9: "launch_config",
    701: "launch_config",
    720: "launch_config",
    912: "launch_config",
    2: "launch_config",
}
_LOAD_ERRORS: dict[int, str] = {
    200: "load_error",
    209: "load_error",
    218: "load_error",
    222: "load_error",
    300: "load_error",
    500: "entry_missing",
}


def cuda_error_name(code: int) -> str:
    return CUDA_ERROR_NAMES.get(code, f"CUDA error {code}")


def is_sticky(code: int) -> bool:
    return code in _RUN_ERRORS


def category_of_cuda_error(code: int, *, phase: str = "run") -> str:
    """The category for a driver error seen in `phase` (load, launch or run)."""
    if code in _RUN_ERRORS:
        return _RUN_ERRORS[code]
    if phase == "load":
        return _LOAD_ERRORS.get(code, "load_error")
    if code in _LAUNCH_ERRORS:
        return _LAUNCH_ERRORS[code]
    if code in _LOAD_ERRORS:
        return _LOAD_ERRORS[code]
    return "runtime_other"


def code_from_message(message: str) -> int | None:
    """The driver error code named in an exception text (CuPy writes 'CUDA_ERROR_…: …')."""
    for name, code in sorted(CUDA_ERROR_CODES.items(), key=lambda kv: -len(kv[0])):
        if name in message:
            return code
    return None


def category_of_exit(returncode: int | None) -> tuple[str, str]:
    """A worker that died on its own: (category, description). Negative codes are signals."""
    if returncode is None:
        return "runtime_other", "the worker stopped answering"
    if returncode < 0:
        sig = -returncode
        try:
            name = _signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return "runtime_other", f"the worker died on {name}"
    return "runtime_other", f"the worker exited with status {returncode}"
