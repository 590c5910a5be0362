"""Scheduling policies shared by the simulator and the engine: pure objects, time passed in."""

from __future__ import annotations

from hastune.policies.admission import Admission, SlackTracker, Verdict
from hastune.policies.batch_wait import BatchWait
from hastune.policies.batcher import PoissonGapBatcher, TimeoutBatcher, poisson_gap_kappa
from hastune.policies.encode import EncodePolicies, epd_policies, policies_for, static_policies
from hastune.policies.iteration import IterationScheduler, Prompt
from hastune.policies.mitosis import GROW, HOLD, SHRINK, Mitosis
from hastune.policies.partitioner import SEED_SM_TABLE, FixedSplit, SMPartitioner
from hastune.policies.rolling import RollingActivation
from hastune.policies.router import DeficitRouter, LeastInFlight

__all__ = [
    "Admission",
    "BatchWait",
    "DeficitRouter",
    "EncodePolicies",
    "FixedSplit",
    "GROW",
    "HOLD",
    "IterationScheduler",
    "LeastInFlight",
    "Mitosis",
    "RollingActivation",
    "SHRINK",
    "SlackTracker",
    "PoissonGapBatcher",
    "Prompt",
    "SEED_SM_TABLE",
    "SMPartitioner",
    "TimeoutBatcher",
    "Verdict",
    "epd_policies",
    "poisson_gap_kappa",
    "policies_for",
    "static_policies",
]
