"""Work a command may be asked to simulate, refused before anything runs when it cannot
finish in reasonable time: the message has the arithmetic and the request count that fits
(docs/recipes.md, limits)."""

from __future__ import annotations

from hastune.errors import InputError

__all__ = ["WORK_LIMIT", "check_sim_work", "check_tune_work", "check_work"]


# Every probe simulates at least the base request count (workload.requests or --requests), so a
# goodput search costs about PROBES_PER_SEARCH of them; one core simulates about
# SIM_REQUESTS_PER_S (the shipped audio recipe's epd at 2,000,000 requests: 54 s).
PROBES_PER_SEARCH = 10
SIM_REQUESTS_PER_S = 40_000
WORK_LIMIT = 5_000_000  # simulated requests: about 2 minutes and 2 GB on one core


def check_work(requests: int, searches: int, what: str, file: object = None,
               field: str = "workload.requests", other: str = "") -> None:
    """Refuse, before anything runs, a command whose `searches` goodput searches (0: one
    simulated run) of at least `requests` requests each would simulate over WORK_LIMIT
    requests; the message has the arithmetic and a request count that fits."""
    runs = searches * PROBES_PER_SEARCH or 1
    total = runs * requests
    if total <= WORK_LIMIT:
        return
    how = (f"{searches} goodput search{'es' if searches > 1 else ''} × ~{PROBES_PER_SEARCH} "
           f"probes × {requests:,} requests = {total:,} requests" if searches else
           f"one run of {requests:,} requests")
    raise InputError(file, field, f"{what} needs at least {how}, "
                     f"about {total / SIM_REQUESTS_PER_S / 60:,.0f} minutes at ~"
                     f"{SIM_REQUESTS_PER_S:,} simulated requests/s on one core: over the "
                     f"{WORK_LIMIT:,}-request limit of one command",
                     f"set {field} ≤ {WORK_LIMIT // runs:,} (a probe still runs to min_span "
                     "request lifetimes, up to evaluator.max_requests, whatever it is)"
                     + (f", or {other}" if other else ""))


def check_sim_work(rec, requests: int | None, searches: int, what: str, other: str = "") -> None:
    """Refuse up front a simulation that cannot finish in reasonable time (check_work),
    naming --requests where it was given, else the recipe's workload.requests."""
    if requests is not None:
        check_work(requests, searches, what, None, "--requests", other)
    else:
        check_work(rec.workload.requests, searches, what, rec.path, other=other)


def check_tune_work(rec, prune: bool, what: str) -> None:
    """A tuning command's simulation up front: pruning's probes (3 searches per architecture)
    and one trial's search must fit (check_sim_work); more trials only take longer, in a
    resumable study."""
    n = (3 * len(rec.architectures) if prune else 0) + 1
    check_sim_work(rec, None, n, f"{what} (before its first trial is done: "
                   + (f"pruning's {n - 1} goodput searches and " if prune else "")
                   + "one trial's)", other="--no-prune" if prune else "")
