"""A tuned config as engine-neutral launch units: which instances run which role on which GPUs
and ports, the knobs they take, and what no engine can express.

Three shapes of deployment exist in vLLM and SGLang: aggregated replicas behind a router
(`nodg`), prefill/decode disaggregation with a KV connector (`fudg`), and a disaggregated
encoder in front of P/D (`epd-static`, and `epd` when every prefill is remote). EAServe's
co-resident local prefill and its SM split (`epd` with s < 1) and EcoServe's temporal windows
(`padg`) have no counterpart: the plan says so (`blocking`), and `closest=True` maps them to
the nearest expressible shape, saying what changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from hastune.archs.base import ConfigBase

Role = Literal["encode", "prefill", "decode", "replica"]
Shape = Literal["aggregated", "pd", "epd"]
ROUTER_PORT = 8000
BASE_PORT = {"encode": 8100, "prefill": 8200, "decode": 8300, "replica": 8400}
SIDE_PORT = 5600      # vLLM NIXL side channel / SGLang bootstrap ports start here
BOOTSTRAP_PORT = 8998

MPS_NOTE = (
    "EAServe's SM split between an encoder and a co-resident local prefill: CUDA MPS "
    "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE per client process) can cap the SM share of an "
    "encode-only server and of a prefill server started on the same GPU, which approximates a "
    "fixed split only: EAServe chooses the split per encode batch against its latency budget "
    "(sm_budget), the two servers each hold their own weights and KV budget on the GPU, and "
    "neither engine sends a share s of prefills to a co-resident server; hastune emits no MPS "
    "setup")


@dataclass(frozen=True)
class Instance:
    role: Role
    index: int
    tp: int
    pp: int
    expert_parallel: bool
    gpus: tuple[int, ...]   # GPU ids on its node
    node: int
    port: int

    @property
    def name(self) -> str:
        return f"{self.role[0].upper()}{self.index}"


@dataclass
class Plan:
    shape: Shape
    instances: list[Instance]
    chunk_tokens: int | None = None        # token budget per iteration (None: no chunking)
    chunked: bool | None = None            # None: the engine's default
    encode_batch: int | None = None        # encode servers' most concurrent requests
    notes: list[str] = field(default_factory=list)      # knobs the engine does not take
    blocking: list[str] = field(default_factory=list)   # what makes it inexpressible
    closest: list[str] = field(default_factory=list)    # what --closest changed
    closest_config: dict[str, Any] | None = None        # it as a hastune config (to evaluate)
    nodes: int = 1

    def role(self, role: Role) -> list[Instance]:
        return [i for i in self.instances if i.role == role]

    @property
    def roles(self) -> list[Role]:
        return [r for r in ("encode", "prefill", "decode", "replica") if self.role(r)]


def _layout(pools: list[tuple[Role, int, int, int, bool]], gpus_per_node: int) -> list[Instance]:
    """Instances in role order, each on consecutive GPUs that stay inside one node."""
    out, nxt = [], 0
    for role, n, tp, pp, ep in pools:
        for i in range(n):
            size = tp * pp
            if nxt % gpus_per_node + size > gpus_per_node and size <= gpus_per_node:
                nxt += gpus_per_node - nxt % gpus_per_node  # start on the next node
            node, first = divmod(nxt, gpus_per_node)
            out.append(Instance(role, i, tp, pp, ep, tuple(range(first, first + size)), node,
                                BASE_PORT[role] + i))
            nxt += size
    return out


def plan(cfg: ConfigBase, gpus_per_node: int = 8, closest: bool = False) -> Plan:
    d: dict[str, Any] = cfg.model_dump()
    a = cfg.architecture
    if a == "nodg":
        p = Plan("aggregated", _layout([("replica", d["replicas"], d["tp"], d["pp"],
                                         d.get("expert_parallel", False))], gpus_per_node),
                 chunk_tokens=d["chunk_tokens"], chunked=d["chunk_tokens"] is not None)
    elif a == "padg":
        p = _padg(d, gpus_per_node, closest)
    elif a == "fudg":
        p = Plan("pd", _layout([("prefill", d["prefill_instances"], d["prefill_tp"],
                                 d["prefill_pp"], d.get("prefill_expert_parallel", False)),
                                ("decode", d["decode_instances"], d["decode_tp"],
                                 d["decode_pp"], d.get("decode_expert_parallel", False))],
                               gpus_per_node))
        if d["placement"] == "interleaved" and cfg.gpus > gpus_per_node:
            p.notes.append("placement: interleaved spreads both pools over every node; the "
                           "scripts place the prefill pool first, then the decode pool")
    elif a == "epd-static":
        p = _epd(d, gpus_per_node, d["batch"])
        p.notes.append(f"timeout_ms = {d['timeout_ms']:g}: an encode batch leaving "
                       f"{d['timeout_ms']:g} ms after its first request has no engine flag; "
                       "the encode servers batch whatever is queued")
    elif a == "epd":
        p = _easerve(d, gpus_per_node, closest)
    else:
        p = Plan("aggregated", [], blocking=[f"architecture {a} has no export"])
    p.nodes = 1 + max((i.node for i in p.instances), default=0)
    wide = [i for i in p.instances if i.tp * i.pp > gpus_per_node]
    if wide:
        p.blocking.append(f"{wide[0].name} spans nodes (tp {wide[0].tp} x pp {wide[0].pp} > "
                          f"{gpus_per_node} GPUs per node): start it with the engine's "
                          "multi-node options (vLLM --nnodes/--node-rank, SGLang --nnodes/"
                          "--node-rank) by hand")
    return p


def _epd(d: dict, gpn: int, batch: int) -> Plan:
    return Plan("epd", _layout([("encode", d["n_E"], d["tp_E"], 1, False),
                                ("prefill", d["n_P"], d["tp_P"], 1, False),
                                ("decode", d["n_D"], d["tp_D"], 1, False)], gpn),
                encode_batch=batch)


def _easerve(d: dict, gpn: int, closest: bool) -> Plan:
    s = d["s"]
    notes = [f"p = {d['p']:g} and max_gap_ms = {d['max_gap_ms']}: the encode batcher's "
             "Poisson-gap rule has no engine flag; B bounds the encode servers' concurrent "
             "requests"]
    if s >= 1.0:
        p = _epd(d, gpn, d["B"])
        p.notes += notes + ["s = 1: every prefill is remote, so the encode GPUs only encode "
                            "(sm_budget has nothing to split)"]
        return p
    block = [f"s = {s:g}: EAServe prefills a share 1 - s = {1 - s:g} of requests on the "
             "encode GPUs themselves (co-resident local prefill, SMs split by sm_budget = "
             f"{d['sm_budget']:g}); neither vLLM nor SGLang runs an encoder and a prefill that "
             "share a GPU's SMs in one deployment", MPS_NOTE,
             "the offload ratio s (share of prefills sent to the remote pool) has no engine "
             "flag: routers balance over the prefill servers they are given"]
    if not closest:
        return Plan("epd", [], blocking=block, notes=notes, encode_batch=d["B"])
    if d["n_P"] > 0 and s >= 0.5:
        p = _epd(d, gpn, d["B"])
        p.closest_config = {**_knobs(d), "s": 1.0}
        p.closest = [f"s = {s:g} -> 1: every prefill goes to the {d['n_P']} remote prefill "
                     f"instances; the {d['n_E']} encode instances only encode"]
    else:
        n_pre = d["n_E"] + d["n_P"]
        p = Plan("pd", _layout([("prefill", n_pre, d["tp_E"], 1, False),
                                ("decode", d["n_D"], d["tp_D"], 1, False)], gpn))
        p.closest_config = {"architecture": "fudg", "prefill_instances": n_pre,
                            "prefill_tp": d["tp_E"], "decode_instances": d["n_D"],
                            "decode_tp": d["tp_D"], "placement": "grouped"}
        p.closest = [f"the {d['n_E']} encode instances become prefill instances that encode "
                     "inline (what their local prefill did, time-shared instead of SM-split)"
                     + (f", beside the {d['n_P']} remote prefill instances" if d["n_P"] else "")
                     + f": P/D with {n_pre} prefill and {d['n_D']} decode instances"]
        if d["n_P"] and d["tp_P"] != d["tp_E"]:
            p.closest.append(f"tp_P = {d['tp_P']} -> tp_E = {d['tp_E']} for every prefill "
                             "instance")
    p.notes += notes
    p.blocking = []
    p.closest.insert(0, block[0])
    p.notes.append(MPS_NOTE)
    return p


def _knobs(d: dict) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in ("kind", "name")}


def _padg(d: dict, gpn: int, closest: bool) -> Plan:
    block = ["EcoServe's temporal disaggregation (each instance alternating prefill and "
             "decode windows, macro-instances of up to n_upper instances admitting requests "
             "and activating them in rolling order) has no vLLM or SGLang counterpart"]
    if d.get("mitosis"):
        block.append("mitosis (instances added and drained with the load) has no flag")
    if not closest:
        return Plan("aggregated", [], blocking=block)
    chunk = 512  # nodg's default budget, emitted as the engine's token budget
    p = Plan("aggregated", _layout([("replica", d["instances"], d["tp"], d["pp"],
                                     d.get("expert_parallel", False))], gpn),
             chunk_tokens=chunk, chunked=True)
    p.closest_config = {"architecture": "nodg", "replicas": d["instances"], "tp": d["tp"],
                        "pp": d["pp"], "chunk_tokens": chunk,
                        **({"expert_parallel": True} if d.get("expert_parallel") else {})}
    p.closest = [block[0], f"closest: {d['instances']} aggregated replicas of tp {d['tp']} x "
                 f"pp {d['pp']} behind a router, with the engine's chunked prefill ({chunk} "
                 "tokens a step) mixing prefill and decode in every step instead of in windows"]
    return p
