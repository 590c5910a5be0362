"""Simulators: the discrete-event cores of the architectures (hastune/archs/ names which
simulator runs which architecture: `Architecture.simulator`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from hastune.runs import RunResult
from hastune.sim.stoprule import StopRule

if TYPE_CHECKING:
    from hastune.workload import RequestSet


class Simulator(Protocol):
    stop_rule: StopRule | None  # when a run may stop early (set by the evaluator; None: never)

    def run(self, reqs: RequestSet, rate: float) -> RunResult: ...


__all__ = ["RunResult", "Simulator"]
