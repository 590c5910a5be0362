"""Cluster description: GPU types, budget, nodes, prices and the links between GPUs.

Two forms. The old one names one GPU type: `gpu`, `gpus` (the budget), `gpus_per_node` and
an optional `price_per_gpu_hour`. The inventory form lists the GPU types the cluster holds
(`inventory`: gpu, nodes, gpus_per_node, price_per_gpu_hour, intra_node each), `gpus` an
optional budget cap (default: every GPU of the inventory). With an inventory, `gpu` and
`gpus_per_node` are still filled, from its first entry, so code that knows one GPU type keeps
working; `types` gives the entries in both forms. A recipe of the old form dumps (and hashes)
as before: the new fields are left out where not given."""

from __future__ import annotations

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_serializer,
    model_validator,
)

MAX_GPUS = 100_000  # plausibility bound on a GPU budget (and on GPUs per node)
MAX_PRICE = 1e6     # plausibility bound on a price per GPU-hour

# Nominal one-direction bandwidths (GB/s) and per-message latencies (µs) of common links.
LINK_PRESETS: dict[str, tuple[float, float]] = {
    "pcie4": (25.0, 10.0),          # PCIe 4.0 x16, ~25 GB/s achievable
    "pcie5": (50.0, 8.0),           # PCIe 5.0 x16
    "nvlink-a100": (300.0, 3.0),    # NVLink 3 (600 GB/s bidirectional)
    "nvlink-h100": (450.0, 3.0),    # NVLink 4 (900 GB/s bidirectional)
    "10gbe": (1.25, 30.0),          # 10 Gb Ethernet, TCP
    "25gbe-roce": (3.125, 10.0),    # 25 Gb Ethernet with RoCE
    "100gbe-roce": (12.5, 8.0),
    "ib-200g": (25.0, 5.0),         # HDR InfiniBand
    "ib-400g": (50.0, 5.0),         # NDR InfiniBand
}


class Link(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    bandwidth_GBps: float = Field(ge=1e-6, le=1e6,
                                  description="one-direction bandwidth, GB/s (1e9 bytes/s)")
    latency_us: float = Field(ge=0, le=1e8, default=5.0)

    def seconds(self, nbytes: float) -> float:
        return self.latency_us * 1e-6 + nbytes / (self.bandwidth_GBps * 1e9)


def _link(v: object) -> object:
    if isinstance(v, str):
        if v not in LINK_PRESETS:
            raise ValueError(
                f"unknown link preset {v!r}. Fix: use one of {', '.join(LINK_PRESETS)} "
                "or {bandwidth_GBps: ..., latency_us: ...}"
            )
        bw, lat = LINK_PRESETS[v]
        return {"bandwidth_GBps": bw, "latency_us": lat}
    return v


class GpuType(BaseModel):
    """One GPU type of a cluster: how many nodes of it, and what an hour of one GPU costs."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    gpu: str = Field(min_length=1, max_length=100,
                     description="GPU type, e.g. a100-80gb; selects the profile")
    nodes: int = Field(gt=0, le=MAX_GPUS, strict=True)
    gpus_per_node: int = Field(gt=0, le=MAX_GPUS, strict=True, default=8)
    price_per_gpu_hour: float | None = Field(
        default=None, gt=0, le=MAX_PRICE,
        description="what one GPU of this type costs per hour (any currency; needed only by "
                    "the cost objectives)")
    intra_node: Link | None = Field(default=None,
                                    description="the link inside its nodes (default: the "
                                    "cluster's intra_node)")

    @field_validator("intra_node", mode="before")
    @classmethod
    def _preset(cls, v: object) -> object:
        return _link(v)

    @model_serializer(mode="wrap")
    def _dump(self, handler):  # what was not given stays out
        out = handler(self)
        for k in ("price_per_gpu_hour", "intra_node"):
            if out.get(k) is None:
                out.pop(k, None)
        return out

    @property
    def gpus(self) -> int:
        """GPUs of this type: nodes × gpus_per_node."""
        return self.nodes * self.gpus_per_node


def _valid_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_GPUS


def _valid_link(v: object) -> bool:
    try:
        Link.model_validate(_link(v))
    except (ValueError, TypeError):  # pydantic's ValidationError is a ValueError
        return False
    return True


class Cluster(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    gpu: str = Field(max_length=100, description="GPU type, e.g. a100-80gb; selects the profile "
                     "(with an inventory: its first entry's)")
    gpus: int = Field(gt=0, le=MAX_GPUS, strict=True, description="GPU budget G (with an "
                      "inventory: a cap, default every GPU it holds)")
    gpus_per_node: int = Field(gt=0, le=MAX_GPUS, strict=True, default=8)
    intra_node: Link = Field(default_factory=lambda: Link(**_link("pcie4")))  # type: ignore[arg-type]
    inter_node: Link = Field(default_factory=lambda: Link(**_link("25gbe-roce")))  # type: ignore[arg-type]
    price_per_gpu_hour: float | None = Field(
        default=None, gt=0, le=MAX_PRICE,
        description="what one GPU costs per hour (the one-type form; needed only by the cost "
                    "objectives)")
    inventory: list[GpuType] | None = Field(
        default=None, description="the GPU types the cluster holds (instead of gpu / "
        "gpus_per_node / price_per_gpu_hour)")

    @field_validator("intra_node", "inter_node", mode="before")
    @classmethod
    def _preset(cls, v: object) -> object:
        return _link(v)

    @model_validator(mode="before")
    @classmethod
    def _from_inventory(cls, data: object) -> object:
        """With an inventory: refuse the one-type fields beside it, and fill gpu,
        gpus_per_node (the first entry's) and gpus (the inventory's total, unless given) —
        from well-formed values only, so a bad entry is reported once, at the entry."""
        if not isinstance(data, dict) or data.get("inventory") is None:
            return data
        both = [k for k in ("gpu", "gpus_per_node", "price_per_gpu_hour") if k in data]
        if both:
            raise ValueError(
                f"inventory and {both[0]} are both given. Fix: give {both[0]} in each "
                f"inventory entry and drop cluster.{both[0]}, or drop the inventory (the "
                "one-type form: gpu, gpus, gpus_per_node)")
        inv = data["inventory"]
        entries = [e for e in inv if isinstance(e, dict)] if isinstance(inv, list) else []
        first = entries[0] if entries else {}
        gpu, gpn = first.get("gpu"), first.get("gpus_per_node", 8)
        data = {**data, "gpu": gpu if isinstance(gpu, str) and 0 < len(gpu) <= 100 else "?",
                "gpus_per_node": gpn if _valid_int(gpn) else 8}
        if "gpus" not in data:
            sizes = [(e.get("nodes"), e.get("gpus_per_node", 8)) for e in entries]
            ok = all(_valid_int(n) and _valid_int(g) for n, g in sizes)
            data["gpus"] = min(sum(n * g for n, g in sizes), MAX_GPUS) if ok and sizes else 1
        link = first.get("intra_node")
        if len(entries) == 1 and link is not None and _valid_link(link):
            data["intra_node"] = link  # one type: its link is the cluster's
        return data

    @field_validator("inventory")
    @classmethod
    def _entries(cls, v: list[GpuType] | None) -> list[GpuType] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("inventory is empty. Fix: list the GPU types, e.g. "
                             "[{gpu: h100-80gb, nodes: 1, gpus_per_node: 8}]")
        seen: dict[str, int] = {}
        for i, e in enumerate(v):
            if e.gpu in seen:
                raise ValueError(f"inventory lists GPU type {e.gpu} twice (entries "
                                 f"{seen[e.gpu]} and {i}). Fix: one entry per GPU type "
                                 "(add their nodes up)")
            seen[e.gpu] = i
        return v

    @model_validator(mode="after")
    def _budget(self) -> Cluster:
        if self.inventory is not None and self.gpus > self.total_gpus:
            raise ValueError(f"gpus ({self.gpus}) is more than the inventory holds "
                             f"({self.total_gpus}). Fix: give cluster.gpus ≤ "
                             f"{self.total_gpus}, or leave it out (every GPU of the inventory)")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler):  # the one-type form dumps as it always did (recipe hashes)
        out = handler(self)
        if self.inventory is None:
            out.pop("inventory", None)
            if self.price_per_gpu_hour is None:
                out.pop("price_per_gpu_hour", None)
        else:  # filled from the inventory: left out, so the dump reads back
            for k in ("gpu", "gpus_per_node", "price_per_gpu_hour"):
                out.pop(k, None)
        return out

    @property
    def types(self) -> tuple[GpuType, ...]:
        """The cluster's GPU types, each with its link inside a node resolved: the
        inventory's entries, or the one type of the one-type form (its nodes: enough for
        `gpus`)."""
        if self.inventory is None:
            nodes = -(-self.gpus // self.gpus_per_node)
            return (GpuType(gpu=self.gpu, nodes=nodes, gpus_per_node=self.gpus_per_node,
                            price_per_gpu_hour=self.price_per_gpu_hour,
                            intra_node=self.intra_node),)
        return tuple(e if e.intra_node is not None else
                     e.model_copy(update={"intra_node": self.intra_node})
                     for e in self.inventory)

    @property
    def total_gpus(self) -> int:
        """Every GPU the cluster holds (the one-type form: the budget)."""
        return sum(t.gpus for t in self.inventory) if self.inventory else self.gpus

    @property
    def mixed(self) -> bool:
        """Whether it holds more than one GPU type."""
        return len(self.types) > 1

    @property
    def gpu_field(self) -> str:
        """The recipe field that names `gpu` (the profile's GPU type)."""
        return "cluster.gpu" if self.inventory is None else "cluster.inventory[0].gpu"

    def price(self, gpu: str) -> float | None:
        """What one GPU of type `gpu` costs per hour (None: no price given)."""
        return next((t.price_per_gpu_hour for t in self.types if t.gpu == gpu), None)

    def price_field(self, gpu: str) -> str:
        """The recipe field that gives `gpu`'s price."""
        if self.inventory is None:
            return "cluster.price_per_gpu_hour"
        i = next(i for i, t in enumerate(self.inventory) if t.gpu == gpu)
        return f"cluster.inventory[{i}].price_per_gpu_hour"

    def unpriced(self) -> list[str]:
        """The GPU types without a price."""
        return [t.gpu for t in self.types if t.price_per_gpu_hour is None]

    @property
    def priced(self) -> bool:
        return not self.unpriced()

    def only(self, gpu: str) -> Cluster:
        """The one-type cluster of type `gpu` alone (its GPUs, within the budget): what a
        check of one GPU type (its profile, its search spaces) reads."""
        t = next(t for t in self.types if t.gpu == gpu)
        return Cluster(gpu=t.gpu, gpus=min(t.gpus, self.gpus), gpus_per_node=t.gpus_per_node,
                       intra_node=t.intra_node or self.intra_node, inter_node=self.inter_node,
                       price_per_gpu_hour=t.price_per_gpu_hour)

    @property
    def node_sizes(self) -> int | dict[str, int]:
        """GPUs per node; on several GPU types each type's, its first first (what
        hastune.export.plan lays a deployment out with)."""
        if len(self.types) < 2:
            return self.gpus_per_node
        return {t.gpu: t.gpus_per_node for t in self.types}

    def node_layout(self, pools: list[tuple[str, int]]) -> tuple[list[int], int]:
        """Pools on several GPU types, laid out as a simulator numbers its GPUs (pool after
        pool, `pools`: (type, GPUs) in that order): each GPU's id in a numbering where every
        node of every type has `per_node` slots (the largest gpus_per_node), so GPU // per_node
        is its node — each type on nodes of its own, filled in order — and per_node."""
        per_node = max(t.gpus_per_node for t in self.types)
        first_node, nodes = {}, 0
        for t in self.types:
            first_node[t.gpu] = nodes
            nodes += t.nodes
        used: dict[str, int] = {}
        out = []
        for gpu, n in pools:
            gpn = next(t.gpus_per_node for t in self.types if t.gpu == gpu)
            for _ in range(n):
                k = used.get(gpu, 0)
                used[gpu] = k + 1
                out.append((first_node[gpu] + k // gpn) * per_node + k % gpn)
        return out, per_node

    def node_of(self, gpu_index: int) -> int:
        return gpu_index // self.gpus_per_node
