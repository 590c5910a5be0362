"""The load generator of a real trial: requests at their arrival times against an
OpenAI-compatible server (`POST /v1/completions`, stream=true), each request's first and last
token times read at the client from the SSE stream.

Standard library only (asyncio streams, HTTP/1.1 with chunked or plain bodies). A request is
`prompt` token ids (exact prompt lengths, whatever the tokenizer) and `max_tokens` with
`ignore_eos` (vLLM and SGLang both take it: the answer is as long as the recipe says). The
token count is the server's `usage.completion_tokens` when it sends one, else the number of
chunks that carried text. A request that errs, answers other than 200 or runs past
`timeout_s` is failed (the run counts it as rejected: TTFT = TPOT = inf).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import numpy as np


@dataclass
class Request:
    offset: float            # seconds after the run's start
    prompt: list[int]
    max_tokens: int


@dataclass
class Record:
    """Per-request times (seconds since the run's start; nan when it never came)."""

    arrival: np.ndarray
    first: np.ndarray
    last: np.ndarray
    tokens: np.ndarray
    failed: list[int] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)  # error text → count
    lag_max_s: float = 0.0   # how late the client sent its latest request
    wall_s: float = 0.0


class Endpoint:
    def __init__(self, url: str):
        u = urlsplit(url)
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.base = u.path.rstrip("/")
        self.url = url

    async def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        return await asyncio.wait_for(self._get(path), timeout)

    async def _get(self, path: str) -> tuple[int, bytes]:
        r, w = await asyncio.open_connection(self.host, self.port)
        try:
            w.write(f"GET {self.base}{path} HTTP/1.1\r\nHost: {self.host}\r\n"
                    "Connection: close\r\n\r\n".encode())
            await w.drain()
            status, headers = await _head(r)
            body = b"".join([c async for c in _body(r, headers)])
            return status, body
        finally:
            w.close()


async def _head(r: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    line = await r.readline()
    parts = line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        raise ConnectionError(f"not an HTTP response: {line[:80]!r}")
    headers = {}
    while True:
        h = await r.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


async def _body(r: asyncio.StreamReader, headers: dict[str, str]):
    """The body's bytes as they arrive (chunked, sized, or up to EOF)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int((await r.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await r.readline()
                return
            data = await r.readexactly(size)
            await r.readexactly(2)
            yield data
    elif "content-length" in headers:
        yield await r.readexactly(int(headers["content-length"]))
    else:
        while chunk := await r.read(65536):
            yield chunk


async def stream_one(ep: Endpoint, model: str, req: Request, t0: float,
                     ) -> tuple[float, float, int]:
    """(first, last, tokens) of one streamed completion, times since t0."""
    body = json.dumps({"model": model, "prompt": req.prompt, "max_tokens": req.max_tokens,
                       "ignore_eos": True, "temperature": 0.0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    r, w = await asyncio.open_connection(ep.host, ep.port, limit=1 << 20)
    try:
        w.write(f"POST {ep.base}/v1/completions HTTP/1.1\r\nHost: {ep.host}\r\n"
                "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
        await w.drain()
        status, headers = await _head(r)
        if status != 200:
            text = b"".join([c async for c in _body(r, headers)])[:200]
            raise ConnectionError(f"HTTP {status}: {text.decode(errors='replace')}")
        sse = SSE()
        async for data in _body(r, headers):
            sse.feed(data, time.perf_counter() - t0)
        if sse.chunks == 0:
            raise ConnectionError("the stream carried no token")
        return sse.first, sse.last, sse.tokens
    finally:
        w.close()


class SSE:
    """A completion's server-sent events, fed as the bytes arrive (split anywhere): when the
    first and last chunk carrying text came, how many did, and the usage's token count."""

    def __init__(self) -> None:
        self.first = self.last = float("nan")
        self.chunks = 0
        self.usage: int | None = None
        self.buf = b""

    @property
    def tokens(self) -> int:
        return self.usage if self.usage else self.chunks

    def feed(self, data: bytes, now: float) -> None:
        self.buf += data
        *events, self.buf = self.buf.replace(b"\r\n", b"\n").split(b"\n\n")
        for ev in events:
            for line in ev.split(b"\n"):
                if line.startswith(b"data:"):
                    self._event(line[5:].strip(), now)

    def _event(self, payload: bytes, now: float) -> None:
        if payload == b"[DONE]":
            return
        obj = json.loads(payload)
        if obj.get("usage"):
            self.usage = int(obj["usage"].get("completion_tokens") or 0) or None
        if any(c.get("text") for c in obj.get("choices") or []):
            self.chunks += 1
            if self.chunks == 1:
                self.first = now
            self.last = now


async def _drive(ep: Endpoint, model: str, reqs: list[Request], timeout_s: float,
                 rec: Record) -> None:
    t0 = time.perf_counter()

    async def one(i: int, req: Request) -> None:
        await asyncio.sleep(max(0.0, req.offset - (time.perf_counter() - t0)))
        sent = time.perf_counter() - t0
        rec.arrival[i] = sent
        rec.lag_max_s = max(rec.lag_max_s, sent - req.offset)
        try:
            rec.first[i], rec.last[i], rec.tokens[i] = await asyncio.wait_for(
                stream_one(ep, model, req, t0), timeout_s)
        except (OSError, ConnectionError, ValueError, asyncio.TimeoutError,
                asyncio.IncompleteReadError) as exc:
            rec.failed.append(i)
            key = type(exc).__name__ + (f": {exc}" if str(exc) else "")
            rec.errors[key[:200]] = rec.errors.get(key[:200], 0) + 1

    await asyncio.gather(*(one(i, q) for i, q in enumerate(reqs)))
    rec.wall_s = time.perf_counter() - t0


def drive(url: str, model: str, reqs: list[Request], timeout_s: float = 300.0) -> Record:
    """Send `reqs` at their offsets, all concurrently; block until every one ended."""
    n = len(reqs)
    nan = np.full(n, np.nan)
    rec = Record(nan.copy(), nan.copy(), nan.copy(), np.zeros(n))
    asyncio.run(_drive(Endpoint(url), model, reqs, timeout_s, rec))
    return rec


async def _wait_healthy(ep: Endpoint) -> str | None:
    """The served model's id once /v1/models answers 200; None before."""
    try:
        st2, body = await ep.get("/v1/models")
    except (OSError, ConnectionError, ValueError, asyncio.TimeoutError,
            asyncio.IncompleteReadError):
        return None
    if st2 != 200:
        return None
    try:
        data = json.loads(body).get("data") or []
        return str(data[0]["id"]) if data else ""
    except (ValueError, KeyError, TypeError, AttributeError):
        return ""


def served_model(url: str) -> str | None:
    return asyncio.run(_wait_healthy(Endpoint(url)))
