"""The encode → prefill → decode hand-off as each engine's E/P/D protocol needs it.

vLLM 0.33.0 — mirrors vLLM's EPD proxy, examples/disaggregated/disaggregated_encoder/
disagg_epd_proxy.py (read at 7e4cd77021afa2d7298f9e6836dc789517b01925, where it sat under
examples/online_serving/, and at da94e34ca2e5ede302712e380e8a19bc944f5df1; which of the two
the 0.33.0 release matches was not pinned down: the prefill and decode fields are the same in
both, the encode request differs as said below):

1. encode: one POST {encode}/v1/chat/completions per media item (`image_url`, `audio_url`,
   `input_audio`, `video_url`), all to the request's encode server (the proxy spreads them
   round-robin; EAServe keeps them beside the co-resident prefill), with the text removed:
   {"model", "messages": [{"role": "user", "content": [item]}], "max_tokens": 1,
   "stream": false}, header x-request-id "<rid>:<index>:<hex>" (as at 7e4cd770; the later
   proxy drops max_tokens, its encoder never samples, and adds a content hash as the item's
   "uuid", batching a request's images per encoder). The encoder (--mm-encoder-only,
   ec_producer) publishes the embedding through the EC connector; the later proxy also reads
   `ec_transfer_params` from its answer and carries them on to the consumers, which this does
   too when present.
2. prefill: the original body with stream false, max_tokens 1 (max_completion_tokens 1 where
   set), no stream_options, and kv_transfer_params {"do_remote_decode": true,
   "do_remote_prefill": false, "remote_engine_id": null, "remote_block_ids": null,
   "remote_host": null, "remote_port": null} (the NixlConnector's producer side).
3. decode: the original body with the `kv_transfer_params` the prefill answered with; its
   stream is the client's.

SGLang 0.5.23 — an encoder-only server is called by the language-only prefill server itself
(its --encoder-urls; python/sglang/srt/disaggregation/encode_receiver.py), so the gateway sends
nothing to encoders: it decides when a multimodal request goes on (the micro-batch release)
and through which prefill server. Prefill and decode mirror SGLang's mini load balancer,
python/sglang/srt/disaggregation/mini_lb.py (sgl-project/sglang at
001c2ae0901cd353c26fed2f435887c867b73eed): the same body, with "bootstrap_host" (the prefill
server's host), "bootstrap_port" (its --disaggregation-bootstrap-port) and "bootstrap_room"
(random in [0, 2^63 − 1]), is POSTed to the prefill and the decode server at once, on the
client's endpoint; the decode server's answer is the client's.
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

MM_TYPES = ("image_url", "audio_url", "input_audio", "video_url")
VLLM_PREFILL_KV = {"do_remote_decode": True, "do_remote_prefill": False,
                   "remote_engine_id": None, "remote_block_ids": None, "remote_host": None,
                   "remote_port": None}
ROOM_MAX = 2 ** 63 - 1


class BackendError(Exception):
    """A server of the deployment failed a request: it is named in the client's error."""

    def __init__(self, role: str, url: str, status: int | None, detail: str):
        self.role, self.url, self.status, self.detail = role, url, status, detail[:2000]
        what = f"answered {status}" if status is not None else "could not be reached"
        super().__init__(f"{role} server {url} {what}: {self.detail}")

    @property
    def client_status(self) -> int:
        """A 4xx of the engine is the client's request's fault (passed on); anything else is
        the gateway's backend failing (502)."""
        return self.status if self.status is not None and 400 <= self.status < 500 else 502


def media_items(body: dict) -> list[dict]:
    """Every media item of a chat request's messages (none for /v1/completions)."""
    out = []
    for msg in body.get("messages") or ():
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            out += [c for c in content if isinstance(c, dict) and c.get("type") in MM_TYPES]
    return out


class Upstream:
    """aiohttp calls to the deployment's servers; every failure becomes a BackendError."""

    def __init__(self, session: Any):
        self.session = session

    async def post_json(self, role: str, url: str, path: str, body: dict,
                        headers: dict | None = None) -> dict:
        import aiohttp

        try:
            async with self.session.post(url + path, json=body, headers=headers) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise BackendError(role, url, resp.status, text)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise BackendError(role, url, None, f"{type(exc).__name__}: {exc}") from None
        try:
            out = json.loads(text) if text else {}
        except ValueError:
            raise BackendError(role, url, 200, "the answer is not JSON") from None
        return out if isinstance(out, dict) else {}

    async def open(self, role: str, url: str, path: str, body: dict,
                   headers: dict | None = None) -> Any:
        """The response (status 200) with its body still to read; the caller releases it."""
        import aiohttp

        try:
            resp = await self.session.post(url + path, json=body, headers=headers)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise BackendError(role, url, None, f"{type(exc).__name__}: {exc}") from None
        if resp.status != 200:
            try:
                text = await resp.text()
            except Exception:  # noqa: BLE001 - the status says enough
                text = "<unreadable body>"
            finally:
                resp.release()
            raise BackendError(role, url, resp.status, text)
        return resp


Done = Callable[[], None]


class VLLMHandoff:
    name = "vllm"
    calls_encoders = True

    async def encode(self, up: Upstream, url: str, body: dict, rid: str,
                     headers: dict) -> dict:
        """Encode every media item on encode server `url` (all at once); the fields the
        prefill and decode bodies gain (vLLM's ec_transfer_params, when the encoder reports
        any)."""
        calls = []
        for k, item in enumerate(media_items(body)):
            req = {"model": body.get("model"),
                   "messages": [{"role": "user", "content": [item]}],
                   "max_tokens": 1, "stream": False}
            h = {**headers, "x-request-id": f"{rid}:{k}:{uuid.uuid4().hex[:6]}"}
            calls.append(up.post_json("encode", url, "/v1/chat/completions", req, h))
        ec: dict = {}
        for out in await asyncio.gather(*calls):
            params = out.get("ec_transfer_params")
            if isinstance(params, dict):
                ec.update(params)
        return {"ec_transfer_params": ec} if ec else {}

    async def prefill_decode(self, up: Upstream, path: str, body: dict, rid: str,
                             prefill: Any, decode: Any, prefill_done: Done) -> Any:
        pre = copy.deepcopy(body)
        pre["kv_transfer_params"] = dict(VLLM_PREFILL_KV)
        pre["stream"] = False
        pre["max_tokens"] = 1
        if "max_completion_tokens" in pre:
            pre["max_completion_tokens"] = 1
        pre.pop("stream_options", None)
        headers = {"x-request-id": rid}
        try:
            out = await up.post_json("prefill", prefill.url, path, pre, headers)
        finally:
            prefill_done()
        dec = dict(body)
        kv = out.get("kv_transfer_params")
        if kv:
            dec["kv_transfer_params"] = kv
        return await up.open("decode", decode.url, path, dec, headers)


class SGLangHandoff:
    name = "sglang"
    calls_encoders = False  # the language-only prefill server calls its --encoder-urls

    async def encode(self, up: Upstream, url: str, body: dict, rid: str,
                     headers: dict) -> dict:
        return {}

    async def prefill_decode(self, up: Upstream, path: str, body: dict, rid: str,
                             prefill: Any, decode: Any, prefill_done: Done) -> Any:
        host = urlsplit(prefill.url).hostname or ""
        if ":" in host:  # an IPv6 address, bracketed as SGLang's maybe_wrap_ipv6_address does
            host = f"[{host}]"
        req = {**body, "bootstrap_host": host, "bootstrap_port": prefill.bootstrap_port,
               "bootstrap_room": random.randint(0, ROOM_MAX)}
        headers = {"x-request-id": rid}
        pre = asyncio.ensure_future(up.post_json("prefill", prefill.url, path, req, headers))
        pre.add_done_callback(lambda _: prefill_done())
        pre.add_done_callback(_quiet)
        dec = asyncio.ensure_future(up.open("decode", decode.url, path, req, headers))
        # on until both answered or one failed: a failed prefill is the client's 502 before
        # anything streams (its decode would only wait for a KV cache that never comes), and
        # the first token cannot come before the prefill is done anyway
        try:
            await asyncio.wait((pre, dec), return_when=asyncio.FIRST_EXCEPTION)
        except BaseException:
            pre.cancel()
            dec.cancel()
            dec.add_done_callback(_close)
            raise
        for task in (pre, dec):
            if task.done() and not task.cancelled() and task.exception() is not None:
                for other in (pre, dec):
                    other.cancel()
                dec.add_done_callback(_close)
                raise task.exception()  # type: ignore[misc]
        return dec.result()


def _quiet(task: asyncio.Future) -> None:
    """Retrieve a failed task's exception (the one raised is the first; asyncio would log the
    other as never retrieved)."""
    if not task.cancelled():
        task.exception()


def _close(task: asyncio.Future) -> None:
    """A decode response opened for a request that failed elsewhere: released."""
    if not task.cancelled() and task.exception() is None:
        task.result().release()


HANDOFFS = {"vllm": VLLMHandoff, "sglang": SGLangHandoff}
