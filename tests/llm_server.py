"""A small chat-completions server on loopback that serves recorded replies.

It speaks the OpenAI chat-completions protocol over real HTTP (POST
/v1/chat/completions, JSON in and out), so the client under test goes through
the `openai` SDK, httpx and a socket exactly as it would against vLLM or a
hosted API. What it answers is read from a recording (JSON):

    {"replies": {"<task id or *>": {"<turn or *>": [reply, reply, ...]}},
     "die_after": null}

The task is read from the prompt ("# Task `id`"), the turn is the number of
user messages. The replies of one (task, turn) are served in order, the last
one repeating. A reply is one of

    {"content": "...", "delay_s": 0}     a completion (optionally slow)
    {"tool_calls": [{"name": "check", "arguments": "{...}"}], "content": "..."}
                                         a reply calling tools (several: parallel calls); the
                                         arguments are sent as given (a string may be broken JSON)
    {"content": "...", "usage": {...}}   the usage object to report (else one is made up from
                                         the lengths); {"usage": null} reports none
    {"status": 429, "retry_after": 0}    an HTTP error (429, 500, 503 …)
    {"truncated": "..."}                 HTTP 200 whose JSON body is cut in half
    {"no_choices": true}                 HTTP 200, valid JSON, no choices
    {"drop": true}                       the connection is closed with no reply

`die_after: N` makes the process exit abruptly right after its N-th
completion, as a crashed inference server would. `refuse_tools: true` answers
any request that offers tools with HTTP 400, as a server without function
calling does. For a request that offers tools, the turn is 1 + the number of
assistant messages (an agent's conversation has one user message). Every
request is appended to the log file (one JSON object per line) before it is
answered.

Run: python tests/llm_server.py RECORDING.json LOG.jsonl — prints "PORT n".
Tests use `LoopbackLLM`, which starts it as a child process on a free port.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_TASK = re.compile(r"# Task `([^`]+)`")


class _State:
    def __init__(self, recording: dict[str, Any], log_path: str) -> None:
        self.replies: dict[str, dict[str, list[dict[str, Any]]]] = recording.get("replies", {})
        self.die_after: int | None = recording.get("die_after")
        self.refuse_tools: bool = bool(recording.get("refuse_tools"))
        self.log_path = log_path
        self.lock = threading.Lock()
        self.counters: dict[tuple[str, str], int] = {}
        self.completions = 0
        self.requests = 0
        self.in_flight = 0

    def pick(self, task: str, turn: int) -> tuple[dict[str, Any], int]:
        by_task = self.replies.get(task) or self.replies.get("*") or {}
        key = str(turn) if str(turn) in by_task else "*"
        options = by_task.get(key) or [{"content": "I cannot help with that."}]
        with self.lock:
            n = self.counters.get((task, key), 0)
            self.counters[(task, key)] = n + 1
            self.requests += 1
            number = self.requests
        return options[min(n, len(options) - 1)], number

    def log(self, entry: dict[str, Any]) -> None:
        with self.lock, open(self.log_path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def _completion(content: str | None, request: dict[str, Any], number: int,
                reply: dict[str, Any] | None = None) -> dict[str, Any]:
    reply = reply or {}
    prompt_chars = sum(len(m.get("content") or "") for m in request.get("messages", []))
    message: dict[str, Any] = {"role": "assistant", "content": content}
    calls = reply.get("tool_calls")
    if calls:
        message["tool_calls"] = [
            {"id": c.get("id", f"call_{number}_{i}"), "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
                          else json.dumps(c["arguments"])}}
            for i, c in enumerate(calls)]
    out_chars = len(content or "") + sum(len(json.dumps(c)) for c in calls or [])
    body: dict[str, Any] = {
        "id": f"chatcmpl-loopback-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "loopback"),
        "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop", "message": message}],
        "usage": {"prompt_tokens": prompt_chars // 4, "completion_tokens": out_chars // 4,
                  "total_tokens": prompt_chars // 4 + out_chars // 4},
    }
    if "usage" in reply:
        if reply["usage"] is None:
            del body["usage"]
        else:
            body["usage"] = reply["usage"]
    return body


def make_handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [{"id": "loopback", "object": "model"}]}).encode())
            else:
                self._send(404, b'{"error": {"message": "not found"}}')

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, b'{"error": {"message": "not found"}}')
                return
            try:
                request = json.loads(raw)
            except ValueError:
                self._send(400, b'{"error": {"message": "body is not JSON"}}')
                return
            messages = request.get("messages", [])
            users = [m for m in messages if m.get("role") == "user"]
            found = _TASK.search(users[0].get("content", "")) if users else None
            task = found.group(1) if found else "?"
            if request.get("tools") and state.refuse_tools:
                state.log({"n": None, "task": task, "reply": "refused_tools", "tools": True})
                self._send(400, b'{"error": {"message": "tool calling is not enabled on this server"}}')
                return
            turn = len(users)
            if request.get("tools"):
                turn = 1 + sum(m.get("role") == "assistant" for m in messages)
            reply, number = state.pick(task, turn)
            kind = next((k for k in ("tool_calls", "content", "status", "truncated", "no_choices", "drop")
                         if k in reply), "?")
            with state.lock:
                state.in_flight += 1
                in_flight = state.in_flight
            try:
                self._answer(state, request, messages, task, turn, reply, kind, number, in_flight)
            finally:
                with state.lock:
                    state.in_flight -= 1

        def _answer(self, state: _State, request: dict[str, Any], messages: list[dict[str, Any]], task: str,
                    turn: int, reply: dict[str, Any], kind: str, number: int, in_flight: int) -> None:
            state.log({"n": number, "task": task, "turn": turn, "reply": kind, "in_flight": in_flight,
                       "authorization": self.headers.get("Authorization"), "model": request.get("model"),
                       "temperature": request.get("temperature"), "max_tokens": request.get("max_tokens"),
                       "tools": [t.get("function", {}).get("name") for t in request.get("tools") or []],
                       "messages": messages})
            if reply.get("delay_s"):
                time.sleep(float(reply["delay_s"]))
            if "drop" in reply:
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if "status" in reply:
                headers = {"Retry-After": str(reply["retry_after"])} if "retry_after" in reply else {}
                body = json.dumps({"error": {"message": f"recorded {reply['status']}", "type": "server_error"}})
                self._send(int(reply["status"]), body.encode(), headers)
                return
            if "no_choices" in reply:
                self._send(200, json.dumps({"id": f"chatcmpl-{number}", "object": "chat.completion",
                                            "choices": []}).encode())
                return
            text = reply.get("content", reply.get("truncated", "" if "tool_calls" not in reply else None))
            body = json.dumps(_completion(text, request, number, reply)).encode()
            if "truncated" in reply:
                body = body[: len(body) // 2]
            self._send(200, body)
            if "content" in reply or "tool_calls" in reply:
                with state.lock:
                    state.completions += 1
                    dying = state.die_after is not None and state.completions >= state.die_after
                if dying:
                    os._exit(3)

    return Handler


def serve_in_thread(recording: dict[str, Any], log_path: str | Path) -> tuple[ThreadingHTTPServer, str]:
    """The server in a thread of this process (a script that has no child processes to spare):
    (server, base URL). `server.shutdown()` stops it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(_State(recording, str(log_path))))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="loopback-llm", daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


def serve(recording_path: str, log_path: str, port: int = 0) -> None:
    recording = json.loads(Path(recording_path).read_text(encoding="utf-8"))
    state = _State(recording, log_path)
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(state))
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


class LoopbackLLM:
    """The server as a child process of the test: start, read its log, kill it."""

    def __init__(self, recording: dict[str, Any], folder: Path, port: int = 0) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.recording_path = folder / f"recording-{id(self)}.json"
        self.recording_path.write_text(json.dumps(recording), encoding="utf-8")
        self.log_path = folder / f"requests-{id(self)}.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(self.recording_path), str(self.log_path), str(port)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.kill()
            raise RuntimeError(f"the loopback server did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.port = int(line.split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def requests(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> LoopbackLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


# -- recorded replies made from the repository's own kernels ---------------------------------

SOLUTIONS = Path(__file__).resolve().parents[1] / "tasks" / "solutions"


def reply_text(code: str, manifest: str | None, language: str = "ptx", prose: str = "Here is the kernel.") -> str:
    """A reply in the shape models give: a sentence, the code block, the manifest block."""
    text = f"{prose}\n\n```{language}\n{code.rstrip()}\n```\n"
    if manifest:
        text += f"\nLaunch it with:\n\n```json\n{manifest.strip()}\n```\n"
    return text


def expert_reply(task_id: str) -> str:
    folder = SOLUTIONS / task_id
    manifest = (folder / "manifest.json").read_text() if (folder / "manifest.json").exists() else None
    return reply_text((folder / "kernel.ptx").read_text(), manifest, prose=f"A kernel for {task_id}.")


def mutation_reply(mutation_id: str) -> str:
    from ptxbench.tasks.mutations import apply, load_mutations

    mutation = next(m for m in load_mutations() if m.id == mutation_id)
    variant = apply(mutation)
    return reply_text(variant.code, variant.manifest, prose=f"A first attempt at {mutation.task}.")


def expert_arguments(task_id: str) -> dict[str, Any]:
    """The expert kernel as a tool call's arguments: code and (when it has one) its manifest."""
    folder = SOLUTIONS / task_id
    args: dict[str, Any] = {"code": (folder / "kernel.ptx").read_text(), "language": "ptx"}
    if (folder / "manifest.json").exists():
        args["manifest"] = json.loads((folder / "manifest.json").read_text())
    return args


def mutation_arguments(mutation_id: str, task_id: str | None = None) -> dict[str, Any]:
    """A mutation of an expert as a tool call's arguments. With `task_id`, the mutation's edits are
    applied to that task's expert instead (a sibling task: the causal attention kernels)."""
    from dataclasses import replace

    from ptxbench.tasks.mutations import apply, load_mutations

    mutation = next(m for m in load_mutations() if m.id == mutation_id)
    if task_id is not None:
        mutation = replace(mutation, task=task_id)
    variant = apply(mutation)
    args: dict[str, Any] = {"code": variant.code, "language": "ptx"}
    if variant.manifest:
        args["manifest"] = json.loads(variant.manifest)
    return args


def main(argv: list[str]) -> None:
    serve(argv[1], argv[2], int(argv[3]) if len(argv) > 3 else 0)


if __name__ == "__main__":
    main(sys.argv)
