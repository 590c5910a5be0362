"""Least-in-flight balance, admission that sheds explicitly (429 past max_inflight, 503 from
the TTFT gate), and failures that name the server: a dead backend gives 502, a decode server
that dies mid-stream ends the stream with an error event. Held decode stubs keep requests in
flight; the waits for them are failure detectors, not timing assertions."""

from __future__ import annotations

import asyncio
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.gateway.harness import chat, config, deploy, gateway, send
from tests.gateway.stubs import dead_url

WAIT_S = 10.0


async def _arrived(stubs, n: int) -> None:
    """Until the stubs together received n requests."""
    async def poll():
        while sum(len(s.received) for s in stubs) < n:
            await asyncio.sleep(0.005)
    await asyncio.wait_for(poll(), WAIT_S)


def _hold(stubs) -> asyncio.Event:
    ev = asyncio.Event()
    for s in stubs:
        s.hold = ev
    return ev


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 4), st.integers(1, 9), st.sampled_from(["vllm", "sglang"]))
def test_decode_is_least_in_flight(n_D: int, n: int, engine: str) -> None:
    async def go():
        dep = await deploy(engine, 1, 1, n_D)
        try:
            async with gateway(config(dep, 1, 0.5)) as (url, rt, client):
                hold = _hold(dep.role("decode"))
                calls = [asyncio.ensure_future(send(client, url, chat(k, 0, True), f"r{k}"))
                         for k in range(n)]
                await _arrived(dep.role("decode"), n)
                counts = [len(d.received) for d in dep.role("decode")]
                inflight = list(rt.decode.inflight)
                hold.set()
                answers = await asyncio.gather(*calls)
                return counts, inflight, answers, rt.snapshot()
        finally:
            await dep.close()

    counts, inflight, answers, snap = asyncio.run(go())
    assert counts == inflight  # what the router counts is what the servers hold
    assert max(counts) - min(counts) <= 1 and sum(counts) == n
    assert all(status == 200 for status, _ in answers)
    assert snap["in_flight"] == 0 and all(v == 0 for v in
                                          snap["in_flight_per_server"]["decode"].values())


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), st.integers(1, 4))
def test_past_max_inflight_requests_are_shed_with_429(limit: int, extra: int) -> None:
    async def go():
        dep = await deploy("vllm", 1, 1, 1)
        try:
            cfg = config(dep, 2, 0.5, admission={"max_inflight": limit})
            async with gateway(cfg) as (url, rt, client):
                hold = _hold(dep.role("decode"))
                first = [asyncio.ensure_future(send(client, url, chat(k, 1, True), f"r{k}"))
                         for k in range(limit)]
                await _arrived(dep.role("decode"), limit)
                shed = await asyncio.gather(*(send(client, url, chat(k, 1, False), f"x{k}")
                                              for k in range(extra)))
                hold.set()
                done = await asyncio.gather(*first)
                return shed, done, rt.snapshot()
        finally:
            await dep.close()

    shed, done, snap = asyncio.run(go())
    assert all(status == 200 for status, _ in done)
    for status, raw in shed:
        err = json.loads(raw)["error"]
        assert status == 429 and err["type"] == "overloaded" and err["reason"] == "max_inflight"
        assert "max_inflight" in err["message"]
    # every request ended completed or explicitly shed
    assert snap["admitted"] == snap["completed"] == limit
    assert snap["shed"] == {"max_inflight": extra} and snap["failed"] == 0


def test_the_ttft_gate_sheds_with_503() -> None:
    async def go():
        dep = await deploy("sglang", 1, 1, 1)
        try:
            cfg = config(dep, 1, 0.5, admission={"ttft_slo_s": 1.0, "prior": 1})
            async with gateway(cfg) as (url, rt, client):
                hold = _hold(dep.role("decode"))
                first = asyncio.ensure_future(send(client, url, chat(0, 0, True), "r0"))
                await _arrived(dep.role("decode"), 1)
                second = await send(client, url, chat(1, 0, True), "r1")
                hold.set()
                return await first, second, rt.snapshot()
        finally:
            await dep.close()

    first, (status, raw), snap = asyncio.run(go())
    assert first[0] == 200
    err = json.loads(raw)["error"]
    assert status == 503 and err["reason"] == "ttft_slo" and "rejected at arrival" in err["message"]
    assert snap["shed"] == {"ttft_slo": 1} and snap["completed"] == 1


def _dead(engine: str, role: str):
    async def go():
        dep = await deploy(engine, 1, 1, 1)
        try:
            cfg = config(dep, 1, 1.0)
            gone = dead_url()
            if role == "decode":
                cfg["decode"] = [gone]
            elif role == "prefill":
                cfg["prefill"] = [{"url": gone, "bootstrap_port": 9999}
                                  if engine == "sglang" else gone]
                dep.bootstrap[9999] = "gone"  # the decode stub takes it: only the prefill fails
            else:
                cfg["encode"][0]["url"] = gone
            async with gateway(cfg) as (url, rt, client):
                status, raw = await send(client, url, chat(0, 1, True), "r0")
                return gone, status, raw, rt.snapshot()
        finally:
            await dep.close()
    return asyncio.run(go())


def test_a_dead_backend_gives_502_naming_it() -> None:
    for engine, role in (("vllm", "encode"), ("vllm", "prefill"), ("vllm", "decode"),
                         ("sglang", "prefill"), ("sglang", "decode")):
        gone, status, raw, snap = _dead(engine, role)
        err = json.loads(raw)["error"]
        assert status == 502, (engine, role, raw)
        assert err["server"] == gone and err["role"] == role and gone in err["message"]
        assert snap["failed"] == 1 and snap["completed"] == 0 and snap["in_flight"] == 0
        for servers in snap["in_flight_per_server"].values():
            assert all(v == 0 for v in servers.values()), (engine, role, snap)


def test_a_decode_server_dying_mid_stream_ends_the_stream_with_its_name() -> None:
    async def go():
        dep = await deploy("vllm", 1, 1, 1)
        dep.role("decode")[0].die_after = 2
        try:
            async with gateway(config(dep, 1, 1.0)) as (url, rt, client):
                status, raw = await send(client, url, chat(0, 0, True, tokens=5), "r0")
                return dep.role("decode")[0].url, status, raw, rt.snapshot()
        finally:
            await dep.close()

    d_url, status, raw, snap = asyncio.run(go())
    events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    assert status == 200 and len(events) == 3  # two tokens, then the error
    err = json.loads(events[-1])["error"]
    assert err["server"] == d_url and err["role"] == "decode"
    assert snap["failed"] == 1 and snap["in_flight"] == 0
