"""Stage 2's loop, as one worker runs it: choose → claim → evaluate → tell, until the study
holds `--trials` evaluations (counting every process's) or every survivor is evaluated.

What to evaluate next comes from this worker's own queue when it has one — the warm start,
then the repairs (the unevaluated survivor nearest to a suggestion that taught nothing, or
the next survivor in rank order after IDLE_LIMIT such suggestions), or skopt's proposals —
and from the study's sampler otherwise. Several workers' queues overlap; the claims
(hastune.tune.claims) decide who evaluates what.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import optuna

from hastune import interrupt
from hastune.config import AnyConfig, parse_config, trial_key
from hastune.tune.claims import FAIL, Census, census, claim, finish, n_claims, new_trial
from hastune.tune.pool import Inline, Processes
from hastune.tune.samplers import CONSTRAINT, SkoptProposer

if TYPE_CHECKING:
    from hastune.tune.runner import Prepared, Tuner

Config = AnyConfig
log = logging.getLogger(__name__)
# Suggestions in a row that evaluate nothing (duplicates, invalid, pruned) before the next
# unevaluated survivor is queued. With pruning the survivors are ranked by bound, so an idle
# sampler is better replaced soon; without pruning the fall-back is the space's own order (no
# better than a guess), so the sampler gets longer.
IDLE_LIMIT = {True: 3, False: 10}
WAIT_S = 0.25  # between looks at the study while other workers finish its last evaluations


class Search:
    def __init__(self, tuner: Tuner, study: optuna.Study, prep: Prepared,
                 skopt: SkoptProposer | None,
                 on_trial: Callable[[optuna.trial.FrozenTrial], None] | None,
                 pool: Inline | Processes):
        self.key = trial_key
        self.tuner, self.study, self.prep, self.skopt = tuner, study, prep, skopt
        self.on_trial = on_trial
        self.pool = pool
        self.pz = tuner.pz
        self.limit = IDLE_LIMIT[tuner.opts.prune]
        self.idle = 0
        # (parameters, key) to evaluate before asking the sampler: the warm start first
        self.queue: deque[tuple[dict[str, Any], str]] = deque(
            (self.pz.to_params(c), self.key(c)) for c in map(parse_config, prep.warm))

    def run(self) -> None:
        """Keep `in_flight` evaluations under way (each proposed with the ones before it
        still running), and tell their results in the order they were proposed: the sampler
        then sees the same study at every proposal however many processes evaluate."""
        target, width = self.tuner.opts.trials, self.tuner.opts.in_flight
        patience = self.tuner.opts.patience
        pending: deque[tuple[optuna.Trial, Config]] = deque()
        best, since = stall(self.study)  # the best so far; evaluations since it last rose
        try:
            while True:
                interrupt.check()  # a Ctrl-C that landed where Python drops it
                self.tuner.reaper.reap(self.study)
                while len(pending) < width and not (patience and since >= patience):
                    c = census(self.study)
                    taken = c.evaluated.keys() | c.claimed.keys()
                    if c.n_evaluated + n_claims(c) >= target or self.prep.allowed <= taken:
                        break
                    try:
                        got = self.step(c, taken)
                    except optuna.exceptions.UpdateFinishedTrialError:
                        # another process failed this worker's trial (it took it for dead):
                        # nothing of the trial is recorded; go on with the next
                        log.warning("a trial of this worker was failed by another process")
                        continue
                    if got is not None:
                        self.pool.submit(got[0].number, got[1], got[2])
                        pending.append(got[:2])
                if pending:
                    trial, cfg = pending[0]
                    out = self.pool.result(trial.number)
                    pending.popleft()
                    value = self.tuner.tell(self.study, trial, cfg, out, self.on_trial)
                    best, since = (value, 0) if value > best else (best, since + 1)
                    continue
                c = census(self.study)
                if patience and since >= patience:
                    obj = self.tuner.objective
                    self.tuner.stop_reason = (
                        f"patience: the best {obj.name.replace('_', ' ')} ({best:.4g} "
                        f"{obj.unit}) did not rise in the last {since} evaluations "
                        f"(--patience {patience})")
                    return
                if c.n_evaluated >= target or len(c.evaluated) >= len(self.prep.allowed):
                    self.tuner.stop_reason = (
                        f"trials: the study holds {c.n_evaluated} evaluations (--trials "
                        f"{target})" if c.n_evaluated >= target else
                        f"space: every one of the {len(self.prep.allowed)} configurations "
                        "left by pruning is evaluated")
                    return
                time.sleep(WAIT_S)  # the rest is under way in other processes
        finally:
            for trial, _ in pending:  # cut off: failed, so that a resume evaluates them
                with contextlib.suppress(Exception):
                    finish(self.study, trial, state=FAIL)

    def _fixed(self, c: Census, taken: set[str]) -> dict[str, Any] | None:
        """The next queued configuration not evaluated or claimed, or None (ask the sampler);
        refills the queue from skopt, or with the next survivor when the sampler idles."""
        while self.queue and self.queue[0][1] in taken:
            self.queue.popleft()
        if self.skopt is not None and not self.queue and self.idle < self.limit:
            params = self.skopt.propose(self.study, c.evaluated)
            if params is not None:
                cfg = self.pz.suggest(optuna.trial.FixedTrial(params))
                self.queue.append((params, self.key(cfg) if cfg is not None else ""))
            else:
                self.idle = self.limit  # skopt had nothing new: take the next survivor
        if self.idle >= self.limit and not self.queue:
            nxt = next((cf for cf, k in zip(self.prep.configs, self.prep.keys)
                        if k not in taken), None)
            if nxt is None:
                return None
            self.queue.append((self.pz.to_params(nxt), self.key(nxt)))
            self.idle = 0
        return self.queue.popleft()[0] if self.queue else None

    def step(self, c: Census, taken: set[str]
             ) -> tuple[optuna.Trial, Config, float | None] | None:
        """The next trial: one to evaluate (its trial, configuration and the incumbent), or
        None when the proposal evaluates nothing (a duplicate, pruned, infeasible, or under
        way elsewhere; its trial is finished here)."""
        study, prep = self.study, self.prep
        trial = new_trial(study, self._fixed(c, taken))
        cfg = self.pz.suggest(trial)
        key = self.key(cfg) if cfg is not None else None
        if cfg is None or key not in prep.allowed:
            reason = "invalid" if cfg is None else (
                "infeasible" if not self.tuner.feasible(cfg) else "pruned")
            trial.set_constraint(CONSTRAINT, 1.0)
            trial.set_user_attr("reason", reason)
            if cfg is not None:
                trial.set_user_attr("config", json.loads(key))  # type: ignore[arg-type]
            finish(study, trial, 0.0)
            self.idle += 1
            if cfg is not None:
                self._nearest(cfg, taken)
            return None
        trial.set_user_attr("key", key)
        outcome, value = ("done", c.evaluated[key]) if key in c.evaluated else claim(
            study, trial, key, self.tuner.opts.trials)
        if outcome == "done":
            trial.set_constraint(CONSTRAINT, 0.0)
            trial.set_user_attr("duplicate", True)
            trial.set_user_attr("config", json.loads(key))
            finish(study, trial, value)
            self.idle += 1
            self._nearest(cfg, taken | {key})
            return None
        if outcome != "won":
            trial.set_user_attr("reason", "in progress in another worker" if outcome == "busy"
                                else "the study's last evaluations are under way elsewhere")
            finish(study, trial, state=FAIL)
            if outcome == "busy":
                self.idle += 1
                self._nearest(cfg, taken | {key})
            return None
        best = max(c.evaluated.values(), default=0.0)  # the objective's best value
        self.idle = 0
        # the goodput `cfg` must beat to beat it (per dollar: best × cost(cfg) / 3600)
        return trial, cfg, self.tuner.objective.goodput(cfg, best) if best > 0 else None

    def _nearest(self, cfg: Config, taken: set[str]) -> None:
        """The sampler asked for a configuration that teaches nothing new (evaluated already,
        pruned or infeasible): evaluate instead the unevaluated survivor nearest to it — where
        the sampler wants to look — ties going to the better-ranked survivor. Without this a
        converged sampler re-proposes its favourites, each proposal a stored trial."""
        if not self.tuner.opts.prune or self.queue:
            return  # without pruning: the plain sampler (a repair made plain TPE worse)
        best: tuple[float, Config, str] | None = None
        for other, key in zip(self.prep.configs, self.prep.keys):  # rank order: ties keep the first
            if key in taken:
                continue
            dist = self.pz.distance(cfg, other)
            if best is None or dist < best[0]:
                best = (dist, other, key)
        if best is not None:
            self.queue.append((self.pz.to_params(best[1]), best[2]))


def stall(study: optuna.Study) -> tuple[float, int]:
    """The study's best goodput so far and how many evaluations (in trial order: pruning's
    probes, earlier runs) have been told since it last rose."""
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    best, since = 0.0, 0
    for t in sorted((t for t in done if t.user_attrs.get("evaluated")), key=lambda t: t.number):
        v = float(t.value or 0.0)
        best, since = (v, 0) if v > best else (best, since + 1)
    return best, since
