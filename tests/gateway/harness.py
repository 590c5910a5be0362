"""A gateway over stub servers, in-process on ephemeral localhost ports (see stubs.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web

from runners.gateway.config import parse_gateway_config
from runners.gateway.runtime import Runtime
from runners.gateway.server import RUNTIME, build_app
from tests.gateway.stubs import Deployment

BOOT = 9000  # SGLang bootstrap ports are only labels here: nothing binds them


async def deploy(engine: str, n_E: int, n_P: int, n_D: int, paired: list[bool] | None = None
                 ) -> Deployment:
    """Stub servers: n_E encode (each with a co-resident prefill where `paired` says, all by
    default), n_P remote prefill, n_D decode."""
    dep = Deployment(engine)
    paired = paired if paired is not None else [True] * n_E
    boot = iter(range(BOOT, BOOT + 1000))
    for e in range(n_E):
        await dep.add("encode", f"E{e}")
        if paired[e]:
            await dep.add("prefill", f"L{e}", next(boot) if engine == "sglang" else None)
    for p in range(n_P):
        await dep.add("prefill", f"P{p}", next(boot) if engine == "sglang" else None)
    for d in range(n_D):
        await dep.add("decode", f"D{d}")
    return dep


def config(dep: Deployment, B: int, s: float, **more: Any) -> dict:
    """The gateway config of a stub deployment."""
    by = {x.name: x for x in dep.stubs}

    def server(stub):
        return ({"url": stub.url, "bootstrap_port": stub.bootstrap_port}
                if stub.bootstrap_port is not None else stub.url)

    encode = [{"url": e.url, "prefill": server(by[f"L{e.name[1:]}"])
               if f"L{e.name[1:]}" in by else None} for e in dep.role("encode")]
    prefill = [server(p) for p in dep.role("prefill") if p.name.startswith("P")]
    cfg = {"engine": dep.engine, "model": "stub-model", "encode": encode, "prefill": prefill,
           "decode": [d.url for d in dep.role("decode")], "B": B, "s": s,
           "batcher": {"max_gap_ms": 20.0}}
    cfg.update(more)
    return cfg


@contextlib.asynccontextmanager
async def gateway(cfg: dict) -> AsyncIterator[tuple[str, Runtime, aiohttp.ClientSession]]:
    """(base URL, its runtime, a client session) of a gateway serving `cfg`."""
    app = build_app(parse_gateway_config(cfg, "gateway.yaml"))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as client:
            yield url, app[RUNTIME], client
    finally:
        await runner.cleanup()


def chat(k: int, mm: int, stream: bool, tokens: int = 4) -> dict:
    """A chat request with `mm` media items (0: text only)."""
    content: list = [{"type": "text", "text": f"request {k}"}]
    content += [{"type": "image_url", "image_url": {"url": f"http://img/{k}/{i}.png"}}
                for i in range(mm)]
    body = {"model": "stub-model", "messages": [{"role": "user", "content": content}],
            "max_tokens": tokens, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


async def send(client: aiohttp.ClientSession, url: str, body: dict, rid: str,
               path: str = "/v1/chat/completions") -> tuple[int, bytes]:
    async with client.post(url + path, json=body, headers={"x-request-id": rid}) as r:
        return r.status, await r.read()
