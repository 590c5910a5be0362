"""Transfers between GPUs over the cluster's links, with contention.

An intra-node transfer occupies the sender GPU's port; an inter-node transfer occupies the
sending and the receiving node's NIC (shared by all GPUs of that node). Each port serves one
transfer at a time (FIFO), so concurrent transfers queue behind each other.
"""

from __future__ import annotations

from hastune.cluster import Cluster


class Network:
    __slots__ = ("per_node", "intra_bw", "intra_lat", "inter_bw", "inter_lat", "gpu_free",
                 "nic_free", "bytes_moved", "busy_s")

    def __init__(self, cluster: Cluster, n_gpus: int):
        self.per_node = cluster.gpus_per_node
        self.intra_bw = cluster.intra_node.bandwidth_GBps * 1e9
        self.intra_lat = cluster.intra_node.latency_us * 1e-6
        self.inter_bw = cluster.inter_node.bandwidth_GBps * 1e9
        self.inter_lat = cluster.inter_node.latency_us * 1e-6
        self.gpu_free = [0.0] * max(n_gpus, 1)
        self.nic_free = [0.0] * (max(n_gpus, 1) // self.per_node + 1)
        self.bytes_moved = 0.0
        self.busy_s = 0.0

    def transfer(self, src: int, dst: int, nbytes: float, t: float) -> float:
        """Send nbytes from GPU src to GPU dst, ready at t; returns the arrival time."""
        if src == dst or nbytes <= 0:
            return t
        self.bytes_moved += nbytes
        sn, dn = src // self.per_node, dst // self.per_node
        if sn == dn:
            start = t if t > self.gpu_free[src] else self.gpu_free[src]
            dur = nbytes / self.intra_bw
            self.gpu_free[src] = start + dur
            self.busy_s += dur
            return start + dur + self.intra_lat
        nic = self.nic_free
        start = max(t, nic[sn], nic[dn])
        dur = nbytes / self.inter_bw
        nic[sn] = nic[dn] = start + dur
        self.busy_s += dur
        return start + dur + self.inter_lat


class Remapped:
    """A network over GPUs numbered as a simulator lays them out, on pools of several GPU
    types: each id is remapped (`ids`, hastune.cluster.Cluster.node_layout) to one whose
    node is its type's, then sent over `net` (built for the remapped numbering)."""

    __slots__ = ("net", "ids")

    def __init__(self, net: Network, ids: list[int]):
        self.net, self.ids = net, ids

    def transfer(self, src: int, dst: int, nbytes: float, t: float) -> float:
        return self.net.transfer(self.ids[src], self.ids[dst], nbytes, t)

    @property
    def bytes_moved(self) -> float:
        return self.net.bytes_moved

    @bytes_moved.setter
    def bytes_moved(self, v: float) -> None:  # the parallel shards of a TP transfer
        self.net.bytes_moved = v

    @property
    def busy_s(self) -> float:
        return self.net.busy_s


def network(cls: type, cluster: Cluster, n_gpus: int,
            layout: tuple[list[int], int] | None = None) -> Network | Remapped:
    """A `cls` network for `n_gpus` GPUs, or, given a layout of pools on several GPU types
    (Cluster.node_layout), one remapped to it."""
    if layout is None:
        return cls(cluster, n_gpus)
    ids, per_node = layout
    virtual = cluster.model_copy(update={"gpus_per_node": per_node})
    return Remapped(cls(virtual, max(ids) + 1), ids)
