"""What every `ptxbench` command does the same way: exit codes, the error line, registration.

- Exit codes are `ExitCode`; a command's docstring says which it uses.
- An error is one line on standard error, `ptxbench <command>: error: <what to do>`, never a
  traceback (`PTXBENCH_DEBUG=1` shows one where a command catches the unexpected). A store
  failure a command does not catch itself (an SQLite error mid-read, a full disk) is caught by
  `register`'s wrapper and said the same way (`store_failure`).
- A command is a plain function; `register(app, COMMANDS)` adds a table of them (name →
  function) to a typer app, the top-level one in main.py and the `fixit` group alike.
- A file a command writes goes through `check_outputs` (every target, before the work) and
  `write_file`: a store, its -wal/-shm/-journal or any SQLite file is refused with one line and
  nothing written; a file is written whole or not at all (db/files.py).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import IntEnum
from typing import Any, NoReturn

import typer


class ExitCode(IntEnum):
    OK = 0
    TOOL = 1  # the tool, or the work it was asked to do, failed (a missing assembler, an endpoint error)
    USAGE = 2  # a usage mistake: a bad option, a file that cannot be read, a store that will not open
    UNFINISHED = 3  # `run`: some requests or judgements failed; `eval`, `import`: the store would not take a
    # judgement (kept in its recovery journal); run the same command to resume
    REFUSED = 4  # `ptxbench run`: the endpoint refused the run (bad key, unknown model)


def say_error(command: str, message: str) -> None:
    """`ptxbench <command>: error: <message>` on standard error (the message may quote a candidate,
    a model or a tool: the console makes it inert)."""
    from ptxbench.cli.terminal import console

    console(stderr=True).print(
        f"ptxbench {command}: error: {message}", style="red", markup=False, highlight=False, soft_wrap=True
    )


def fail(command: str, message: str, code: ExitCode = ExitCode.USAGE) -> typer.Exit:
    """Say the error and return the Exit to raise (`raise fail(...) from None`)."""
    say_error(command, message)
    return typer.Exit(int(code))


def abort(command: str, message: str, code: ExitCode = ExitCode.USAGE) -> NoReturn:
    """Say the error and exit."""
    raise fail(command, message, code)


@contextmanager
def reported(command: str, *, store: ExitCode = ExitCode.USAGE) -> Iterator[None]:
    """A service's failures as the command's error line and exit code: a usage mistake (and a store
    that will not open, unless `store` says otherwise) exits USAGE, a tool failure TOOL, a store that
    failed while in use (locked, full, an I/O error, damaged) TOOL, and a judgement the store would not
    take (kept in its recovery journal) UNFINISHED."""
    from ptxbench.db.store import StoreError
    from ptxbench.services.errors import ToolError, UsageError

    try:
        yield
    except UsageError as exc:
        raise fail(command, str(exc), ExitCode.USAGE) from None
    except ToolError as exc:
        raise fail(command, str(exc), ExitCode.TOOL) from None
    except StoreError as exc:
        found = store_failure(exc)
        code = store if found is None or found[1] == ExitCode.USAGE else found[1]
        raise fail(command, str(exc), code) from None


def check_outputs(
    command: str,
    targets: Iterable[os.PathLike[str] | str | None],
    *,
    stores: Iterable[os.PathLike[str] | str | None] = (),
) -> None:
    """Refuse, before any work, an output that is a store in use (`stores`, and every store this
    process opened), its -wal, -shm or -journal, any SQLite file, or a folder. None and '-'
    (standard output) are left out."""
    from ptxbench.db.files import check_output
    from ptxbench.db.store import StoreError

    stores = list(stores)
    for target in targets:
        if target is None or os.fspath(target) == "-":
            continue
        try:
            check_output(target, stores=stores)
        except StoreError as exc:
            raise fail(command, str(exc)) from None


def write_file(
    command: str, target: os.PathLike[str] | str, text: str, *, stores: Iterable[os.PathLike[str] | str | None] = ()
) -> None:
    """Write `text` to `target`, checked as `check_outputs` does, through a temporary file renamed into
    place (a failed write leaves the old file, or none); a refusal or an OS error is the error line."""
    from ptxbench.db.files import write_output
    from ptxbench.db.store import StoreError

    try:
        write_output(target, text, stores=stores)
    except StoreError as exc:
        raise fail(command, str(exc)) from None
    except OSError as exc:
        raise fail(command, f"cannot write {os.fspath(target)}: {exc.strerror or exc}") from None


@contextmanager
def run_reported() -> Iterator[None]:
    """A model run's failures (`ptxbench run`, with or without `--agent`) as its error line and exit code."""
    from ptxbench.db.store import StoreError
    from ptxbench.services import runs

    try:
        yield
    except runs.RunMismatch as exc:
        raise fail("run", str(exc)) from None
    except runs.EndpointError as exc:
        raise fail("run", f"the endpoint refused the run: {exc}", ExitCode.REFUSED) from None
    except StoreError as exc:
        raise fail("run", f"store error: {exc}", ExitCode.TOOL) from None


Command = Callable[..., Any]
PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def store_failure(exc: BaseException) -> tuple[str, ExitCode] | None:
    """The error line and exit code for a store failure that reached a command uncaught (None for
    anything else): a judgement kept in the recovery journal is UNFINISHED, a store that failed while
    in use (locked, full, an I/O error, damaged) TOOL, one that will not open USAGE."""
    import sqlite3
    from pathlib import Path

    from ptxbench.db.recovery import Kept
    from ptxbench.db.store import StoreDamaged, StoreError, StoreLocked, StoreWriteFailed, translate_error

    if isinstance(exc, sqlite3.Error):
        exc = translate_error(exc, Path("the store"))
    if isinstance(exc, Kept):
        return str(exc), ExitCode.UNFINISHED
    if isinstance(exc, (StoreLocked, StoreWriteFailed, StoreDamaged)):
        return str(exc), ExitCode.TOOL
    if isinstance(exc, StoreError):
        return str(exc), ExitCode.USAGE
    return None


def _guarded(name: str, function: Command) -> Command:
    """`function`, with a store failure it did not catch said as the command's error line."""

    @functools.wraps(function)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except Exception as exc:  # only store failures are said here; anything else is re-raised
            found = store_failure(exc)
            if found is None or os.environ.get("PTXBENCH_DEBUG"):
                raise
            raise fail(name, *found) from None

    return run


def register(
    app: typer.Typer, commands: Sequence[tuple[str, Command]], *, pass_through: Sequence[str] = (), group: str = ""
) -> None:
    """Add each (name, function) to `app`. A name in `pass_through` hands its arguments on unparsed
    (`ptxbench tui --db X` is read by the explorer's own parser); `group` names the group in error lines."""
    for name, function in commands:
        if name in pass_through:
            app.command(name, context_settings=PASS_THROUGH, add_help_option=False)(function)
        else:
            app.command(name)(_guarded(f"{group} {name}".strip(), function))
