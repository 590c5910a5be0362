"""A tuned config as engine-neutral launch units: which instances run which role on which GPUs
and ports, the knobs they take, and what no engine can express.

The architecture says how its config deploys (`Architecture.deployment`,
hastune/archs/deploy.py: the topology, its pools by role, what has no engine flag, what
blocks it and the closest expressible deployment); the plan places those pools' instances on
GPUs, nodes and ports.
"""

from __future__ import annotations

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


def _layout(pools: list[Pool], gpus_per_node: int) -> list[Instance]:
    """Instances in role order, each on consecutive GPUs that stay inside one node."""
    out, nxt = [], 0
    for pool in pools:
        for i in range(pool.instances):
            size = pool.tp * pool.pp
            if nxt % gpus_per_node + size > gpus_per_node and size <= gpus_per_node:
                nxt += gpus_per_node - nxt % gpus_per_node  # start on the next node
            node, first = divmod(nxt, gpus_per_node)
            out.append(Instance(pool.role, i, pool.tp, pool.pp, pool.expert_parallel,
                                tuple(range(first, first + size)), node,
                                BASE_PORT[pool.role] + i))
            nxt += size
    return out


def plan(cfg: ConfigBase, gpus_per_node: int = 8, closest: bool = False) -> Plan:
    dep = archs.of(cfg).deployment(cfg, gpus_per_node, closest)
    p = Plan(**{f.name: getattr(dep, f.name) for f in fields(dep)},
             instances=_layout(dep.pools, gpus_per_node))
    p.nodes = 1 + max((i.node for i in p.instances), default=0)
    wide = [i for i in p.instances if i.tp * i.pp > gpus_per_node]
    if wide:
        p.blocking.append(f"{wide[0].name} spans nodes (tp {wide[0].tp} x pp {wide[0].pp} > "
                          f"{gpus_per_node} GPUs per node): start it with the engine's "
                          "multi-node options (vLLM --nnodes/--node-rank, SGLang --nnodes/"
                          "--node-rank) by hand")
    return p
