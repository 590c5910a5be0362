"""A tuned config as engine-neutral launch units: which instances run which role on which GPUs
and ports, the knobs they take, and what no engine can express.

The architecture says how its config deploys (`Architecture.deployment`,
hastune/archs/deploy.py: the topology, its pools by role, what has no engine flag, what
blocks it and the closest expressible deployment); the plan places those pools' instances on
GPUs, nodes and ports.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

from hastune import archs
from hastune.archs.base import ConfigBase
from hastune.archs.deploy import ROLES, Deployment, Pool, Role

ROUTER_PORT = 8000
BASE_PORT = {"encode": 8100, "prefill": 8200, "decode": 8300, "replica": 8400}
SIDE_PORT = 5600      # vLLM NIXL side channel / SGLang bootstrap ports start here
BOOTSTRAP_PORT = 8998
ENCODER_BOOTSTRAP_PORT = 8600  # SGLang's encoder bootstrap server, one per language-only server


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
    # the SM share CUDA MPS gives it on GPUs it shares with another server (co-resident
    # encode and prefill servers), in percent; None: it has its GPUs alone
    mps_percent: int | None = None
    pair: int | None = None  # a co-resident prefill server's encode instance (its index)
    gpu_type: str | None = None  # its node's GPU type, on a cluster of several

    @property
    def name(self) -> str:
        return f"{self.role[0].upper()}{self.index}"


@dataclass
class Plan(Deployment):
    """A deployment with its pools' instances placed (`instances`, on `nodes` nodes)."""

    instances: list[Instance] = field(default_factory=list)
    nodes: int = 1
    model_blocking: list[str] = field(default_factory=list)  # the engine refuses the model

    def role(self, role: Role) -> list[Instance]:
        return [i for i in self.instances if i.role == role]

    @property
    def roles(self) -> list[Role]:
        return [r for r in ROLES if self.role(r)]

    @property
    def mps_gpus(self) -> dict[int, list[int]]:
        """Per node, the GPUs that hold two servers (co-resident under CUDA MPS), in order:
        what its MPS daemon is started on."""
        out: dict[int, list[int]] = {}
        for i in self.instances:
            if i.mps_percent is not None:
                have = out.setdefault(i.node, [])
                have += [g for g in i.gpus if g not in have]
        return {n: sorted(g) for n, g in out.items()}

    def visible_devices(self, inst: Instance) -> str:
        """CUDA_VISIBLE_DEVICES of an instance: its GPU ids, or for an MPS client their
        positions among its node's MPS GPUs (the daemon, started on those, renumbers them for
        its clients from 0)."""
        if inst.mps_percent is None:
            return ",".join(map(str, inst.gpus))
        mine = self.mps_gpus[inst.node]
        return ",".join(str(mine.index(g)) for g in inst.gpus)


def _layout(pools: list[Pool], gpus_per_node: int | dict[str, int],
            sm_split: float | None = None) -> list[Instance]:
    """Instances in role order, each on consecutive GPUs that stay inside one node; a
    co-resident pool's instances on the encode instances' GPUs (with `sm_split`, the encode
    server's SM share, in percent for CUDA MPS; the prefill server the rest)."""
    out: list[Instance] = []
    sizes = gpus_per_node if isinstance(gpus_per_node, dict) else {None: gpus_per_node}
    # each GPU type on nodes of its own, numbered type after type (a node holds one type)
    nxt = {}  # type → its next GPU, counted over its nodes
    first_node, n = {}, 0
    for t in sizes:
        first_node[t] = n
        n += 1024  # room for any count of a type's nodes; renumbered below
    split = None if sm_split is None else max(1, min(99, round(100 * sm_split)))
    for pool in pools:
        done = sum(1 for x in out if x.role == pool.role)  # numbered on within a role
        if pool.co_resident:
            for e, enc in enumerate(x for x in out if x.role == "encode"):
                out.append(Instance(pool.role, done + e, enc.tp, enc.pp, enc.expert_parallel,
                                    enc.gpus, enc.node, BASE_PORT[pool.role] + done + e,
                                    None if split is None else 100 - split, pair=enc.index))
            continue
        t = pool.gpu if pool.gpu in sizes else next(iter(sizes))
        gpn = sizes[t]
        for i in range(pool.instances):
            size = pool.tp * pool.pp
            at = nxt.get(t, 0)
            if at % gpn + size > gpn and size <= gpn:
                at += gpn - at % gpn  # start on the next node
            node, first = divmod(at, gpn)
            mps = split if pool.role == "encode" and any(p.co_resident for p in pools) else None
            out.append(Instance(pool.role, done + i, pool.tp, pool.pp, pool.expert_parallel,
                                tuple(range(first, first + size)), first_node[t] + node,
                                BASE_PORT[pool.role] + done + i, mps,
                                gpu_type=t if len(sizes) > 1 else None))
            nxt[t] = at + size
    # nodes numbered 0, 1, … over the ones used, type after type
    rank = {n: k for k, n in enumerate(sorted({x.node for x in out}))}
    return [dataclasses.replace(x, node=rank[x.node]) for x in out]


def _first_wide(pools: list[Pool], sizes: dict[str, int] | None, one: int
                ) -> tuple[str, int, int] | None:
    """The first instance `_layout` places over more GPUs than its node holds (a node of its
    pool's type, the first type's where the pool names none), as (name, tp, pp), found from
    the pools: a co-resident pool's instances are the encode instances' shapes, placed after
    them, so never the first (tests/export/test_plan_blocking.py holds it to the layout)."""
    done: dict[str, int] = {}
    for pool in pools:
        if pool.co_resident:
            done[pool.role] = done.get(pool.role, 0) + done.get("encode", 0)
            continue
        node = sizes.get(pool.gpu, one) if sizes else one
        if pool.instances and pool.tp * pool.pp > node:
            return f"{pool.role[0].upper()}{done.get(pool.role, 0)}", pool.tp, pool.pp
        done[pool.role] = done.get(pool.role, 0) + pool.instances
    return None


def plan(cfg: ConfigBase, gpus_per_node: int | dict[str, int] = 8,
         closest: bool = False, place: bool = True) -> Plan:
    """`gpus_per_node`: GPUs per node, or on a cluster of several GPU types each type's
    (its first type first, Cluster.node_sizes): then each pool's instances sit on its type's
    nodes, and each node's scripts start what it holds. `place` False: the plan without its
    instances (none, on one node) but with the same `blocking`, what pruning asks of every
    configuration (tests/export/test_plan_blocking.py)."""
    sizes = gpus_per_node if isinstance(gpus_per_node, dict) else None
    one = next(iter(sizes.values())) if sizes else gpus_per_node
    arch = archs.of(cfg)
    dep = arch.deployment(cfg, one, closest)  # type: ignore[arg-type]
    if sizes:  # each pool on its type: by role, as the config's GPU terms give them
        first = next(iter(sizes))
        of = {p.role: t for p, (t, _) in zip(arch.role_pools(cfg), cfg.pool_gpus(first))}
        dep.pools = [dataclasses.replace(p, gpu="" if p.co_resident else of.get(p.role, first))
                     for p in dep.pools]
    p = Plan(**{f.name: getattr(dep, f.name) for f in fields(dep)},
             instances=_layout(dep.pools, gpus_per_node, dep.sm_split) if place else [])
    p.nodes = 1 + max((i.node for i in p.instances), default=0)
    types = {t for t, n in cfg.pool_gpus("") if n}
    if len(types) > 1 and sizes is None:
        p.blocking.append("its pools sit on several GPU types (" + ", ".join(
            f"{k} = {getattr(cfg, k)}" for k in cfg.type_knobs if getattr(cfg, k))
            + "), and the target names one: export it from the best_config.yaml that tune "
            "wrote (its target: names each type's nodes)")
    wide = _first_wide(dep.pools, sizes, one)
    if wide:
        p.blocking.append(f"{wide[0]} spans nodes (tp {wide[1]} x pp {wide[2]} > "
                          f"{one} GPUs per node): start it with the engine's "
                          "multi-node options (vLLM --nnodes/--node-rank, SGLang --nnodes/"
                          "--node-rank) by hand")
    return p
