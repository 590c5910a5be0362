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
NCCL version and kernels make of it. Counts the twin did not measure either (16, 32, …) stay
unmeasured: a profile offers no TP degree or attention-DP group past 8 there.
"""

from __future__ import annotations

import numpy as np

COMM_KINDS = ("allreduce", "nccl_all_reduce", "nccl_all_gather", "nccl_alltoall",
              "nccl_reduce_scatter")


def twin(systems: dict[str, dict], system: str) -> str | None:
    """The fabric twin of `system` among `systems` (name → the package's system file): for a
    system whose NVLink domain spans more GPUs than its node at the node's per-GPU bandwidth,
    the one whose node holds more GPUs on the same GPU generation and bandwidth, with no rack
    of its own (an 8-GPU board); None for any other system or where none is there."""
    me = systems.get(system) or {}
    node, gpu = me.get("node") or {}, me.get("gpu") or {}
    per_node = int(node.get("num_gpus_per_node") or 0)
    rack = int(node.get("num_gpus_per_rack") or 0)
    bw = node.get("intra_node_bw")
    if not per_node or rack <= per_node or node.get("inter_node_bw") != bw:
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
