"""Simulators, one module per architecture family; `make_simulator` is the registry."""

from __future__ import annotations

from typing import Protocol

from hastune.cluster import Cluster
from hastune.profile import Profile
from hastune.sim.result import RunResult
from hastune.workload import RequestSet


class Simulator(Protocol):
    def run(self, reqs: RequestSet, rate: float) -> RunResult: ...


def _epd(profile: Profile, cluster: Cluster, config, warmup: float) -> Simulator:
    from hastune.sim.epd import EPDSimulator

    return EPDSimulator(profile, cluster, config, warmup=warmup)


# architecture name → factory(profile, cluster, config, warmup). Adding one is one line here.
SIMULATORS = {
    "epd": _epd,
    "epd-static": _epd,
}


def make_simulator(profile: Profile, cluster: Cluster, config, warmup: float = 0.1) -> Simulator:
    try:
        factory = SIMULATORS[config.architecture]
    except KeyError:
        raise ValueError(f"no simulator for architecture {config.architecture!r}") from None
    return factory(profile, cluster, config, warmup)


__all__ = ["SIMULATORS", "RunResult", "Simulator", "make_simulator"]
