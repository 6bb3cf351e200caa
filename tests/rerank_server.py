"""A real local HTTP server speaking the ``/rerank`` protocol of Cohere, Jina, vLLM and
Infinity (``{"results": [{"index", "relevance_score"}]}``) or text-embeddings-inference
(``[{"index", "score"}]``), which misbehaves on purpose when told to.

``behaviour`` is one of ``ok`` (scores favour the last text), ``status`` (HTTP ``status``),
``malformed`` (not JSON), ``short`` (one result fewer), ``slow`` (sleeps ``delay`` s),
``nan`` (a score that is no number: ``NaN``, as an fp16 model can overflow to), ``drip``
(a whole answer, one byte every ``delay / 20`` s: each read is quick, the whole one is not),
``hold`` (keeps each request open until ``release`` is set, at most ``delay`` s; ``holding``
counts the requests it holds at the moment).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeReranker:
    def __init__(self) -> None:
        self.behaviour = "ok"
        self.status = 500
        self.delay = 2.0
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.holding = 0
        self._lock = threading.Lock()
        self.headers: list[dict[str, str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append(body)
                fake.headers.append(dict(self.headers))
                texts = body.get("documents", body.get("texts", []))
                tei = "texts" in body
                if fake.behaviour == "status":
                    self._send(fake.status, b'{"error": "boom"}')
                    return
                if fake.behaviour == "malformed":
                    self._send(200, b"{not json")
                    return
                if fake.behaviour == "slow":
                    time.sleep(fake.delay)
                if fake.behaviour == "hold":
                    with fake._lock:
                        fake.holding += 1
                    fake.release.wait(fake.delay)
                    with fake._lock:
                        fake.holding -= 1
                n = len(texts) - (1 if fake.behaviour == "short" else 0)
                # Later texts score higher, best first, as real servers sort them.
                ranked = sorted(range(n), key=lambda i: -i)
                if fake.behaviour == "nan":
                    ranked = [i for i in ranked if i != 0]
                    out: Any = [{"index": 0, "score": float("nan")}]
                    out += [{"index": i, "score": (i + 1) / len(texts)} for i in ranked]
                    self._send(200, json.dumps(out).encode())
                    return
                if tei:
                    out = [{"index": i, "score": (i + 1) / len(texts)} for i in ranked]
                else:
                    out = {
                        "id": "rerank-test",
                        "results": [
                            {"index": i, "relevance_score": (i + 1) / len(texts)} for i in ranked
                        ],
                    }
                self._send(200, json.dumps(out).encode())

            def _send(self, status: int, data: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if fake.behaviour != "drip":
                        self.wfile.write(data)
                        return
                    for byte in data:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(fake.delay / 20)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out first

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/rerank"

    def __enter__(self) -> FakeReranker:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
