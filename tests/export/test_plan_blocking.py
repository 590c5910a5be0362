"""`plan(cfg, …, place=False)` — what pruning's target rule asks of every configuration — says
the same as the placed plan: on generated configurations of every architecture, with TP
degrees past a node's size, one GPU type or several (each pool on its own type), the same
`blocking`, word for word, and no instances; and the instance both name as spanning nodes
(found from the pools, `_first_wide`) is the first placed instance wider than its node."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune import archs
from hastune.export.plan import _first_wide, plan
from tests.generated import space

TYPES = ["h100-80gb", "l40s-48gb"]
TP_KNOBS = {"epd": ("tp_E", "tp_P", "tp_D"), "epd-static": ("tp_E", "tp_P", "tp_D"),
            "fudg": ("prefill_tp", "decode_tp"), "nodg": ("tp",), "padg": ("tp",)}


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), arch=st.sampled_from(archs.NAMES),
       gpus=st.integers(2, 24), gpn=st.sampled_from([1, 2, 4, 8]), mixed=st.booleans(),
       closest=st.booleans())
def test_unplaced_plan_blocks_as_the_placed_one(seed, arch, gpus, gpn, mixed, closest):
    rng = np.random.default_rng(seed)
    cfgs = list(space(arch).configs(gpus))
    if not cfgs:
        return
    cfg = cfgs[int(rng.integers(len(cfgs)))]
    update = {k: int(rng.choice([1, 2, 4, 8])) for k in TP_KNOBS.get(arch, ())
              if hasattr(cfg, k) and rng.random() < 0.5}
    sizes: int | dict[str, int] = gpn
    if mixed and cfg.type_knobs:
        sizes = {TYPES[0]: gpn, TYPES[1]: int(rng.choice([1, 2, 4, 8]))}
        update.update({k: str(rng.choice(TYPES)) for k in cfg.type_knobs if rng.random() < 0.7})
    cfg = type(cfg).model_validate({**cfg.model_dump(), **update})
    placed = plan(cfg, sizes, closest)
    bare = plan(cfg, sizes, closest, place=False)
    assert bare.blocking == placed.blocking
    assert bare.instances == []
    assert (bare.topology, bare.pools, bare.sm_split) == (placed.topology, placed.pools,
                                                         placed.sm_split)
    by_type = sizes if isinstance(sizes, dict) else None
    one = next(iter(by_type.values())) if by_type else sizes
    wide = next(((i.name, i.tp, i.pp) for i in placed.instances
                 if i.tp * i.pp > (by_type or {}).get(i.gpu_type, one)), None)  # type: ignore
    assert _first_wide(placed.pools, by_type, one) == wide  # type: ignore[arg-type]
