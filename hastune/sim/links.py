"""Links for the replica-based simulators: `hastune.sim.network.Network` with both ends of a
transfer busy.

The base model (which the encode/prefill/decode simulator uses) occupies only the sender's GPU
port on an intra-node transfer, so one GPU could receive from several senders at once faster
than its own link allows. A KV cache converging on a decode GPU is exactly that case, so the
fully disaggregated simulator uses this variant: an intra-node transfer occupies the sending
and the receiving GPU's port; an inter-node one, as before, both nodes' NICs.
"""

from __future__ import annotations

from hastune.sim.network import Network


class DuplexNetwork(Network):
    __slots__ = ("gpu_in",)

    def __init__(self, cluster, n_gpus: int):
        super().__init__(cluster, n_gpus)
        self.gpu_in = [0.0] * max(n_gpus, 1)

    def transfer(self, src: int, dst: int, nbytes: float, t: float) -> float:
        """Send nbytes from GPU src to GPU dst, ready at t; returns the arrival time."""
        if src == dst or nbytes <= 0:
            return t
        if src // self.per_node != dst // self.per_node:
            return super().transfer(src, dst, nbytes, t)
        self.bytes_moved += nbytes
        out, inn = self.gpu_free, self.gpu_in
        start = max(t, out[src], inn[dst])
        dur = nbytes / self.intra_bw
        out[src] = inn[dst] = start + dur
        self.busy_s += dur
        return start + dur + self.intra_lat
