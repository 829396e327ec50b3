"""A small OpenAI-compatible HTTP server on 127.0.0.1, for tests that drive a real ``openai`` client.

Answers ``POST /v1/chat/completions`` (also ``stream: true`` as server-sent events, with a
final usage chunk when ``stream_options.include_usage`` is set) and ``POST /v1/embeddings``.
The model name chooses an error: ``error-400``, ``error-429`` or ``error-500`` answer that
status with an OpenAI-shaped error body. Usage is deterministic: a prompt costs one token
per word (at least one), an answer is :data:`ANSWER` (:data:`ANSWER_TOKENS` tokens), an
embedding input one token per word.

    with serve() as base_url:   # http://127.0.0.1:<port>/v1
        ...
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "hello from the test server"
ANSWER_TOKENS = len(ANSWER.split())
_ERRORS = {
    "error-400": (400, "invalid_request_error"),
    "error-429": (429, "rate_limit_exceeded"),
    "error-500": (500, "server_error"),
}


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Tokens the server bills for a chat prompt: one per word of every message, at least one."""
    return max(1, sum(len(str(m.get("content", "")).split()) for m in messages))


def embedding_tokens(inputs: str | list[str]) -> int:
    """Tokens the server bills for an embeddings input: one per word, at least one."""
    texts = [inputs] if isinstance(inputs, str) else inputs
    return max(1, sum(len(t.split()) for t in texts))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    counter = 0
    lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read their own output
        pass

    def _next_id(self, prefix: str) -> str:
        with _Handler.lock:
            _Handler.counter += 1
            return f"{prefix}-{_Handler.counter:06d}"

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        model = str(body.get("model", ""))
        if model in _ERRORS:
            status, code = _ERRORS[model]
            self._json(status, {"error": {"message": f"test error {status}", "type": code, "code": code}})
        elif self.path == "/v1/chat/completions":
            self._chat(body, model)
        elif self.path == "/v1/embeddings":
            tokens = embedding_tokens(body.get("input", ""))
            inputs = body.get("input", "")
            count = 1 if isinstance(inputs, str) else len(inputs)
            self._json(
                200,
                {
                    "object": "list",
                    "model": model,
                    "data": [{"object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3]} for i in range(count)],
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
                },
            )
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def _chat(self, body: dict[str, Any], model: str) -> None:
        request_id, created = self._next_id("chatcmpl"), 1_767_225_600
        usage = {"prompt_tokens": prompt_tokens(body.get("messages", [])), "completion_tokens": ANSWER_TOKENS}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        if not body.get("stream"):
            self._json(
                200,
                {
                    "id": request_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": ANSWER}}
                    ],
                    "usage": usage,
                },
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        base = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model}
        chunks = [
            {
                **base,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": word + " "}, "finish_reason": None}],
            }
            for word in ANSWER.split()
        ]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": usage})
        for chunk in chunks:
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        self.close_connection = True


@contextmanager
def serve() -> Iterator[str]:
    """Run the server on a free port of 127.0.0.1 in a thread; yields its ``/v1`` base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="openai-test-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
