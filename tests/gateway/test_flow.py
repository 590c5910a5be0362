"""The gateway over stub vLLM and SGLang servers, on generated deployments and request mixes:
every request completes, the hand-off fields are the engine's (the stubs reject any other),
DRR keeps the remote count within 1 of k·s, no encode release holds more than B and a release
arrives together, a local prefill runs beside the GPU that encoded it, streams keep their
order, and nothing is left in flight."""

from __future__ import annotations

import asyncio
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.harness import chat, config, deploy, gateway, send
from tests.gateway.stubs import sse_texts

SHARES = [0.0, 0.25, 0.5, 0.75, 1.0]


@st.composite
def setups(draw):
    n_E = draw(st.integers(1, 3))
    n_P = draw(st.integers(0, 2))
    s = draw(st.sampled_from(SHARES if n_P else [0.0]))
    mix = draw(st.lists(st.tuples(st.integers(0, 2), st.booleans(), st.integers(1, 5)),
                        min_size=1, max_size=10))
    return n_E, n_P, draw(st.integers(1, 2)), draw(st.integers(1, 4)), s, mix


async def _run(engine: str, n_E: int, n_P: int, n_D: int, B: int, s: float, mix: list):
    dep = await deploy(engine, n_E, n_P, n_D)
    try:
        async with gateway(config(dep, B, s)) as (url, rt, client):
            calls = [send(client, url, chat(k, mm, stream, tok), f"r{k}")
                     for k, (mm, stream, tok) in enumerate(mix)]
            answers = await asyncio.gather(*calls)
            snap = rt.snapshot()
    finally:
        await dep.close()
    assert not dep.errors, dep.errors
    for (_, stream, tok), (status, raw) in zip(mix, answers):
        assert status == 200, raw
        want = [f"tok{i} " for i in range(tok)]
        if stream:
            assert sse_texts(raw) == want  # every chunk, in the decode server's order
        else:
            assert json.loads(raw)["choices"][0]["text"] == "".join(want)
    return dep, snap


def _common(snap: dict, mix: list, B: int, s: float) -> None:
    k = len(mix)
    assert snap["completed"] == snap["admitted"] == k and snap["failed"] == 0
    assert snap["shed_total"] == 0 and snap["in_flight"] == 0
    # every encoder has a co-resident prefill, so every prefill went through the deficit router
    remote = snap["remote_prefills"]
    assert remote + snap["local_prefills"] == k
    assert 0 <= k * s - remote < 1, (k, s, remote)
    mm = sum(1 for m, _, _ in mix if m)
    sizes = {int(n): c for n, c in snap["encode_batch_sizes"].items()}
    assert sum(n * c for n, c in sizes.items()) == mm == snap["encode_requests"]
    assert max(sizes, default=0) <= B
    for role in snap["in_flight_per_server"].values():
        assert all(v == 0 for v in role.values()), snap["in_flight_per_server"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups())
def test_vllm_epd_flow(setup) -> None:
    n_E, n_P, n_D, B, s, mix = setup
    dep, snap = asyncio.run(_run("vllm", n_E, n_P, n_D, B, s, mix))
    _common(snap, mix, B, s)
    # each media item was encoded once, on the encode server its batch went to
    encoded = {}
    for e in dep.role("encode"):
        for _, rid, _, _ in e.received:
            encoded.setdefault(rid.split(":")[0], set()).add(e.name)
    assert all(len(v) == 1 for v in encoded.values())
    want = {f"r{k}": m for k, (m, _, _) in enumerate(mix) if m}
    got = {r: sum(1 for e in dep.role("encode") for _, rid, _, _ in e.received
                  if rid.split(":")[0] == r) for r in want}
    assert got == want
    # a local prefill of a media request ran on the encode GPU that encoded it
    for p in dep.role("prefill"):
        if p.name.startswith("L"):
            for _, rid, _, _ in p.received:
                if rid in encoded:
                    assert encoded[rid] == {"E" + p.name[1:]}, (rid, p.name)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setups())
def test_sglang_epd_flow(setup) -> None:
    n_E, n_P, n_D, B, s, mix = setup
    dep, snap = asyncio.run(_run("sglang", n_E, n_P, n_D, B, s, mix))
    _common(snap, mix, B, s)
    # SGLang's language-only prefill servers call the encoders: the gateway never does
    assert all(not e.received for e in dep.role("encode"))
    # every request reached one prefill and one decode server, with the same bootstrap room
    rooms = {}
    for x in dep.role("prefill") + dep.role("decode"):
        for _, rid, body, _ in x.received:
            rooms.setdefault(rid, set()).add(body["bootstrap_room"])
    assert len(rooms) == len(mix) and all(len(v) == 1 for v in rooms.values())


def test_completions_endpoint_and_text_only_requests_skip_the_encoders() -> None:
    async def go():
        dep = await deploy("vllm", 2, 1, 1)
        try:
            async with gateway(config(dep, 2, 0.5)) as (url, rt, client):
                body = {"model": "stub-model", "prompt": "hi", "max_tokens": 3, "stream": True}
                status, raw = await send(client, url, body, "c0", "/v1/completions")
                return dep, status, raw, rt.snapshot()
        finally:
            await dep.close()

    dep, status, raw, snap = asyncio.run(go())
    assert status == 200 and sse_texts(raw) == ["tok0 ", "tok1 ", "tok2 "]
    assert all(not e.received for e in dep.role("encode")) and snap["encode_batches"] == 0
    assert [p for x in dep.stubs for p, *_ in x.received] == ["/v1/completions"] * 2
