"""Collectives of a rack-scale system past the GPUs its tables measured, from its fabric twin.

aiconfigurator-core measured GB200's and GB300's all-reduce, all-gather, all-to-all and
reduce-scatter on 2 and 4 GPUs only: one compute tray. Their NVLink domain is the rack
(`num_gpus_per_rack` 72 in the package's system files), reached through NVSwitch at the same
per-GPU bandwidth as within the tray (`inter_node_bw` = `intra_node_bw`, 900 GB/s one way).
The 8-GPU boards of the same GPU generation (B200 and B300: the same `sm_version`, the same
NVLink 5 bandwidth per GPU, NVSwitch between every pair) measured the same collectives on 8
GPUs. A rack-scale system's time on n GPUs, at a message size, is taken as its twin's time on
n GPUs times the ratio of the two systems' times on the most GPUs both measured (4), at that
size (log-log interpolated over sizes; held constant past either end): the twin says how a
collective grows from 4 to 8 GPUs on that fabric, the system's own 4-GPU rows what its clocks,
NCCL version and kernels make of it.

Past the counts any table measured (16 and 32 GPUs of the rack, `stretch`), a collective's
time is its time on the most GPUs measured, k, at the same message size, times its bus factor
(n − 1) / n over (k − 1) / k: on a switched fabric each GPU's link moves (n − 1) / n of the
message in an all-to-all, all-gather or reduce-scatter and twice that in an all-reduce, at the
same per-GPU bandwidth. TensorRT-LLM's own MoE dispatch and combine, measured on 2 to 64 GB200
GPUs (`trtllm_alltoall_perf`, 256 tokens a GPU or more), grow about as that from 8 to 16
GPUs (+2% to +9%; the law +7%) and from 8 to 32 (+8% to +16% up to 20k tokens a GPU, up to
+34% past it; the law +11%); to 64 they grow +12% to +48% (the law +13%), so nothing past 32
is built. GB300's custom all-reduce, measured on 16,
reads 3% to 46% above its 8-GPU time where the law says 7%: a TP degree of 16 built so is an
optimistic one (docs/profiles.md).
"""

from __future__ import annotations

import numpy as np

COMM_KINDS = ("allreduce", "nccl_all_reduce", "nccl_all_gather", "nccl_alltoall",
              "nccl_reduce_scatter")


STRETCH = (16, 32)  # GPU counts of a rack's NVLink domain built by the bus factor


def rack(doc: dict) -> int:
    """The GPUs of a system's NVLink domain past its node (a rack reached through NVSwitch
    at the node's per-GPU bandwidth: `num_gpus_per_rack`), from its system file; 0 for a
    system whose fabric ends at its node."""
    node = doc.get("node") or {}
    per_node = int(node.get("num_gpus_per_node") or 0)
    most = int(node.get("num_gpus_per_rack") or 0)
    if not per_node or most <= per_node or node.get("inter_node_bw") != node.get("intra_node_bw"):
        return 0
    return most


def stretch(shapes: np.ndarray, lat: np.ndarray, most: int
            ) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """`shapes` / `lat` (rows of (num_gpus, message_size) and seconds) with the counts of
    STRETCH above the largest measured, k, and at most `most`: each the time at k and the
    same size times the bus factor ((n − 1) / n) / ((k − 1) / k) (the module's docstring);
    the counts added."""
    k = int(shapes[:, 0].max()) if len(shapes) else 0
    add = [n for n in STRETCH if k >= 2 and k < n <= most]
    if not add:
        return shapes, lat, []
    m, t = _curve(shapes, lat, k)
    rows, times = [shapes], [lat]
    for n in add:
        rows.append(np.column_stack([np.full(len(m), float(n)), m]))
        times.append(t * ((n - 1) / n) / ((k - 1) / k))
    return np.vstack(rows), np.concatenate(times), add


def twin(systems: dict[str, dict], system: str) -> str | None:
    """The fabric twin of `system` among `systems` (name → the package's system file): for a
    system whose NVLink domain spans more GPUs than its node at the node's per-GPU bandwidth,
    the one whose node holds more GPUs on the same GPU generation and bandwidth, with no rack
    of its own (an 8-GPU board); None for any other system or where none is there."""
    me = systems.get(system) or {}
    node, gpu = me.get("node") or {}, me.get("gpu") or {}
    per_node = int(node.get("num_gpus_per_node") or 0)
    bw = node.get("intra_node_bw")
    if not rack(me):
        return None
    for name in sorted(systems):
        o = systems[name] or {}
        onode, ogpu = o.get("node") or {}, o.get("gpu") or {}
        if (name != system and ogpu.get("sm_version") == gpu.get("sm_version")
                and onode.get("intra_node_bw") == bw and not onode.get("num_gpus_per_rack")
                and int(onode.get("num_gpus_per_node") or 0) > per_node):
            return name
    return None


def extend(shapes: np.ndarray, lat: np.ndarray, tshapes: np.ndarray, tlat: np.ndarray,
           most: int) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """`shapes` / `lat` (rows of (num_gpus, message_size) and seconds) with the twin's counts
    above the system's largest and at most `most`, each row the twin's time times the ratio
    at the largest count both measured (the module's docstring); the counts added. Nothing is
    added where the two share no count of 2 or more GPUs."""
    own = {int(g) for g in shapes[:, 0]}
    theirs = {int(g) for g in tshapes[:, 0]}
    common = sorted(g for g in own & theirs if g >= 2)
    if not common:
        return shapes, lat, []
    k = common[-1]
    add = sorted(g for g in theirs if g > max(own) and g <= most)
    if not add:
        return shapes, lat, []
    o_m, o_t = _curve(shapes, lat, k)
    t_m, t_t = _curve(tshapes, tlat, k)
    # the ratio at the system's own sizes: its time over the twin's there
    ratio = np.log(o_t) - np.interp(np.log(o_m), np.log(t_m), np.log(t_t))
    rows, times = [shapes], [lat]
    for g in add:
        m, t = _curve(tshapes, tlat, g)
        r = np.interp(np.log(m), np.log(o_m), ratio)
        rows.append(np.column_stack([np.full(len(m), float(g)), m]))
        times.append(t * np.exp(r))
    return np.vstack(rows), np.concatenate(times), add


def _curve(shapes: np.ndarray, lat: np.ndarray, gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """(message sizes, times) at `gpus`, sorted by size, sizes and times positive."""
    sel = (shapes[:, 0] == gpus) & (shapes[:, 1] > 0) & (lat > 0)
    order = np.argsort(shapes[sel, 1], kind="stable")
    return shapes[sel, 1][order], lat[sel][order]
