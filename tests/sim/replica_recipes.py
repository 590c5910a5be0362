"""Small recipes for the replica-based simulators' tests (padg, nodg, fudg)."""

from __future__ import annotations

from hastune.recipe import Recipe

ECO_CLUSTER = {"gpu": "a800-80gb", "gpus": 8, "gpus_per_node": 8, "intra_node": "pcie4",
               "inter_node": "25gbe-roce"}


def recipe(preset: str = "sharegpt", requests: int = 600, **over) -> Recipe:
    """CodeLlama2-34B on 8× A800 with an EcoServe workload preset; `over` replaces top-level
    fields (cluster, slo, workload, …)."""
    data = {"kind": "recipe", "name": f"test-{preset}", "model": "codellama2-34b",
            "cluster": dict(ECO_CLUSTER), "workload": {"preset": preset, "requests": requests},
            "architecture": ["padg", "nodg", "fudg"], "seed": 0}
    data.update(over)
    return Recipe.model_validate(data)
