"""The rest of a process's output after a test stopped reading its stdout line by line.

`Popen.communicate` reads the pipes' file descriptors directly, so lines the text wrapper had already
read ahead (a batch that writes several events at once) would be lost: read the wrapper instead, with
stderr drained on a thread so neither pipe can fill and block the process."""

from __future__ import annotations

import subprocess
import threading


def rest_of(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """(stdout, stderr) from where the caller left off to the process's end; waits at most `timeout`."""
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True) if proc.stderr else None
    if reader is not None:
        reader.start()
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait(timeout=timeout)
    if reader is not None:
        reader.join(timeout)
    return out, "".join(err)
