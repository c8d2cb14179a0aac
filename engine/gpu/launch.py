"""Load a cubin, encode TMA tensor maps, and launch kernels (plain and cluster launches).

CuPy loads the module (`cupy.cuda.function.Module`) and does plain launches; a tensor map is
passed to it by value as a 128-byte `numpy.void`. Cluster launches go through
`cuda.bindings.driver.cuLaunchKernelEx` with a cluster-dimension attribute and
a parameter array we build once, so a timed loop re-launches without
re-packing arguments. Errors come back as `CudaFailure` with the driver's code
and a category from engine/gpu/classify.py.

Runs inside the worker process only.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import cupy
import numpy as np
from cuda.bindings import driver

from ptxbench.engine.gpu.classify import category_of_cuda_error, code_from_message, cuda_error_name, is_sticky
from ptxbench.engine.gpu.module_state import ModuleState, NotACubin
from ptxbench.engine.gpu.protocol import LaunchPlan, TensorMapPlan

DEFAULT_SHARED_LIMIT = 48 * 1024


class CudaFailure(Exception):
    """A driver error, with the category it means for the candidate."""

    def __init__(self, category: str, message: str, code: int | None = None, phase: str = "run") -> None:
        super().__init__(message)
        self.category = category
        self.code = code
        self.phase = phase

    @property
    def sticky(self) -> bool:
        return self.code is not None and is_sticky(self.code)

    def evidence(self) -> dict[str, Any]:
        return {"cuda_error": self.code, "cuda_error_name": cuda_error_name(self.code) if self.code else None,
                "phase": self.phase, "message": str(self)}


def _code(err: Any) -> int:
    return int(getattr(err, "value", err))


def check(result: Any, what: str, phase: str = "run") -> Any:
    """Unpack a cuda.bindings return tuple, raising CudaFailure on an error code."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    code = _code(err)
    if code != 0:
        raise CudaFailure(category_of_cuda_error(code, phase=phase), f"{what}: {cuda_error_name(code)}", code, phase)
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


def _from_cupy_error(exc: Exception, what: str, phase: str) -> CudaFailure:
    code = code_from_message(str(exc))
    if code is None:
        return CudaFailure("runtime_other" if phase == "run" else "load_error", f"{what}: {exc}", None, phase)
    return CudaFailure(category_of_cuda_error(code, phase=phase), f"{what}: {exc}", code, phase)


@dataclass
class Kernel:
    entry: str
    fn: Any                     # cupy Function
    handle: Any                 # driver.CUfunction
    shared_limit: int = DEFAULT_SHARED_LIMIT
    non_portable_cluster: bool = False

    def param_sizes(self) -> list[int] | None:
        """Byte size of each parameter as the cubin declares it (None where the driver cannot say)."""
        get = getattr(driver, "cuFuncGetParamInfo", None)
        if get is None:
            return None
        sizes = []
        for index in range(4096):
            result = get(self.handle, index)
            if _code(result[0]) != 0:
                break
            sizes.append(int(result[2]))
        return sizes

    def ensure_shared(self, nbytes: int) -> None:
        """Raise the kernel's dynamic shared-memory limit to fit `nbytes` (needed above 48 KiB)."""
        if nbytes <= self.shared_limit:
            return
        check(driver.cuFuncSetAttribute(
            self.handle, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes),
            f"{self.entry}: raising the dynamic shared memory limit to {nbytes} bytes", phase="launch")
        self.shared_limit = nbytes

    def allow_cluster(self, blocks: int) -> None:
        """Clusters above 8 blocks (up to 16 on Hopper) need the kernel's non-portable opt-in."""
        if blocks > 8 and not self.non_portable_cluster:
            check(driver.cuFuncSetAttribute(
                self.handle, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                f"{self.entry}: allowing a non-portable cluster of {blocks} blocks", phase="launch")
            self.non_portable_cluster = True


class Module:
    """A loaded cubin, its kernels, and its writable module state (engine/gpu/module_state.py)."""

    def __init__(self, cubin: bytes) -> None:
        self.cubin = bytes(cubin)
        self._kernels: dict[str, Kernel] = {}
        self.raw = self._load()
        try:
            self.state = ModuleState(driver.CUmodule(int(self.raw.ptr)), self.cubin)
        except NotACubin as exc:
            raise CudaFailure("load_error", f"reading the module's globals: {exc}", None, "load") from None

    def _load(self) -> Any:
        raw = cupy.cuda.function.Module()
        try:
            raw.load(self.cubin)
        except cupy.cuda.driver.CUDADriverError as exc:
            raise _from_cupy_error(exc, "loading the cubin", "load") from None
        return raw

    def restore_state(self, stream_handle: int) -> None:
        """Before a run: module globals back to their loaded image (or, if they cannot be found, a fresh load)."""
        if not self.state.needs_reload:
            self.state.restore(stream_handle)
            return
        # Unloading under queued work would pull the code from under it: wait first.
        synchronize(stream_handle, "before reloading the module")
        self.raw = self._load()
        self._kernels.clear()

    def close(self) -> None:
        self._kernels.clear()

    def global_address(self, name: str, nbytes: int) -> int:
        """The device address of the module variable `name`, at least `nbytes` long."""
        err, ptr, size = driver.cuModuleGetGlobal(driver.CUmodule(int(self.raw.ptr)), name.encode())
        if int(getattr(err, "value", err)) != 0 or int(size) < nbytes:
            raise CudaFailure("load_error", f"the module has no variable {name!r} of {nbytes} bytes", None, "load")
        return int(ptr)

    def read_global(self, name: str, nbytes: int) -> bytes:
        """The first `nbytes` of the module variable `name`, once the work that writes it is done."""
        err, ptr, size = driver.cuModuleGetGlobal(driver.CUmodule(int(self.raw.ptr)), name.encode())
        if int(getattr(err, "value", err)) != 0 or int(size) < nbytes:
            raise CudaFailure("load_error", f"the module has no variable {name!r} of {nbytes} bytes", None, "load")
        out = bytearray(nbytes)
        err, = driver.cuMemcpyDtoH(out, ptr, nbytes)
        if int(getattr(err, "value", err)) != 0:
            raise CudaFailure("load_error", f"reading the module variable {name!r} failed ({err})", None, "load")
        return bytes(out)

    def kernel(self, entry: str) -> Kernel:
        if entry not in self._kernels:
            try:
                fn = self.raw.get_function(entry)
            except cupy.cuda.driver.CUDADriverError as exc:
                failure = _from_cupy_error(exc, f"getting kernel {entry!r}", "load")
                if failure.code == 500:
                    failure.category = "entry_missing"
                raise failure from None
            self._kernels[entry] = Kernel(entry, fn, driver.CUfunction(int(fn.ptr)))
        return self._kernels[entry]


# -- tensor maps ---------------------------------------------------------------

_TMAP_DTYPE = {
    "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
    "f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
    "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
    "f64": "CU_TENSOR_MAP_DATA_TYPE_FLOAT64",
    "i32": "CU_TENSOR_MAP_DATA_TYPE_INT32",
    "u32": "CU_TENSOR_MAP_DATA_TYPE_UINT32",
    "i64": "CU_TENSOR_MAP_DATA_TYPE_INT64",
    "u8": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "i8": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "f8e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "f8e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
}
_ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8, "i32": 4, "u32": 4, "i64": 8, "u8": 1, "i8": 1,
               "f8e4m3": 1, "f8e5m2": 1}
_SWIZZLE = {"none": "NONE", "32B": "32B", "64B": "64B", "128B": "128B"}
_L2 = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}  # CU_TENSOR_MAP_L2_PROMOTION_*
_OOB = {"zero": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE", "nan": "CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA"}


@dataclass
class TensorMap:
    name: str
    obj: Any                    # driver.CUtensorMap (kept alive: `by_value` points into it)
    raw: bytes                  # the 128 bytes
    by_value: Any               # numpy.void of 128 bytes, as CuPy passes structs by value


def encode_tensor_map(plan: TensorMapPlan, address: int) -> TensorMap:
    """cuTensorMapEncodeTiled over `address`; the manifest's outermost-first shapes are reversed here."""
    esize = _ELEM_BYTES[plan.dtype]
    dims = list(reversed(plan.view))
    strides, step = [], esize
    for d in dims[:-1]:
        step *= d
        strides.append(step)
    box = list(reversed(plan.box))
    estr = list(reversed(plan.element_strides)) if plan.element_strides else [1] * len(dims)
    result = driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, _TMAP_DTYPE[plan.dtype]),
        len(dims),
        address,
        [driver.cuuint64_t(d) for d in dims],
        [driver.cuuint64_t(s) for s in strides],
        [driver.cuuint32_t(b) for b in box],
        [driver.cuuint32_t(e) for e in estr],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{_SWIZZLE[plan.swizzle]}"),
        getattr(driver.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{_L2[plan.l2_promotion]}"),
        getattr(driver.CUtensorMapFloatOOBfill, _OOB[plan.oob_fill]),
    )
    code = _code(result[0])
    if code != 0:
        raise CudaFailure("launch_config", f"tensor map {plan.name!r} over {plan.tensor} (view {list(plan.view)}, "
                          f"box {list(plan.box)}, swizzle {plan.swizzle}): the driver refused it "
                          f"({cuda_error_name(code)})", code, "launch")
    obj = result[1]
    raw = ctypes.string_at(obj.getPtr(), 128)
    by_value = np.frombuffer(raw, dtype=np.dtype((np.void, 128)))[0]
    return TensorMap(plan.name, obj, raw, by_value)


# -- launches --------------------------------------------------------------------

_NP_SCALAR = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64, "f32": np.float32}
_CT_SCALAR = {"i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64, "u64": ctypes.c_uint64,
              "f32": ctypes.c_float}


@dataclass
class PreparedLaunch:
    """One launch with its arguments packed over one arena; calling it enqueues the kernel.

    The kernel is looked up at each call, since a module whose state must be reloaded gets new handles."""

    module: Module
    plan: LaunchPlan
    stream_handle: int
    cupy_stream: Any
    cupy_args: tuple = ()
    _keep: list = field(default_factory=list)
    _config: Any = None
    _params_addr: int = 0

    def __call__(self) -> None:
        kernel = self.module.kernel(self.plan.entry)
        kernel.ensure_shared(self.plan.shared_bytes)
        if self._config is None:
            try:
                kernel.fn(tuple(self.plan.grid), tuple(self.plan.block), self.cupy_args,
                          shared_mem=self.plan.shared_bytes, stream=self.cupy_stream)
            except cupy.cuda.driver.CUDADriverError as exc:
                raise _from_cupy_error(exc, f"launching {self.plan.entry}", "launch") from None
        else:
            kernel.allow_cluster(int(np.prod(self.plan.cluster)))
            check(driver.cuLaunchKernelEx(self._config, kernel.handle, self._params_addr, 0),
                  f"cluster launch of {self.plan.entry}", phase="launch")


def prepare_launch(module: Module, plan: LaunchPlan, ptrs: dict[str, int], tmaps: dict[str, TensorMap],
                   stream_handle: int, cupy_stream: Any) -> PreparedLaunch:
    kernel = module.kernel(plan.entry)
    kernel.ensure_shared(plan.shared_bytes)
    launch = PreparedLaunch(module, plan, stream_handle, cupy_stream)
    if not plan.is_cluster:
        values = []
        for a in plan.args:
            if a.kind == "ptr":
                values.append(np.uint64(ptrs[a.name]))
            elif a.kind == "tmap":
                values.append(tmaps[a.name].by_value)
            else:
                values.append(_NP_SCALAR[a.dtype](a.value))
        launch.cupy_args = tuple(values)
        return launch
    # cuLaunchKernelEx reads each parameter through a pointer: keep the storage alive with the launch.
    storage: list[Any] = []
    for a in plan.args:
        if a.kind == "ptr":
            storage.append(ctypes.c_uint64(ptrs[a.name]))
        elif a.kind == "tmap":
            storage.append(ctypes.create_string_buffer(tmaps[a.name].raw, 128))
        else:
            storage.append(_CT_SCALAR[a.dtype](a.value))
    pointers = (ctypes.c_void_p * max(1, len(storage)))(*[ctypes.addressof(s) for s in storage])
    kernel.allow_cluster(int(np.prod(plan.cluster)))
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = (int(v) for v in plan.grid)
    config.blockDimX, config.blockDimY, config.blockDimZ = (int(v) for v in plan.block)
    config.sharedMemBytes = int(plan.shared_bytes)
    config.hStream = driver.CUstream(stream_handle)
    attr = driver.CUlaunchAttribute()
    attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = (int(v) for v in plan.cluster)
    config.attrs = [attr]
    config.numAttrs = 1
    launch._keep = [storage, pointers, attr]
    launch._config = config
    launch._params_addr = ctypes.addressof(pointers)
    return launch


def copy_async(dst: int, src: int, nbytes: int, stream_handle: int, what: str) -> None:
    """Enqueue a device-to-device copy on the stream."""
    check(driver.cuMemcpyDtoDAsync(dst, src, nbytes, stream_handle), what)


def synchronize(stream_handle: int, what: str) -> None:
    """Wait for the stream; a kernel fault surfaces here as a CudaFailure (usually sticky)."""
    check(driver.cuStreamSynchronize(driver.CUstream(stream_handle)), what, phase="run")


def check_params(kernel: Kernel, plan: LaunchPlan) -> str | None:
    """A message if the arguments' sizes differ from the cubin's parameters, else None."""
    sizes = kernel.param_sizes()
    if sizes is None:
        return None
    wanted = [a.nbytes for a in plan.args]
    if sizes == wanted:
        return None
    return (f"{plan.entry}: the manifest passes {len(wanted)} arguments of {wanted} bytes; "
            f"the kernel takes {len(sizes)} parameters of {sizes} bytes")
