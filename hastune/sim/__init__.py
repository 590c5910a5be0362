"""Simulators, one module per architecture family; `make_simulator` is the registry."""

from __future__ import annotations

from typing import Protocol

from hastune.cluster import Cluster
from hastune.profile import Profile
from hastune.recipe import SLO
from hastune.sim.common import StopRule
from hastune.sim.result import RunResult
from hastune.workload import RequestSet


class Simulator(Protocol):
    stop_rule: StopRule | None  # when a run may stop early (set by the evaluator; None: never)

    def run(self, reqs: RequestSet, rate: float) -> RunResult: ...


def _epd(profile: Profile, cluster: Cluster, config, warmup: float, slo) -> Simulator:
    from hastune.sim.epd import EPDSimulator

    return EPDSimulator(profile, cluster, config, warmup=warmup)


def _load(module: str, name: str):
    """A factory that imports its simulator on first use."""

    def factory(profile: Profile, cluster: Cluster, config, warmup: float, slo) -> Simulator:
        import importlib

        cls = getattr(importlib.import_module(f"hastune.sim.{module}"), name)
        return cls(profile, cluster, config, warmup=warmup, slo=slo)

    return factory


# architecture name → factory(profile, cluster, config, warmup, slo). Adding one is one line.
SIMULATORS = {
    "epd": _epd,
    "epd-static": _epd,
    "padg": _load("padg", "PaDGSimulator"),
    "nodg": _load("nodg", "NoDGSimulator"),
    "fudg": _load("fudg", "FuDGSimulator"),
}


def make_simulator(profile: Profile, cluster: Cluster, config, warmup: float = 0.1,
                   slo: SLO | None = None) -> Simulator:
    """The simulator of `config.architecture`. `slo` is needed by architectures whose
    scheduler reads the SLOs (padg's admission)."""
    try:
        factory = SIMULATORS[config.architecture]
    except KeyError:
        raise ValueError(f"no simulator for architecture {config.architecture!r}") from None
    return factory(profile, cluster, config, warmup, slo)


__all__ = ["SIMULATORS", "RunResult", "Simulator", "make_simulator"]
