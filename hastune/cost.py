"""What a deployment costs, and the objective a tune maximises (issue 37).

cost_per_hour = Σ over the deployment's GPUs of their type's price per GPU-hour (one type:
gpus × price); goodput_per_dollar = goodput_rps × 3600 / cost_per_hour, the requests served
within the SLOs per dollar. Both are None where a GPU type has no price.

`Objective` turns a goodput into the value a study maximises and back: for `goodput` the
goodput itself; for `goodput_per_dollar` goodput × scale(cfg), scale = 3600 / cost(cfg). A
per-configuration factor keeps every goodput-valued rule sound under the other objective: a
configuration beats a best value v only above the goodput v / scale(cfg) (early stop), and a
capacity bound b on its goodput bounds its value by b × scale(cfg) (pruning).
"""

from __future__ import annotations

from typing import Any

from hastune.cluster import Cluster
from hastune.recipe import COST_OBJECTIVES, Recipe


def gpus_by_type(cluster: Cluster, config: Any) -> dict[str, int]:
    """The configuration's GPUs per GPU type: each pool's on its type (its type knob; the
    cluster's first where it names none)."""
    return config.gpus_by_type(cluster.gpu)


def cost_per_hour(cluster: Cluster, config: Any) -> float | None:
    """What `config`'s GPUs cost per hour; None where a type it uses has no price."""
    total = 0.0
    for gpu, n in gpus_by_type(cluster, config).items():
        price = cluster.price(gpu)
        if price is None:
            return None
        total += n * price
    return total


def goodput_per_dollar(goodput_rps: float, cost: float | None) -> float | None:
    """Requests served within the SLOs per dollar: goodput × 3600 / cost per hour."""
    if cost is None or cost <= 0:
        return None
    return goodput_rps * 3600.0 / cost


def cost_fields(cluster: Cluster, config: Any, goodput_rps: float) -> dict[str, float]:
    """{cost_per_hour, goodput_per_dollar} of a result, or {} where a price is missing."""
    cost = cost_per_hour(cluster, config)
    if cost is None:
        return {}
    return {"cost_per_hour": cost,
            "goodput_per_dollar": goodput_per_dollar(goodput_rps, cost) or 0.0}


def cost_line(fields: dict[str, float]) -> str:
    """The console's words for cost_fields ('' without a price)."""
    if not fields:
        return ""
    return (f"{fields['cost_per_hour']:.4g}/h, {fields['goodput_per_dollar']:.4g} requests "
            "per dollar")


class Objective:
    """The recipe's objective as a study's value: `value(cfg, goodput)` and its inverse."""

    def __init__(self, recipe: Recipe):
        self.name = recipe.objective
        self.cluster = recipe.cluster
        self.per_cost = recipe.objective in COST_OBJECTIVES

    @property
    def unit(self) -> str:
        return "requests per dollar" if self.per_cost else "req/s"

    def scale(self, config: Any) -> float:
        """The value of one req/s of `config`'s goodput (1 for the goodput objective)."""
        if not self.per_cost:
            return 1.0
        cost = cost_per_hour(self.cluster, config)
        if cost is None or cost <= 0:  # the recipe refuses a cost objective without prices
            raise ValueError(f"objective {self.name} needs a price for every GPU type")
        return 3600.0 / cost

    def value(self, config: Any, goodput_rps: float) -> float:
        return goodput_rps * self.scale(config)

    def goodput(self, config: Any, value: float) -> float:
        """The goodput of `config` whose value is `value` (value's inverse)."""
        return value / self.scale(config)
