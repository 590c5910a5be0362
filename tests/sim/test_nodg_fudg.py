"""Behaviour of the nodg (vLLM / Sarathi-like) and fudg (DistServe-like) simulators."""

from __future__ import annotations

import numpy as np
import pytest

from hastune.config import parse_config
from hastune.evaluators.sim import Evaluation
from hastune.sim.fudg import place
from hastune.sim.instance import InstanceTiming
from tests.sim.replica_recipes import ECO_CLUSTER, recipe


def nodg(**kw):
    return parse_config({"architecture": "nodg", "tp": 1, "replicas": 8, **kw})


def fudg(**kw):
    return parse_config({"architecture": "fudg", "prefill_instances": 2, "decode_instances": 2,
                         "decode_tp": 2, **kw})


@pytest.fixture(scope="module")
def long_eval():
    return Evaluation(recipe("longbench", 400))


def test_chunked_prefill_bounds_decode_stalls(long_eval):
    rate = 2.0
    reqs = long_eval.requests_at(rate)
    chunked = long_eval.run(nodg(chunk_tokens=512), rate)
    whole = long_eval.run(nodg(chunk_tokens=None), rate)
    assert chunked.completed == whole.completed == len(reqs)
    # no iteration that carries prefill is longer than a full decode step plus one chunk
    tm = InstanceTiming(long_eval.profile, 1, 1, long_eval.recipe.cluster)
    L = float(reqs.prefill_tokens.max())
    bound = tm.mixed(tm.decode.max_batch, tm.kv_cap, 512, L * L - (L - 512) ** 2)
    assert chunked.extra["max_iteration_s"] <= bound
    # unchunked, a whole long prompt stalls every decoding request of its replica. (The mean
    # TPOT hardly changes: chunking spreads the same prefill work over more steps.)
    assert whole.extra["max_iteration_s"] > 3 * chunked.extra["max_iteration_s"]


def test_nodg_first_token_at_the_end_of_the_prompt(long_eval):
    run = long_eval.run(nodg(chunk_tokens=2048), 0.5)
    reqs = long_eval.requests_at(0.5)
    prof = long_eval.profile
    L = reqs.prefill_tokens
    assert np.all(run.ttft >= prof.prefill.latency(L, L * L) - 1e-9)
    # a prompt over the budget needs several iterations: TTFT grows with its length
    long = L > 6000
    assert run.ttft[long].mean() > 2 * run.ttft[L < 1500].mean()


def test_nodg_encodes_inline(audio_recipe):
    ev = Evaluation(audio_recipe, requests=300)
    run = ev.run(nodg(replicas=8), 10.0)
    assert run.completed == len(run.ttft) >= 300
    enc = ev.requests_at(10.0, len(run.ttft)).encoder_tokens
    assert np.all(run.ttft >= ev.profile.encode.latency(1, enc, enc * enc) - 1e-9)


def _fudg_eval(inter_GBps: float):
    cluster = {**ECO_CLUSTER, "gpus_per_node": 2, "inter_node": {"bandwidth_GBps": inter_GBps,
                                                                  "latency_us": 10}}
    return Evaluation(recipe("sharegpt", 300, cluster=cluster))


def test_fudg_pays_transfer_time_that_grows_as_bandwidth_shrinks():
    cfg = fudg(decode_tp=1, placement="grouped")  # prefill on node 0, decode on node 1
    assert place(cfg) == ([0, 1], [2, 3])
    waits = []
    for bw in (50.0, 5.0, 0.5):
        ev = _fudg_eval(bw)
        reqs = ev.requests_at(1.0)
        run = ev.simulator(cfg).run(reqs, 1.0)  # these requests, no more (a probe may go on)
        L = reqs.prefill_tokens
        moved = reqs.output_tokens > 1
        kv = L * InstanceTiming(ev.profile, 1, 1, ev.recipe.cluster).kv_bytes_per_token
        assert run.extra["network_GB"] == pytest.approx(float((kv * moved).sum()) / 1e9)
        pre = ev.profile.prefill.latency(L, L * L)
        # TTFT ends when the KV has arrived: at least prefill + bytes / bandwidth
        assert np.all((run.ttft - pre - kv / (bw * 1e9))[moved] >= -1e-9)
        waits.append(float(np.median(run.ttft - pre)))
    assert waits[0] < waits[1] < waits[2]


def test_fudg_interleaved_keeps_kv_inside_nodes():
    ev = _fudg_eval(0.5)
    assert place(fudg(decode_tp=1, placement="interleaved")) == ([0, 2], [1, 3])  # pd | pd
    slow = ev.run(fudg(decode_tp=1, placement="grouped"), 2.0)
    local = ev.run(fudg(decode_tp=1, placement="interleaved"), 2.0)
    assert local.percentile("ttft", 90) < 0.5 * slow.percentile("ttft", 90)


def test_fudg_encode_times_are_the_per_request_floats(audio_recipe):
    """A fudg run computes inline encode times once, as an array: the same floats as one call
    per request; 0 for text requests (and no call at all when every request is text)."""
    import dataclasses

    from hastune.sim.fudg import encode_times

    ev = Evaluation(audio_recipe, requests=300)
    enc_tok = ev.requests.encoder_tokens.copy()
    enc_tok[::3] = 0
    reqs = dataclasses.replace(ev.requests, encoder_tokens=enc_tok)
    tm = InstanceTiming(ev.profile, 1, 1, audio_recipe.cluster)
    assert encode_times(reqs, tm) == [tm.encode_latency(1, x, x * x) if x > 0 else 0.0
                                      for x in enc_tok.tolist()]
    text = dataclasses.replace(reqs, encoder_tokens=0 * enc_tok)
    assert encode_times(text, None) == [0.0] * len(reqs)  # type: ignore[arg-type]


def test_duplex_links_serialise_transfers_into_one_gpu():
    from hastune.cluster import Cluster
    from hastune.sim.links import DuplexNetwork
    from hastune.sim.network import Network

    c = Cluster(gpu="a800-80gb", gpus=8, gpus_per_node=8,
                intra_node={"bandwidth_GBps": 10, "latency_us": 0})
    one_way, both = Network(c, 8), DuplexNetwork(c, 8)
    # two senders, one receiver, 1 GB each at 10 GB/s
    assert [one_way.transfer(s, 7, 1e9, 0.0) for s in (0, 1)] == [0.1, 0.1]
    assert [both.transfer(s, 7, 1e9, 0.0) for s in (0, 1)] == [0.1, 0.2]
    assert both.transfer(2, 3, 1e9, 0.0) == 0.1  # other ports are free


def test_shipped_ecoserve_examples_validate(root):
    from hastune.cli.validate import validate_file

    files = sorted((root / "examples" / "ecoserve").rglob("*.yaml"))
    assert len(files) >= 8
    for f in files:
        kind, _ = validate_file(f)
        assert kind in ("recipe", "deployment"), f
