"""A stand-in for `vllm serve` and `nvidia-cuda-mps-control` on a machine without GPUs, for the
end-to-end test of an export (tests/e2e/test_launch.py): the scripts hastune writes start these
as they would start vLLM 0.33.0, and the hastune gateway in front talks to them.

`python -m tests.e2e.stub_vllm serve MODEL --port P ...` serves, on P, /health and
/v1/chat/completions in the role its flags give it (--mm-encoder-only: encode; a
--kv-transfer-config kv_producer: prefill, kv_consumer: decode), answering as vLLM's E/P/D
servers do and refusing (400) a hand-off without the fields the gateway must send: a prefill
without the NixlConnector's producer kv_transfer_params and max_tokens 1, a decode without the
kv_transfer_params a prefill server answered. Every start and request is a JSON line in
$STUB_LOG. `python -m tests.e2e.stub_vllm mps [-d]` logs an MPS control call (and its stdin)."""

from __future__ import annotations

import json
import os
import sys
import time


def log(entry: dict) -> None:
    with open(os.environ["STUB_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps({**entry, "pid": os.getpid(), "t": time.time()}) + "\n")


def flags(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for i, a in enumerate(argv):
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[a] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def role_of(f: dict) -> str:
    if "--mm-encoder-only" in f:
        return "encode"
    kv = json.loads(f.get("--kv-transfer-config") or "{}")
    return {"kv_producer": "prefill", "kv_consumer": "decode"}.get(kv.get("kv_role"), "replica")


def serve(argv: list[str]) -> None:
    from aiohttp import web

    f = flags(argv)
    port, role = int(f["--port"]), role_of(f)
    name = f"{role}:{port}"
    env = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY",
                                          "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                                          "VLLM_NIXL_SIDE_CHANNEL_PORT")}
    log({"event": "start", "server": name, "role": role, "argv": argv, "env": env})

    async def health(_req: web.Request) -> web.Response:
        return web.Response(text="ok")

    def bad(why: str) -> web.Response:
        log({"event": "refused", "server": name, "why": why})
        return web.json_response({"error": why}, status=400)

    async def chat(req: web.Request) -> web.StreamResponse:
        body = await req.json()
        kv = body.get("kv_transfer_params")
        log({"event": "request", "server": name, "role": role, "kv": kv,
             "stream": body.get("stream"), "max_tokens": body.get("max_tokens"),
             "items": sum(1 for m in body.get("messages", []) if isinstance(m.get("content"),
                                                                          list)
                          for c in m["content"] if c.get("type") != "text")})
        if role == "encode":
            return web.json_response({"id": "e", "choices": [{"index": 0, "message": {
                "role": "assistant", "content": ""}}]})
        if role == "prefill":
            if not (isinstance(kv, dict) and kv.get("do_remote_decode") is True
                    and body.get("max_tokens") == 1 and not body.get("stream")):
                return bad("prefill without the producer's kv_transfer_params / max_tokens 1")
            return web.json_response({"id": "p", "choices": [{"index": 0, "message": {
                "role": "assistant", "content": "x"}}], "kv_transfer_params": {
                "do_remote_prefill": True, "do_remote_decode": False,
                "remote_engine_id": name, "remote_block_ids": [1],
                "remote_host": "127.0.0.1", "remote_port": port}})
        if role == "decode":
            if not (isinstance(kv, dict) and kv.get("do_remote_prefill") is True
                    and str(kv.get("remote_engine_id", "")).startswith("prefill:")):
                return bad("decode without a prefill server's kv_transfer_params")
            words = ["one", " two", " three"]
            if not body.get("stream"):
                return web.json_response({"id": "d", "choices": [{"index": 0, "message": {
                    "role": "assistant", "content": "".join(words)}}]})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(req)
            for w in words:
                chunk = {"id": "d", "choices": [{"index": 0, "delta": {"content": w}}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await resp.write(b"data: [DONE]\n\n")
            return resp
        return bad(f"no role for {argv}")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host=f.get("--host") or "127.0.0.1", port=port, print=None,
                handle_signals=True)


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["serve"]:
        serve(argv[2:])
    elif argv[:1] == ["mps"]:
        stdin = "" if "-d" in argv else sys.stdin.read()
        log({"event": "mps", "args": argv[1:], "stdin": stdin,
             "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES",
                                                    "CUDA_MPS_PIPE_DIRECTORY")}})
    else:
        sys.exit(f"stub_vllm: unknown command {argv}")


if __name__ == "__main__":
    main()
