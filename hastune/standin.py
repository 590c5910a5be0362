"""A small OpenAI-compatible stand-in for vLLM / SGLang with latencies you set: what CI points
`hastune evaluate --evaluator real --engine vllm` at (HASTUNE_ENGINE_CMD / --launch-cmd), so
the real-trial path (launch, health, streamed load, teardown) runs without a GPU.

    python -m hastune.standin --port 8000 --ttft 0.05 --tpot 0.01 [--slowdown A]

Latency model, per request of `max_tokens` = n output tokens: the first token `--ttft` seconds
after the request arrived, each later one `--tpot` × (1 + A·(k − 1)) seconds after the one
before, k the requests in flight (arrived, not yet finished) when it is scheduled
(`--slowdown A`, 0 by default: a fixed TPOT). With deterministic arrivals at rate λ a request
lives L = ttft + (n − 1)·TPOT and k averages λL, so TPOT = tpot·(1 + A(λ·ttft − 1)) /
(1 − tpot·A·λ·(n − 1)) in steady state: the arithmetic tests/openai checks the goodput with.
Every time is an absolute deadline (no drift from sleep overshoot). It always generates
exactly max_tokens tokens (as ignore_eos does). GET /health and /v1/models answer once
`--startup-s` has passed (503 before). Responses stream as SSE over chunked HTTP/1.1, as
uvicorn does; the last chunk carries `usage` when stream_options.include_usage is set.
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Model:
    def __init__(self, ttft: float, tpot: float, slowdown: float, startup_s: float):
        self.ttft, self.tpot, self.slowdown = ttft, tpot, slowdown
        self.ready_at = time.monotonic() + startup_s
        self.lock = threading.Lock()
        self.streaming = 0

    def gap(self) -> float:
        return self.tpot * (1.0 + self.slowdown * max(self.streaming - 1, 0))


def _sleep_until(t: float) -> None:
    while True:
        left = t - time.monotonic()
        if left <= 0:
            return
        time.sleep(left)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    model: Model  # set on the class by serve()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def _json(self, code: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if time.monotonic() < self.model.ready_at:
            self._json(503, {"error": "starting"})
        elif self.path == "/health":
            self._json(200, {})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": "standin", "object": "model"}]})
        else:
            self._json(404, {"error": "not found"})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        arrival = time.monotonic()
        size = int(self.headers.get("Content-Length") or 0)
        try:
            req = json.loads(self.rfile.read(size) or b"{}")
            n = int(req.get("max_tokens") or 16)
        except (ValueError, TypeError, AttributeError):
            self._json(400, {"error": "bad request"})
            return
        if self.path != "/v1/completions" or not req.get("stream") or n < 1:
            self._json(400, {"error": "only streamed /v1/completions with max_tokens >= 1"})
            return
        m = self.model
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        t = arrival + m.ttft
        with m.lock:
            m.streaming += 1
        try:
            for k in range(n):
                _sleep_until(t)
                done = k == n - 1
                ev = {"id": "cmpl-standin", "object": "text_completion", "model": "standin",
                      "choices": [{"index": 0, "text": " tok",
                                   "finish_reason": "length" if done else None}]}
                self._chunk(b"data: " + json.dumps(ev).encode() + b"\n\n")
                with m.lock:
                    t += m.gap()
            if (req.get("stream_options") or {}).get("include_usage"):
                prompt = req.get("prompt")
                used = {"prompt_tokens": len(prompt) if isinstance(prompt, list) else 0,
                        "completion_tokens": n, "total_tokens": n}
                self._chunk(b"data: " + json.dumps({"choices": [], "usage": used}).encode()
                            + b"\n\n")
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with m.lock:
                m.streaming -= 1


def serve(host: str, port: int, model: Model) -> ThreadingHTTPServer:
    Handler.model = model
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 1024
    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hastune.standin", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=int(os.environ.get("HASTUNE_PORT", 8000)))
    ap.add_argument("--ttft", type=float, default=0.05, help="seconds to the first token")
    ap.add_argument("--tpot", type=float, default=0.01, help="seconds per later token")
    ap.add_argument("--slowdown", type=float, default=0.0, help="TPOT × (1 + A·(streams−1))")
    ap.add_argument("--startup-s", type=float, default=0.0, help="unhealthy for this long")
    ap.add_argument("--pid-file", default=None, help="write this process's id here")
    a = ap.parse_args(argv)
    if min(a.ttft, a.tpot, a.slowdown, a.startup_s) < 0:
        ap.error("latencies must be >= 0")
    if a.pid_file:
        with open(a.pid_file, "w") as f:
            f.write(str(os.getpid()))
    srv = serve(a.host, a.port, Model(a.ttft, a.tpot, a.slowdown, a.startup_s))
    print(f"standin serving at http://{a.host}:{a.port}/v1", file=sys.stderr, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
