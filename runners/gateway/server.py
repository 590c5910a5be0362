"""The gateway's HTTP front (aiohttp): OpenAI-compatible routes over the Runtime.

POST /v1/chat/completions, /v1/completions  stream (the decode server's SSE, passed through)
                                            or not; shed: 429 / 503 with a JSON error;
                                            a server that fails: 502 naming it
GET  /v1/models                             the config's model
GET  /health                                every server's /health (503 if one fails)
GET  /metrics                               the runtime's counters (JSON)
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any

import aiohttp
from aiohttp import web

from runners.gateway.config import GatewayConfig
from runners.gateway.handoff import BackendError
from runners.gateway.runtime import Runtime, Shed

log = logging.getLogger(__name__)

RUNTIME: web.AppKey[Runtime] = web.AppKey("runtime", Runtime)
SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("session", aiohttp.ClientSession)
CONFIG: web.AppKey[GatewayConfig] = web.AppKey("config", GatewayConfig)


def error(status: int, message: str, kind: str, **more: Any) -> web.Response:
    """An OpenAI-style error body: {"error": {"message", "type", "code", …}}."""
    body = {"error": {"message": message, "type": kind, "code": status, **more}}
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return web.json_response(body, status=status, headers=headers)


def build_app(cfg: GatewayConfig) -> web.Application:
    app = web.Application()
    app[CONFIG] = cfg

    async def startup(app: web.Application) -> None:
        # vLLM closes an idle keep-alive connection after 5 s (VLLM_HTTP_TIMEOUT_KEEP_ALIVE),
        # aiohttp would keep it 15 s and fail the next request on it with
        # ServerDisconnectedError (vLLM's EPD proxy retires its own at half that): so here
        conn = aiohttp.TCPConnector(limit=0, keepalive_timeout=2.5)
        t = cfg.timeouts
        app[SESSION] = aiohttp.ClientSession(
            connector=conn, timeout=aiohttp.ClientTimeout(total=t.request_s, connect=t.connect_s))
        app[RUNTIME] = Runtime(cfg, app[SESSION])

    async def cleanup(app: web.Application) -> None:
        app[RUNTIME].close()
        await app[SESSION].close()

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app.router.add_post("/v1/chat/completions", _completions("/v1/chat/completions"))
    app.router.add_post("/v1/completions", _completions("/v1/completions"))
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    return app


def _completions(path: str):
    async def handle(request: web.Request) -> web.StreamResponse:
        return await _serve(request, path)
    return handle


async def _serve(request: web.Request, path: str) -> web.StreamResponse:
    rt = request.app[RUNTIME]
    try:
        body = await request.json()
    except ValueError:
        return error(400, "the request body is not JSON", "invalid_request_error")
    if not isinstance(body, dict):
        return error(400, "the request body is not a JSON object", "invalid_request_error")
    body.setdefault("model", rt.cfg.model)
    loop = asyncio.get_running_loop()
    try:
        n = rt.admit(loop.time())
    except Shed as shed:
        return error(shed.status, f"shed at admission: {shed.reason}", "overloaded",
                     reason=shed.kind)
    rid = request.headers.get("x-request-id") or f"gw-{uuid.uuid4().hex}"
    ok = False
    try:
        try:
            resp, d = await rt.start(path, body, rid)
        except BackendError as exc:
            log.warning("%s: %s", rid, exc)
            return error(exc.client_status, str(exc), "backend_error", server=exc.url,
                         role=exc.role, upstream_status=exc.status)
        try:
            if body.get("stream"):
                out, ok = await _stream(request, rt, n, resp, rt.cfg.decode[d].url)
                return out
            data = await resp.read()
            rt.first_token(n, loop.time())
            ok = True
            return web.Response(body=data, status=200,
                                content_type=resp.content_type or "application/json")
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:  # non-stream read failed
            url = rt.cfg.decode[d].url
            return error(502, f"decode server {url} failed mid-answer: {exc}", "backend_error",
                         server=url, role="decode", upstream_status=None)
        finally:
            resp.release()
            rt.end_decode(d)
    finally:
        rt.finished(n, ok)


async def _stream(request: web.Request, rt: Runtime, n: int, resp: Any,
                  url: str) -> tuple[web.StreamResponse, bool]:
    """Pass the decode server's stream through, bytes in order; a server that fails
    mid-stream ends it with an SSE error event naming it (the status was sent already)."""
    out = web.StreamResponse(status=200, headers={
        "Content-Type": resp.headers.get("Content-Type", "text/event-stream"),
        "Cache-Control": "no-cache"})
    await out.prepare(request)
    first = True
    try:
        async for chunk in resp.content.iter_any():
            if first:
                rt.first_token(n, asyncio.get_running_loop().time())
                first = False
            await out.write(chunk)
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        err = {"error": {"message": f"decode server {url} failed mid-stream: {exc}",
                         "type": "backend_error", "code": 502, "server": url,
                         "role": "decode"}}
        await out.write(b"data: " + json.dumps(err).encode() + b"\n\n")
        await out.write_eof()
        return out, False
    except ConnectionResetError:  # the client went: the decode response is released
        log.info("the client left mid-stream")
        return out, False
    await out.write_eof()
    return out, True


async def _models(request: web.Request) -> web.Response:
    cfg = request.app[CONFIG]
    return web.json_response({"object": "list", "data": [
        {"id": cfg.model, "object": "model", "owned_by": "hastune-gateway"}]})


async def _health(request: web.Request) -> web.Response:
    cfg, session = request.app[CONFIG], request.app[SESSION]
    servers = [("encode", e.url) for e in cfg.encode]
    servers += [("local_prefill", e.prefill.url) for e in cfg.encode if e.prefill is not None]
    servers += [("prefill", p.url) for p in cfg.prefill]
    servers += [("decode", d.url) for d in cfg.decode]

    async def one(url: str) -> str:
        try:
            async with session.get(url + "/health",
                                   timeout=aiohttp.ClientTimeout(total=5)) as r:
                return "healthy" if r.status == 200 else f"unhealthy ({r.status})"
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            return f"unreachable ({type(exc).__name__})"

    states = await asyncio.gather(*(one(u) for _, u in servers))
    report = [{"role": r, "url": u, "status": s} for (r, u), s in zip(servers, states)]
    healthy = all(s == "healthy" for s in states)
    return web.json_response({"gateway": "healthy", "healthy": healthy, "servers": report},
                             status=200 if healthy else 503)


async def _metrics(request: web.Request) -> web.Response:
    return web.json_response(request.app[RUNTIME].snapshot())


def run(cfg: GatewayConfig, host: str | None = None, port: int | None = None) -> None:
    """Serve until Ctrl-C."""
    h = host if host is not None else cfg.listen.host
    p = port if port is not None else cfg.listen.port
    web.run_app(build_app(cfg), host=h, port=p,
                print=lambda _: print(f"hastune gateway ({cfg.engine}) at http://{h}:{p}/v1",
                                      flush=True))
