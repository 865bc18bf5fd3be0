"""A real OpenAI-compatible HTTP endpoint on loopback whose answers a test scripts.

It stands for a model the tests cannot trust: a hostile or steered model (it answers
with forgotten values, confirmations, invented readings), one that is down (HTTP 503),
or one that returns garbage. It logs every request, so a test can check what the LLM
user sent (its prompts must never hold the agent's text). The real embedded model is
exercised by the cassette shipped under ``tests/business/data`` and the slow tests.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[dict[str, Any]], "str | int"]
"""Request body -> the completion's text, or an HTTP status to fail with."""


def role(body: dict[str, Any]) -> str:
    """``voice`` or ``reader``: which of the user's prompts ``body`` is."""
    system = body["messages"][0]["content"]
    return "reader" if system.startswith("You read one message") else "voice"


def draft(body: dict[str, Any]) -> str:
    """The decided reply a voice request asks to reword."""
    last = body["messages"][3]["content"]
    return last.split("Draft: ", 1)[1].split("\nKeep: ", 1)[0]


class ScriptedEndpoint:
    """Serves ``/chat/completions`` with ``answer(body)`` until closed."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(body)
                reply = endpoint.answer(body)
                if isinstance(reply, int):
                    data = json.dumps({"error": {"message": "scripted failure"}}).encode()
                    self.send_response(reply)
                else:
                    message = {"role": "assistant", "content": reply}
                    data = json.dumps({"choices": [{"message": message}]}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
