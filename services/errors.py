"""What a service reports when it cannot do what it was asked.

A bad candidate is never one of these: it is a verdict. These are for the caller's mistakes
and for the tool's own failures, so each front end can say them its own way (the command line
maps them to its exit codes, cli/conventions.py).
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of the failures a service reports; the message is one line a person can act on."""


class UsageError(ServiceError):
    """The request itself is wrong: a file that cannot be read, an unknown task, arch or family."""


class ToolError(ServiceError):
    """The tool failed, not the candidate: a missing assembler, a GPU worker that cannot run."""
