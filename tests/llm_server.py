"""A real local HTTP server speaking the Chat Completions streaming protocol (SSE chunks,
then ``data: [DONE]``), which misbehaves on purpose when told to.

``FakeLLM.behaviours`` is a queue: each request takes the next behaviour (the last one
repeats). Each request's JSON body is kept in ``FakeLLM.requests``. ``{"kind": "echo"}``
streams the request's source passages back, then ``[1]``. ``{"kind": "frames"}`` writes
``frames`` as they are (a ``str`` as a content delta, a ``dict`` as a chunk's JSON, ``bytes``
raw), then ``finish`` (a finish_reason, None for none) and ``[DONE]`` unless ``done`` is
false, holding the connection open ``linger`` seconds after: the wire shapes real servers
send. ``{"kind": "hang"}`` reads the request and never
answers.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def _chunk(content: str | None, *, finish: str | None = None) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "local-test",
        "choices": [{"index": 0, "delta": {} if content is None else {"content": content},
                     "finish_reason": finish}],
    }  # fmt: skip
    return f"data: {json.dumps(body)}\n\n".encode()


def _usage_chunk(prompt: int, completion: int) -> bytes:
    body = {
        "id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
        "model": "local-test", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    }  # fmt: skip
    return f"data: {json.dumps(body)}\n\n".encode()


def _quoted_sources(request: dict[str, Any]) -> list[str]:
    """The passage lines of the sources in the request's last message (fences and titles
    left out), each as one delta."""
    content = request["messages"][-1]["content"]
    return [
        line + " "
        for line in content.split("\n")
        if line and not line.startswith(("-----", "Title:", "Sources:", "Question:"))
    ]


@contextmanager
def serving(settings: Any, *behaviours: dict[str, Any], **answers: Any) -> Iterator[FakeLLM]:
    """A running ``FakeLLM`` that the ``openai`` provider is set to use (``settings``:
    pytest-django's fixture), with ``behaviours`` as its queue if given and ``answers`` as
    further ``ANSWERS`` settings; closed at the end."""
    server = FakeLLM()
    if behaviours:
        server.behaviours = list(behaviours)
    settings.ANSWERS = {
        **settings.ANSWERS,
        "PROVIDER": "openai",
        "MODEL": "local-test",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        **answers,
    }
    try:
        yield server
    finally:
        server.close()


class FakeLLM:
    def __init__(self) -> None:
        self.behaviours: list[dict[str, Any]] = [{"kind": "ok", "deltas": ["Hello [1]."]}]
        self.requests: list[dict[str, Any]] = []
        self.closed_early = threading.Event()
        self.stop = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                fake.requests.append(json.loads(self.rfile.read(length) or b"{}"))
                behaviour = (
                    fake.behaviours.pop(0) if len(fake.behaviours) > 1 else fake.behaviours[0]
                )
                fake.serve(self, behaviour)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()

    def _sleep(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def serve(self, handler: BaseHTTPRequestHandler, behaviour: dict[str, Any]) -> None:
        kind = behaviour["kind"]
        if kind == "hang":
            self._sleep(behaviour.get("seconds", 30))
            return
        if kind == "status":
            error = behaviour.get("error", {"message": "upstream says no", "type": "server_error"})
            body = json.dumps({"error": error})
            handler.send_response(behaviour["status"])
            for name, value in behaviour.get("headers", {}).items():
                handler.send_header(name, value)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body.encode())
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Connection", "close")
        handler.end_headers()
        write = handler.wfile
        try:
            if kind == "stall_first":
                self._sleep(behaviour.get("seconds", 5))
            write.write(_chunk(None))  # the role-only first chunk real servers send
            write.flush()
            deltas = behaviour.get("deltas", [])
            if kind == "echo":  # a model that quotes its sources word for word
                deltas = [*_quoted_sources(self.requests[-1]), " [1]"]
            for index, delta in enumerate(deltas):
                if kind == "stall_mid" and index == behaviour.get("after", 1):
                    self._sleep(behaviour.get("seconds", 5))
                if kind == "cut" and index == behaviour.get("after", 1):
                    if behaviour.get("reset"):  # RST, not FIN: a peer that crashed
                        linger = struct.pack("ii", 1, 0)
                        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                        handler.connection.close()
                        return
                    handler.connection.shutdown(socket.SHUT_RDWR)
                    return
                write.write(_chunk(delta))
                write.flush()
                time.sleep(behaviour.get("pace", 0))
            if kind == "frames":
                for frame in behaviour["frames"]:
                    if isinstance(frame, str):
                        write.write(_chunk(frame))
                    elif isinstance(frame, dict):
                        write.write(f"data: {json.dumps(frame)}\n\n".encode())
                    else:
                        write.write(frame)
                    write.flush()
                    time.sleep(behaviour.get("pace", 0))
                finish = behaviour.get("finish", "stop")
                if finish is not None:
                    write.write(_chunk(None, finish=finish))
                if behaviour.get("done", True):
                    write.write(b"data: [DONE]\n\n")
                write.flush()
                self._sleep(behaviour.get("linger", 0))  # the connection held open after it
                return
            if kind == "garbage":
                write.write(b"data: {this is not json\n\n")
                write.flush()
            if kind == "empty_forever":
                while not self.stop.is_set():
                    write.write(_chunk(""))
                    write.flush()
                    time.sleep(0.001)
            if "usage" in behaviour:
                write.write(_usage_chunk(*behaviour["usage"]))
            write.write(_chunk(None, finish="stop"))
            write.write(b"data: [DONE]\n\n")
            write.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.closed_early.set()
