"""An episode's kernel as a file the agent edits, so a large kernel is sent once and then changed in place.

The workspace holds one file (the kernel's source), its language and its launch manifest. The agent
writes it whole (`write_file`), replaces one exact span (`edit_file`), applies a unified diff
(`apply_patch`) or reads a range of it (`read_file`); `assemble`, `check`, `time` and `submit` judge
what the file holds when they are called without `code`. Every edit is checked before it lands: an
edit that does not apply leaves the file as it was and says why, and no edit may grow the file past
the engine's candidate limit.

Nothing here parses JSON or touches the store: the caller checks the call's size and nesting first
(models/agent_tools.py) and records the call, whose arguments are the edit and not the file.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

READ_MAX_LINES = 400
READ_MAX_CHARS = 48_000
EXCERPT_LINES = 3
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_FILE_HEADER = ("--- ", "+++ ", "diff ", "index ", "new file", "deleted file", "similarity", "rename ")


class EditError(ValueError):
    """An edit that cannot be applied: said to the agent; the file is unchanged."""


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass
class Workspace:
    """One episode's file. `limit` is the largest file in UTF-8 bytes (the engine's candidate limit)."""

    limit: int
    code: str = ""
    language: str = "ptx"
    manifest: dict[str, Any] | None = None
    edits: int = 0                    # changes so far, writes included

    @property
    def empty(self) -> bool:
        return not self.code.strip()

    def summary(self) -> dict[str, Any]:
        """What every answer says about the file: enough to tell two versions apart, never the text."""
        digest = hashlib.sha256(self.code.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        return {"lines": self.code.count("\n") + (1 if self.code and not self.code.endswith("\n") else 0),
                "bytes": _size(self.code), "sha256": digest, "language": self.language,
                "manifest": self.manifest is not None, "version": self.edits}

    def _land(self, code: str) -> None:
        size = _size(code)
        if size > self.limit:
            raise EditError(f"the file would be {size:,} bytes, over the limit of {self.limit:,} bytes")
        self.code = code
        self.edits += 1

    # -- the edits ---------------------------------------------------------------------------------

    def write(self, code: str, language: str | None = None, manifest: dict[str, Any] | None = None,
              clear_manifest: bool = False) -> dict[str, Any]:
        self._land(code)
        if language is not None:
            self.language = language
        if manifest is not None or clear_manifest:
            self.manifest = manifest
        return {"file": self.summary()}

    def replace(self, old: str, new: str) -> dict[str, Any]:
        """Replace the one span that reads exactly `old` with `new`."""
        if not old:
            raise EditError("`old` is empty: give the exact text to replace (a few lines around the change)")
        count = self.code.count(old)
        if count == 0:
            hint = _near_miss(self.code, old)
            raise EditError("`old` is not in the file" + (f"; the closest line is {hint}" if hint else "") +
                            "; read_file shows the file as it is")
        if count > 1:
            lines = _lines_of(self.code, old)
            raise EditError(f"`old` is in the file {count} times (at lines {', '.join(map(str, lines[:8]))}); "
                            "include more of the surrounding text so it is found once")
        at = self.code.index(old)
        first = self.code.count("\n", 0, at) + 1
        self._land(self.code[:at] + new + self.code[at + len(old):])
        return {"file": self.summary(), "changed_at_line": first,
                "excerpt": self.excerpt(first, first + new.count("\n"))}

    def patch(self, diff: str) -> dict[str, Any]:
        """Apply a unified diff (`@@ -a,b +c,d @@` hunks; file headers optional). Each hunk's context and
        removed lines must match the file; a hunk is looked for at its stated line first, then nearest
        to it. All hunks apply or none does."""
        hunks = _parse_hunks(diff)
        lines = self.code.split("\n")
        out: list[str] = []
        cursor, changed = 0, []
        for number, (start, old, new) in enumerate(hunks, 1):
            at = _find(lines, old, start, cursor)
            if at is None:
                want = old[0] if old else ""
                raise EditError(f"hunk {number} (at line {start}) does not match the file: its context and "
                                f"removed lines are not found after line {cursor} (first of them: {_quote(want)}); "
                                "read_file shows the file as it is. No hunk was applied")
            out.extend(lines[cursor:at])
            changed.append(len(out) + 1)
            out.extend(new)
            cursor = at + len(old)
        out.extend(lines[cursor:])
        self._land("\n".join(out))
        return {"file": self.summary(), "hunks": len(hunks), "changed_at_lines": changed}

    # -- reading -------------------------------------------------------------------------------------

    def excerpt(self, first: int, last: int) -> str:
        lines = self.code.split("\n")
        lo, hi = max(1, first - EXCERPT_LINES), min(len(lines), last + EXCERPT_LINES)
        return _numbered(lines, lo, hi)

    def read(self, start: int | None = None, end: int | None = None) -> dict[str, Any]:
        lines = self.code.split("\n")
        total = len(lines)
        lo = max(1, start or 1)
        hi = min(total, end or total, lo + READ_MAX_LINES - 1)
        if lo > total:
            raise EditError(f"the file has {total} lines; start_line {lo} is past its end")
        text = _numbered(lines, lo, hi)
        cut = ""
        if len(text) > READ_MAX_CHARS:
            text = text[:READ_MAX_CHARS]
            hi = lo + text.count("\n")
            text = text[: text.rfind("\n")] if "\n" in text else text
            cut = "the text is cut at the size one read may show"
        out: dict[str, Any] = {"file": self.summary(), "start_line": lo, "end_line": hi, "text": text}
        if hi < total:
            out["more"] = f"lines {hi + 1}–{total} not shown: read_file(start_line={hi + 1})" + (f"; {cut}" if cut else "")
        return out


def _numbered(lines: list[str], lo: int, hi: int) -> str:
    return "\n".join(f"{n:>5}| {lines[n - 1]}" for n in range(lo, hi + 1))


def _quote(line: str, limit: int = 120) -> str:
    line = line if len(line) <= limit else line[:limit] + "…"
    return repr(line)


def _lines_of(text: str, needle: str) -> list[int]:
    found: list[int] = []
    at = text.find(needle)
    while at >= 0 and len(found) < 50:
        found.append(text.count("\n", 0, at) + 1)
        at = text.find(needle, at + 1)
    return found


def _near_miss(text: str, old: str) -> str | None:
    """The file's line that reads like `old`'s first line once spaces are ignored, with its number."""
    first = next((ln for ln in old.split("\n") if ln.strip()), "")
    key = "".join(first.split())
    if not key:
        return None
    for n, line in enumerate(text.split("\n"), 1):
        if "".join(line.split()) == key:
            return f"line {n}: {_quote(line)} (the spacing differs)"
    return None


def _parse_hunks(diff: str) -> list[tuple[int, list[str], list[str]]]:
    """(old start line, old lines, new lines) per hunk. Line counts in the headers are not trusted
    (models get them wrong); a hunk runs to the next header."""
    if not isinstance(diff, str) or not diff.strip():
        raise EditError("`patch` is empty: give a unified diff with @@ hunks")
    rows = diff.replace("\r\n", "\n").split("\n")
    while rows and not rows[-1].strip():
        rows.pop()
    hunks: list[tuple[int, list[str], list[str]]] = []
    current: tuple[int, list[str], list[str]] | None = None
    for row in rows:
        head = _HUNK.match(row)
        if head:
            current = (int(head.group(1)), [], [])
            hunks.append(current)
            continue
        if current is None or row.startswith(_FILE_HEADER[:3]):
            if current is not None:
                current = None
            continue
        if row.startswith("\\"):          # "\ No newline at end of file"
            continue
        op, body = (row[0], row[1:]) if row else (" ", "")   # an empty row is an empty context line
        if op == " ":
            current[1].append(body)
            current[2].append(body)
        elif op == "-":
            current[1].append(body)
        elif op == "+":
            current[2].append(body)
        else:
            raise EditError(f"a hunk line must start with ' ', '-' or '+': {_quote(row)}")
    if not hunks:
        raise EditError("no @@ hunk in `patch`: give a unified diff such as\n@@ -12,3 +12,3 @@\n context\n-old line\n"
                        "+new line\n context")
    return hunks


def _find(lines: list[str], old: list[str], start: int, floor: int) -> int | None:
    """Where `old` matches `lines` at or after `floor`, nearest to its stated line `start`; exact first,
    then ignoring trailing spaces. A hunk with no old lines inserts after line `start`, as diff writes it."""
    if not old:
        return start if floor <= start <= len(lines) else None
    n = len(old)
    last = len(lines) - n
    if last < floor:
        return None
    hint = min(max(start - 1, floor), last)
    order = sorted(range(floor, last + 1), key=lambda i: (abs(i - hint), i))
    for loose in (False, True):
        want = [ln.rstrip() for ln in old] if loose else old
        for i in order:
            head = lines[i].rstrip() if loose else lines[i]
            if head != want[0]:
                continue
            window = lines[i:i + n]
            if (loose and [ln.rstrip() for ln in window] == want) or (not loose and window == want):
                return i
    return None
