"""The confinement every tool process that reads candidate text runs under.

nvcc (and the host compiler and cicc it starts), ptxas and nvdisasm read what a
candidate or a model wrote; a hostile one can make a compiler quote any file it
names, grow memory without bound, or run until stopped. Each such process gets:

- an allow-listed environment: the toolchain's PATH, a HOME and TMPDIR inside
  the job's own folder, the C locale; nothing else (no keys, no credentials);
- resource limits: address space, CPU seconds, size of any file it writes,
  open files, no core files (and processes, where the limit means something:
  the kernel does not apply it to root);
- Landlock (Linux 5.13+, no privileges needed): read and execute only under the
  toolchain's folders and the system's libraries and headers, read and write
  only in the job's folder; no TCP, and (ABI 6+) no signals or abstract sockets
  beyond its own domain. Landlock also denies ptrace-style access to processes
  outside the domain, so /proc/<judge>/environ and /proc/<judge>/mem are shut.

Where Landlock is missing, the limits and the environment still apply and the
verdict records which confinement it ran under (`describe()`); nothing pretends.

The rules are built in the parent (a ruleset file descriptor); the child only
sets its limits, sets no_new_privs and restricts itself between fork and exec.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import os
import platform
import re
import resource
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# -- limits --------------------------------------------------------------------------------------

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Caps on one tool process (each process of a tool: nvcc's children get the same).

    Sized from what the expert solutions need (docs/security.md has the measurements): the largest,
    nvcc on attention backward, peaks under 1 GiB of address space; ptxas on the GEMM expert,
    under 1 GiB too. 4 GiB leaves a margin of four and stops a macro bomb or a module whose
    initialised data would take ptxas to 8 GiB and more."""

    address_space: int = 4 * GiB
    cpu_seconds: int = 120
    file_size: int = 16 * MiB       # any file a tool writes: the PTX nvcc makes, the cubin ptxas makes
    open_files: int = 256
    processes: int = 64             # beyond what the user already runs; not applied to root

    def to_dict(self) -> dict[str, int]:
        return {"address_space": self.address_space, "cpu_seconds": self.cpu_seconds,
                "file_size": self.file_size, "open_files": self.open_files, "processes": self.processes}


DEFAULT_LIMITS = Limits()


class Deadline:
    """One wall-clock budget for everything a candidate's tools do (nvcc, ptxas, nvdisasm)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        return max(self._end - time.monotonic(), 0.0)

# -- Landlock ------------------------------------------------------------------------------------

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446   # the same on every architecture
_PR_SET_NO_NEW_PRIVS = 38
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

_FS_EXECUTE = 1 << 0
_FS_WRITE_FILE = 1 << 1
_FS_READ_FILE = 1 << 2
_FS_READ_DIR = 1 << 3
_FS_REMOVE_DIR = 1 << 4
_FS_REMOVE_FILE = 1 << 5
_FS_MAKE_CHAR = 1 << 6
_FS_MAKE_DIR = 1 << 7
_FS_MAKE_REG = 1 << 8
_FS_MAKE_SOCK = 1 << 9
_FS_MAKE_FIFO = 1 << 10
_FS_MAKE_BLOCK = 1 << 11
_FS_MAKE_SYM = 1 << 12
_FS_REFER = 1 << 13        # ABI 2
_FS_TRUNCATE = 1 << 14     # ABI 3
_FS_IOCTL_DEV = 1 << 15    # ABI 5
_NET_BIND_TCP = 1 << 0     # ABI 4
_NET_CONNECT_TCP = 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1         # ABI 6

_FILE_RIGHTS = _FS_EXECUTE | _FS_WRITE_FILE | _FS_READ_FILE | _FS_TRUNCATE | _FS_IOCTL_DEV
_READ = _FS_EXECUTE | _FS_READ_FILE | _FS_READ_DIR
_READ_WRITE = (_READ | _FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_DIR | _FS_MAKE_REG
               | _FS_MAKE_SYM | _FS_MAKE_FIFO | _FS_MAKE_SOCK | _FS_REFER | _FS_TRUNCATE)


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    if abi >= 5:
        rights |= _FS_IOCTL_DEV
    return rights


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, too old, disabled)."""
    if platform.system() != "Linux":
        return 0
    libc = _libc()
    if libc is None:
        return 0
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(int(abi), 0)


def _ruleset(read_paths: Iterable[Path], write_paths: Iterable[Path], abi: int) -> int:
    """A Landlock ruleset file descriptor allowing exactly these paths; raises OSError."""
    libc = _libc()
    assert libc is not None
    fs = _fs_rights(abi)
    attr = _RulesetAttr(handled_access_fs=fs,
                        handled_access_net=(_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0,
                        scoped=(_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    fd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for paths, rights in ((read_paths, _READ), (write_paths, _READ_WRITE)):
            for path in paths:
                _add_rule(libc, fd, path, rights & fs)
    except BaseException:
        os.close(fd)
        raise
    return int(fd)


def _add_rule(libc: ctypes.CDLL, fd: int, path: Path, rights: int) -> None:
    try:
        pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return      # a folder this machine does not have: nothing to allow
    try:
        if not os.path.isdir(path):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=pfd)
        if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                        ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
    finally:
        os.close(pfd)


# -- what a tool may read ------------------------------------------------------------------------

# The system's shared libraries and the host compiler's own folders and headers. /usr/local,
# /home, /root, /etc (bar the loader's cache), /proc, /sys, /tmp and /var are not among them.
_SYSTEM_READ = ("/usr/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/include", "/lib", "/lib64",
                "/bin", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
_DEVICES_RW = ("/dev/null",)
_DEVICES_R = ("/dev/zero", "/dev/urandom")


def toolchain_roots(tools: Iterable[Path]) -> list[Path]:
    """The install folder of each tool: the folder above its bin/ (cu13/ of NVIDIA's wheels, or a
    CUDA install's root), where its headers, cicc and libraries live."""
    roots: list[Path] = []
    for tool in tools:
        real = Path(os.path.realpath(tool))
        root = real.parent.parent if real.parent.name == "bin" else real.parent
        if root not in roots:
            roots.append(root)
    return roots


def host_compiler_dirs() -> list[Path]:
    """Where the host compiler lives, when that is outside the system folders (a toolchain in /opt)."""
    found = []
    for name in ("g++", "gcc", "c++", "cc"):
        path = shutil.which(name)
        if path:
            real = Path(os.path.realpath(path))
            if not str(real).startswith(("/usr/", "/bin/")):
                found.append(real.parent.parent if real.parent.name == "bin" else real.parent)
    return found


# -- the environment -----------------------------------------------------------------------------

def tool_environment(job_dir: Path, path_dirs: Iterable[Path], extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment a tool gets. Nothing of the judge's own is passed on (a variable
    such as NVCC_APPEND_FLAGS would also change what is judged)."""
    env = {
        "PATH": os.pathsep.join([*(str(d) for d in path_dirs), "/usr/bin", "/bin"]),
        "HOME": str(job_dir),
        "TMPDIR": str(job_dir),
        "LC_ALL": "C",
        "LANG": "C",
    }
    env.update(extra or {})
    return env


# What the GPU worker keeps of the judge's environment: how to find Python, its packages, CUDA and
# the GPU, and the engine's own settings; no credential or key of any kind.
_WORKER_KEEP = ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "HOME", "TMPDIR", "LANG",
                "XDG_CACHE_HOME", "PTXBENCH_CACHE", "PTXBENCH_FUSED_CHECKS", "PTXBENCH_REFERENCE_CACHE",
                "PTXBENCH_PTXAS", "PTXBENCH_NVCC", "PTXBENCH_CUOBJDUMP", "PTXBENCH_NVDISASM", "PTXBENCH_SANDBOX")
_WORKER_KEEP_PREFIXES = ("CUDA_", "CUPY_", "LC_")
# A name that says it holds a secret is dropped even under a kept prefix (CUDA_API_KEY is a key).
_SECRET_WORDS = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)


def worker_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The GPU worker's whole environment: an allow-list of the judge's, plus `extra` (its device)."""
    env = {k: v for k, v in os.environ.items()
           if (k in _WORKER_KEEP or k.startswith(_WORKER_KEEP_PREFIXES)) and not _SECRET_WORDS.search(k)}
    env.update(extra or {})
    env["PYTHONUNBUFFERED"] = "1"
    return env


# -- running one tool ----------------------------------------------------------------------------

@dataclass
class Confined:
    """What one tool process did under the sandbox."""

    argv: list[str]
    returncode: int | None          # None when killed at the deadline
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    output_dropped: int = 0         # bytes of output past the cap, counted and not kept
    max_rss: int = 0                # bytes, the largest of the process and its children
    cap_hit: str = ""               # the limit it ran into: address_space, cpu_seconds, file_size; or killed
    sandbox: str = ""

    @property
    def output(self) -> str:
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()


MAX_OUTPUT_BYTES = 8 * MiB      # a tool's stdout and stderr together; the rest is counted, not kept
_HEAD = 1 * MiB


class _Capture:
    """A head and a tail of a stream: a flood of messages costs neither memory nor time (the tail is a
    queue of chunks dropped whole from its front, never a buffer moved on every read)."""

    _TAIL = MAX_OUTPUT_BYTES // 2 - _HEAD

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_bytes = 0
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = _HEAD - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail.append(chunk)
            self.tail_bytes += len(chunk)
            while self.tail_bytes - len(self.tail[0]) >= self._TAIL:
                self.dropped += len(self.tail[0])
                self.tail_bytes -= len(self.tail.popleft())

    @property
    def not_kept(self) -> int:
        return self.dropped + max(self.tail_bytes - self._TAIL, 0)

    def text(self) -> str:
        tail = b"".join(self.tail)
        tail = tail[max(len(tail) - self._TAIL, 0):]
        gap = f"\n[... {self.not_kept} bytes of tool output not kept ...]\n".encode() if self.not_kept else b""
        return (bytes(self.head) + gap + tail).decode("utf-8", "replace")


@dataclass
class Policy:
    """Where a tool may read and write, and its limits; built once per job."""

    job_dir: Path
    read: list[Path] = field(default_factory=list)
    limits: Limits = DEFAULT_LIMITS


def _preexec(ruleset_fd: int, limits: Limits, nproc: int | None) -> None:
    """In the child, between fork and exec: limits, then no_new_privs, then Landlock. Only
    syscalls through objects made in the parent (no imports, no allocation worth naming)."""
    resource.setrlimit(resource.RLIMIT_AS, (limits.address_space, limits.address_space))
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_size, limits.file_size))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if nproc is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    # SIGXFSZ must stay fatal (it is, by default): a tool that writes past its cap dies and says so.
    if ruleset_fd >= 0:
        libc = _LIBC_FOR_CHILD[0]
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            os._exit(126)
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset_fd), ctypes.c_uint32(0)) != 0:
            os._exit(126)
        os.close(ruleset_fd)


_LIBC_FOR_CHILD: list[ctypes.CDLL] = []


def _user_processes() -> int | None:
    """How many processes this user runs now, for RLIMIT_NPROC (which counts them all); None for
    root, whom the kernel does not hold to it."""
    uid = os.getuid()
    if uid == 0:
        return None
    count = 0
    try:
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        count += 1
                except OSError:
                    pass
    except OSError:
        return None
    return count


def describe() -> str:
    """The confinement in force here, as a verdict records it."""
    abi = landlock_abi()
    if os.environ.get("PTXBENCH_SANDBOX") == "off":
        return "none (PTXBENCH_SANDBOX=off)"
    fs = f"landlock-abi{abi}" if abi else "no-landlock"
    return f"{fs}+rlimits+env"


def confinement() -> dict[str, object]:
    """What the sandbox guarantees on this machine, for a verdict's evidence and `check`'s one line."""
    abi = landlock_abi()
    off = os.environ.get("PTXBENCH_SANDBOX") == "off"
    return {
        "sandbox": describe(),
        "filesystem": bool(abi) and not off,
        "network": abi >= 4 and not off,
        "environment": True,
        "limits": not off,
    }


def run_confined(argv: list[str], *, policy: Policy, timeout: float, env: dict[str, str]) -> Confined:
    """Run one tool in `policy.job_dir` under the sandbox, with a wall-clock deadline. The tool and
    its children form one process group, killed together at the deadline. `env` is the whole
    environment (tool_environment)."""
    started = time.perf_counter()
    off = os.environ.get("PTXBENCH_SANDBOX") == "off"
    abi = 0 if off else landlock_abi()
    ruleset_fd = -1
    if abi:
        if not _LIBC_FOR_CHILD:
            libc = _libc()
            assert libc is not None
            _LIBC_FOR_CHILD.append(libc)
        read = [*policy.read, *(Path(p) for p in _SYSTEM_READ), *(Path(p) for p in _DEVICES_R)]
        ruleset_fd = _ruleset(read, [policy.job_dir, *(Path(p) for p in _DEVICES_RW)], abi)
    preexec = None if off else functools.partial(_preexec, ruleset_fd, policy.limits,
                                                 None if off else _limit_nproc(policy.limits))
    try:
        proc = subprocess.Popen(argv, cwd=policy.job_dir, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=preexec, pass_fds=(ruleset_fd,) if ruleset_fd >= 0 else ())
    finally:
        if ruleset_fd >= 0:
            os.close(ruleset_fd)
    out, err, timed_out, dropped, max_rss = _communicate(proc, timeout)
    result = Confined(argv=list(argv), returncode=None if timed_out else proc.returncode, stdout=out,
                      stderr=err, seconds=time.perf_counter() - started, timed_out=timed_out,
                      output_dropped=dropped, max_rss=max_rss, sandbox=describe())
    result.cap_hit = _cap_hit(result, policy.limits)
    return result


def _limit_nproc(limits: Limits) -> int | None:
    running = _user_processes()
    return None if running is None else running + limits.processes


def _communicate(proc: subprocess.Popen[bytes], timeout: float) -> tuple[str, str, bool, int, int]:
    """Read both pipes into bounded buffers until they close or the deadline passes, then reap the
    process: (stdout, stderr, timed out, bytes dropped, peak RSS of the tool and its children)."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = _Capture(), _Capture()
    caps = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    deadline = time.monotonic() + timeout
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for pipe in (proc.stdout, proc.stderr):
            sel.register(pipe, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    caps[key.fd].add(chunk)
                else:
                    sel.unregister(key.fileobj)
    if timed_out:
        _kill_group(proc.pid)
    status, max_rss = _reap(proc, deadline)
    if status is None:                      # pipes closed, but the leader outlived the deadline
        timed_out = True
        _kill_group(proc.pid)
        status, max_rss = _reap(proc, None)
    proc.returncode = os.waitstatus_to_exitcode(status) if status is not None else -signal.SIGKILL
    # Children that outlived the leader (nvcc's, killed or not) go with it: nothing survives a job.
    _kill_group(proc.pid)
    proc.stdout.close()
    proc.stderr.close()
    return out.text(), err.text(), timed_out, out.not_kept + err.not_kept, max_rss


def _reap(proc: subprocess.Popen[bytes], deadline: float | None) -> tuple[int | None, int]:
    """wait4 for the leader (its rusage covers the children it waited for); None past the deadline."""
    while True:
        pid, status, usage = os.wait4(proc.pid, 0 if deadline is None else os.WNOHANG)
        if pid == proc.pid:
            return status, usage.ru_maxrss * 1024
        if deadline is not None and time.monotonic() >= deadline:
            return None, 0
        time.sleep(0.002)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# How the toolchain says, in its own words, that a process of it was stopped: nvcc of a child it ran
# ("nvcc error : 'cicc' died due to signal 9"), gcc's driver of cc1plus, cc1plus and ptxas of memory.
# Each pattern is anchored on fixed words from the line's start to the signal or the end, so no text a
# candidate gets quoted (a file name in a pragma, an #error message: those lines begin with the
# candidate's file name or put its words after "fatal error:") can pass for one.
_CHILD_SIGNAL = re.compile(r"^nvcc error\s*: '[\w+.-]+' died due to signal (\d+)\b", re.M)
_DRIVER_SIGNAL = re.compile(r"^(?:gcc|g\+\+|c\+\+): (?:fatal|internal compiler) error: (Killed|File size limit "
                            r"exceeded|CPU time limit exceeded) signal terminated program \w[\w+]*$", re.M)
_OUT_OF_MEMORY = re.compile(r"^(?:cc1plus|cc1): out of memory allocating \d+ bytes|^(?:cc1plus|cc1): (?:fatal error: )?"
                            r"virtual memory exhausted(?:: Cannot allocate memory)?$|^ptxas fatal\s*: Memory allocation "
                            r"failure$", re.M)
_SIGNAL_CAP: dict[int, str] = {int(signal.SIGXCPU): "cpu_seconds", int(signal.SIGXFSZ): "file_size",
                               int(signal.SIGKILL): "killed"}
_WORDS_CAP = {"killed": "killed", "file size limit exceeded": "file_size", "cpu time limit exceeded": "cpu_seconds"}


def _cap_hit(run: Confined, limits: Limits) -> str:
    """Which limit a tool that failed ran into, as far as its end shows it; `killed` when it, or a child
    it reports, was killed by a SIGKILL the judge did not send (the system's out-of-memory killer)."""
    code = run.returncode
    if run.timed_out or code is None or code == 0:
        return ""
    if -code in _SIGNAL_CAP and not (code == -signal.SIGKILL and run.max_rss >= limits.address_space // 4):
        return _SIGNAL_CAP[-code]
    text = run.stderr[-8000:].replace("\r", " ") + "\n" + run.stdout[-8000:].replace("\r", " ")
    if child := _CHILD_SIGNAL.search(text):
        number = int(child.group(1))
        if number in _SIGNAL_CAP:
            return _SIGNAL_CAP[number]
        code = -number              # a child's crash is judged as the tool's own, below
    if driver := _DRIVER_SIGNAL.search(text):
        return _WORDS_CAP[driver.group(1).lower()]
    if _OUT_OF_MEMORY.search(text):
        return "address_space"
    if code in (-signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS, -signal.SIGKILL) \
            and run.max_rss >= limits.address_space // 4:
        return "address_space"      # a crash at its memory cap: an allocation it could not make
    return ""


def job_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A folder for one job that only this user can enter; removed with everything in it."""
    return tempfile.TemporaryDirectory(prefix=prefix)   # mkdtemp makes it 0700
