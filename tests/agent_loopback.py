"""A chat-completions endpoint on loopback that plays one agent's replies in order, and misbehaves on cue.

Real HTTP in a child process, spoken to through the `openai` SDK like any endpoint. The recording:

    {"script": [reply, ...],          the replies, in the order requests offering tools arrive
     "context_chars": N,              a request whose messages hold more characters is refused
     "overflow_message": "..."}       with HTTP 400 and this message (a vLLM-style one by default)

A reply: {"content", "reasoning" (sent as reasoning_content), "tool_calls": [{"name", "arguments"}],
"usage" (reported as given; else 4 characters a token, the tools' schemas included), "delay_s"}. A refused request does not use
up a reply; after the last reply the last one repeats. Every request is logged (one JSON line) with
its messages and its character count before it is answered.

Run: python tests/agent_loopback.py RECORDING.json LOG.jsonl — prints "PORT n".
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

VLLM_OVERFLOW = ("This model's maximum context length is {limit} tokens. However, you requested {asked} tokens in "
                 "the messages. Please reduce the length of the messages.")


def _chars(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        total += len(m.get("content") or "")
        for call in m.get("tool_calls") or ():
            total += len((call.get("function") or {}).get("arguments") or "")
    return total


def make_handler(recording: dict[str, Any], log_path: str) -> type[BaseHTTPRequestHandler]:
    script: list[dict[str, Any]] = recording.get("script") or [{"content": "nothing to say"}]
    limit = recording.get("context_chars")
    lock = threading.Lock()
    served = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            messages = request.get("messages") or []
            size = _chars(messages)
            refused = limit is not None and size > limit
            with lock:
                number = served[0]
                if not refused:
                    served[0] += 1
                with open(log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps({"n": number, "chars": size, "refused": refused,
                                         "tools": [t["function"]["name"] for t in request.get("tools") or []],
                                         "messages": messages}) + "\n")
            if refused:
                text = recording.get("overflow_message") or VLLM_OVERFLOW
                self._send(400, {"error": {"message": text.format(limit=limit // 4, asked=size // 4),
                                           "type": "BadRequestError", "code": 400}})
                return
            reply = script[min(number, len(script) - 1)]
            if reply.get("delay_s"):
                time.sleep(float(reply["delay_s"]))
            message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
            if reply.get("reasoning"):
                message["reasoning_content"] = reply["reasoning"]
            calls = reply.get("tool_calls") or []
            if calls:
                message["tool_calls"] = [
                    {"id": f"call_{number}_{i}", "type": "function",
                     "function": {"name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
                                  else json.dumps(c["arguments"])}} for i, c in enumerate(calls)]
            # Like a real endpoint's count, the prompt's tokens include the tools' schemas.
            prompt = (size + len(json.dumps(request.get("tools") or []))) // 4 + 1
            usage = reply.get("usage") or {"prompt_tokens": prompt, "completion_tokens": 10,
                                           "total_tokens": prompt + 10}
            self._send(200, {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": int(time.time()),
                             "model": request.get("model"), "usage": usage,
                             "choices": [{"index": 0, "message": message,
                                          "finish_reason": "tool_calls" if calls else "stop"}]})

    return Handler


class ScriptedLLM:
    """The endpoint as a child process of the test."""

    def __init__(self, recording: dict[str, Any], folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.recording_path = folder / f"script-{id(self)}.json"
        self.recording_path.write_text(json.dumps(recording), encoding="utf-8")
        self.log_path = folder / f"script-requests-{id(self)}.jsonl"
        self.proc = subprocess.Popen([sys.executable, __file__, str(self.recording_path), str(self.log_path)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.kill()
            raise RuntimeError(f"the scripted endpoint did not start: {line!r}")
        self.base_url = f"http://127.0.0.1:{int(line.split()[1])}/v1"

    def requests(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text(encoding="utf-8").splitlines() if line]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> ScriptedLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def main(argv: list[str]) -> None:
    recording = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(recording, argv[2]))
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv)
