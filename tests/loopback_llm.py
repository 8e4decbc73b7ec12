"""A small OpenAI-compatible chat server on 127.0.0.1 for tests: real HTTP, scripted behaviours.

Each request pops the next behaviour from `script` (the last one repeats):
  ("reply", text[, finish_reason])   a normal chat.completion
  ("status", code)                   an HTTP error with an OpenAI-style error body
  ("garbage",)                       200 with a body that is not a chat completion
  ("nochoices",)                     200 with valid JSON but no choices
  ("die",)                           stop the server (connection refused from now on)
  ("fn", callable)                   callable(request_json) -> text, for replies that depend on the prompt
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackLLM:
    def __init__(self, script: list[tuple] | None = None, tokens_per_char: float = 0.25):
        self.script = list(script or [("reply", "ok")])
        self.requests: list[dict[str, Any]] = []
        self.tokens_per_char = tokens_per_char
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                with outer._lock:
                    outer.requests.append(body)
                    step = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
                kind = step[0]
                if kind == "die":
                    self.close_connection = True
                    threading.Thread(target=outer.stop, daemon=True).start()
                    return
                if kind == "status":
                    self._send(step[1], {"error": {"message": f"scripted {step[1]}", "type": "server_error"}})
                    return
                if kind == "garbage":
                    raw = b"<html>502 Bad Gateway</html>"
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)
                    return
                if kind == "nochoices":
                    self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
                                     "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 0,
                                                              "total_tokens": 5}})
                    return
                text = step[1](body) if kind == "fn" else step[1]
                finish = step[2] if len(step) > 2 else "stop"
                prompt_chars = sum(len(m.get("content") or "") for m in body.get("messages", []))
                pt, ct = max(1, int(prompt_chars * outer.tokens_per_char)), max(1, int(len(text) * outer.tokens_per_char))
                self._send(200, {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}})

            def _send(self, code: int, obj: dict[str, Any]) -> None:
                raw = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._stopped = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LoopbackLLM:
        self.thread.start()
        return self

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.server.shutdown()
            self.server.server_close()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
