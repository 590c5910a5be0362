"""Stub engine servers for the gateway's tests: aiohttp apps on ephemeral localhost ports that
record what they receive, answer as vLLM 0.33.0 / SGLang 0.5.23 do in E/P/D, and reject (400)
a hand-off whose fields are not the engine's. Their expectations are written out here, not
imported from the gateway, so a misspelt field fails a test.

Encode stubs also check that a micro-batch arrives together: each encode request carries
x-hastune-batch "number/size", and the stub answers none of a batch until all `size` have
arrived (a gateway that sent them one after another would wait on itself and fail after
`BARRIER_S`: a failure detector, not a timing assertion)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections import defaultdict
from dataclasses import dataclass, field

from aiohttp import web

MM = {"image_url", "audio_url", "input_audio", "video_url"}
VLLM_PREFILL_KV = {"do_remote_decode": True, "do_remote_prefill": False,
                   "remote_engine_id": None, "remote_block_ids": None, "remote_host": None,
                   "remote_port": None}
BARRIER_S = 10.0


def media(body: dict) -> list[dict]:
    return [c for m in body.get("messages") or () if isinstance(m.get("content"), list)
            for c in m["content"] if c.get("type") in MM]


@dataclass
class Stub:
    engine: str   # vllm | sglang
    role: str     # encode | prefill | decode
    name: str
    bootstrap_port: int | None = None
    url: str = ""
    received: list = field(default_factory=list)  # (path, rid, body, batch tag)
    hold: asyncio.Event | None = None  # decode: answer only once set
    die_after: int | None = None  # decode: drop the connection after this many chunks
    runner: web.AppRunner | None = None


class Deployment:
    """Every stub of one test's deployment, and what they saw together."""

    def __init__(self, engine: str):
        self.engine = engine
        self.stubs: list[Stub] = []
        self.prefilled: dict[str, str] = {}  # rid → the vLLM prefill stub that served it
        self.batches: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.batch_full: dict[tuple[str, str], asyncio.Event] = defaultdict(asyncio.Event)
        self.bootstrap: dict[int, str] = {}  # SGLang: bootstrap port → prefill stub name
        self.errors: list[str] = []  # every rejected hand-off, for the test's message

    async def add(self, role: str, name: str, bootstrap_port: int | None = None) -> Stub:
        stub = Stub(self.engine, role, name, bootstrap_port)
        if bootstrap_port is not None:
            self.bootstrap[bootstrap_port] = name
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handler(stub))
        app.router.add_post("/v1/completions", self._handler(stub))
        app.router.add_get("/health", _healthy)
        stub.runner = web.AppRunner(app)
        await stub.runner.setup()
        site = web.TCPSite(stub.runner, "127.0.0.1", 0)
        await site.start()
        stub.url = f"http://127.0.0.1:{stub.runner.addresses[0][1]}"
        self.stubs.append(stub)
        return stub

    def role(self, role: str) -> list[Stub]:
        return [s for s in self.stubs if s.role == role]

    async def close(self) -> None:
        for s in self.stubs:
            if s.hold is not None:
                s.hold.set()
            await s.runner.cleanup()  # type: ignore[union-attr]

    # -- the engines' answers --------------------------------------------------------------
    def _handler(self, stub: Stub):
        async def handle(request: web.Request) -> web.StreamResponse:
            body = await request.json()
            rid = request.headers.get("x-request-id", "")
            tag = request.headers.get("x-hastune-batch")
            stub.received.append((request.path, rid, body, tag))
            check = getattr(self, f"_{self.engine}_{stub.role}")
            try:
                out = await check(stub, request.path, rid, body, tag)
            except Bad as exc:
                self.errors.append(f"{stub.name}: {exc}")
                return web.json_response({"error": str(exc)}, status=400)
            if isinstance(out, web.StreamResponse):
                return out
            if out == "stream":
                return await self._stream(request, stub, body)
            return web.json_response(out)
        return handle

    async def _vllm_encode(self, stub: Stub, path: str, rid: str, body: dict, tag) -> dict:
        need(path == "/v1/chat/completions", f"encode on {path}")
        need(set(body) == {"model", "messages", "max_tokens", "stream"},
             f"encode body keys {sorted(body)}")
        need(body["stream"] is False and body["max_tokens"] == 1, "encode: stream/max_tokens")
        msgs = body["messages"]
        need(len(msgs) == 1 and msgs[0]["role"] == "user" and len(msgs[0]["content"]) == 1
             and msgs[0]["content"][0]["type"] in MM, "encode: one media item, no text")
        need(re.fullmatch(r".+:\d+:[0-9a-f]{6}", rid) is not None, f"encode request id {rid}")
        await self._together(stub, rid.split(":")[0], tag)
        return {"id": rid, "object": "chat.completion", "choices": [],
                "ec_transfer_params": {f"mm-{rid}": {"encoder": stub.name}}}

    async def _together(self, stub: Stub, parent: str, tag: str | None) -> None:
        need(tag is not None and re.fullmatch(r"\d+/\d+", tag) is not None, f"batch tag {tag}")
        size = int(tag.split("/")[1])  # type: ignore[union-attr]
        key = (stub.name, tag)  # type: ignore[assignment]
        if parent not in self.batches[key]:
            self.batches[key].append(parent)
        if len(self.batches[key]) >= size:
            self.batch_full[key].set()
        try:
            await asyncio.wait_for(self.batch_full[key].wait(), BARRIER_S)
        except asyncio.TimeoutError:
            raise Bad(f"batch {tag} did not arrive together: {self.batches[key]}") from None

    async def _vllm_prefill(self, stub: Stub, path: str, rid: str, body: dict, tag) -> dict:
        need(body.get("kv_transfer_params") == VLLM_PREFILL_KV,
             f"prefill kv_transfer_params {body.get('kv_transfer_params')}")
        need(body.get("stream") is False and body.get("max_tokens") == 1,
             "prefill: stream false, max_tokens 1")
        need("stream_options" not in body, "prefill: stream_options left in")
        if "max_completion_tokens" in body:
            need(body["max_completion_tokens"] == 1, "prefill: max_completion_tokens")
        if media(body):
            ec = body.get("ec_transfer_params") or {}
            need(len(ec) == len(media(body)), f"prefill: ec_transfer_params {ec}")
        self.prefilled[rid] = stub.name
        return {"id": rid, "choices": [{"index": 0, "text": "x"}],
                "kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False,
                                       "remote_engine_id": stub.name,
                                       "remote_block_ids": [1, 2, 3],
                                       "remote_host": "127.0.0.1", "remote_port": 5600,
                                       "tp_size": 1}}

    async def _vllm_decode(self, stub: Stub, path: str, rid: str, body: dict, tag):
        kv = body.get("kv_transfer_params") or {}
        need(kv.get("do_remote_prefill") is True and kv.get("remote_block_ids") == [1, 2, 3],
             f"decode kv_transfer_params {kv}")
        need(self.prefilled.get(rid) == kv.get("remote_engine_id"),
             f"decode: KV from {kv.get('remote_engine_id')}, prefilled on "
             f"{self.prefilled.get(rid)}")
        return await self._decode(stub, body)

    async def _sglang_encode(self, stub: Stub, path: str, rid: str, body: dict, tag) -> dict:
        raise Bad("SGLang's encoders are called by the language-only prefill server, not the "
                  "router")

    def _bootstrap(self, body: dict) -> str:
        host = body.get("bootstrap_host")
        need(host == "127.0.0.1", f"bootstrap_host {host}")
        room = body.get("bootstrap_room")
        need(isinstance(room, int) and 0 <= room <= 2 ** 63 - 1, f"bootstrap_room {room}")
        port = body.get("bootstrap_port")
        need(port in self.bootstrap, f"bootstrap_port {port} is no prefill server's")
        return self.bootstrap[port]

    async def _sglang_prefill(self, stub: Stub, path: str, rid: str, body: dict, tag) -> dict:
        need(self._bootstrap(body) == stub.name,
             f"prefill got bootstrap_port {body.get('bootstrap_port')}, its own is "
             f"{stub.bootstrap_port}")
        return {"text": "x", "meta_info": {"id": rid}}

    async def _sglang_decode(self, stub: Stub, path: str, rid: str, body: dict, tag):
        self._bootstrap(body)
        return await self._decode(stub, body)

    async def _decode(self, stub: Stub, body: dict):
        if stub.hold is not None:
            await stub.hold.wait()
        n = int(body.get("max_tokens") or 4)
        if body.get("stream"):
            return "stream"
        return {"choices": [{"index": 0, "text": "".join(f"tok{i} " for i in range(n)),
                             "finish_reason": "length"}],
                "served_by": stub.name}

    async def _stream(self, request: web.Request, stub: Stub, body: dict) -> web.StreamResponse:
        n = int(body.get("max_tokens") or 4)
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for i in range(n):
            if stub.die_after is not None and i >= stub.die_after:
                raise ConnectionResetError("the stub dies mid-stream")
            chunk = {"choices": [{"index": 0, "text": f"tok{i} "}], "served_by": stub.name}
            await out.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(0)
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()
        return out


async def _healthy(request: web.Request) -> web.Response:
    return web.json_response({})


class Bad(Exception):
    """A hand-off the engine would not accept."""


def need(ok: bool, what: str) -> None:
    if not ok:
        raise Bad(what)


def dead_url() -> str:
    """A localhost URL where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def sse_texts(raw: bytes) -> list[str]:
    """The `text` of each SSE data event, in order ([DONE] ends it)."""
    out = []
    for line in raw.decode().split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:])["choices"][0]["text"])
    return out
