"""A fake evaluator: a deterministic function of the configuration, for tests of what uses
evaluators (the tuner, the CLI) without simulating. It implements hastune.evaluators'
Evaluator protocol and is passed in (`Tuner(recipe, opts, evaluator=…)`), never patched in."""

from __future__ import annotations

import json

from hastune.config import config_dict
from hastune.errors import InputError
from hastune.goodput import GoodputResult, Probe
from hastune.runs import RunResult


class LookupEvaluator:
    """goodput(cfg) = `table[key]` if given, else a hash of the config's key in [1, 11);
    `refuse(cfg)` → a reason makes a config unrunnable. Counts its calls."""

    name = "lookup"

    def __init__(self, recipe, table: dict[str, float] | None = None, refuse=None, seed=None):
        self.recipe = recipe
        self.seed = recipe.seed if seed is None else seed
        self.table = table
        self.refuse = refuse or (lambda cfg: None)
        self.calls: list[str] = []

    @staticmethod
    def key(cfg) -> str:
        return json.dumps(config_dict(cfg), sort_keys=True)

    def value(self, cfg) -> float:
        k = self.key(cfg)
        if self.table is not None:
            return self.table[k]
        return 1.0 + (sum(ord(ch) * (i + 1) for i, ch in enumerate(k)) % 997) / 100

    def check(self, config, config_path=None) -> None:
        if config.gpus > self.recipe.cluster.gpus:
            raise InputError(config_path, None, "over the budget", "use fewer GPUs")
        why = self.refuse(config)
        if why:
            raise InputError(config_path, "architecture", why, "use another config")

    def runnable(self, config) -> bool:
        try:
            self.check(config)
        except InputError:
            return False
        return True

    def run(self, config, rate, config_path=None) -> RunResult:
        raise NotImplementedError("the lookup evaluator has no runs")

    def goodput(self, config, config_path=None, on_probe=None, incumbent=None,
                early_stop=False) -> GoodputResult:
        self.check(config, config_path)
        self.calls.append(self.key(config))
        g = self.value(config)
        res = GoodputResult(g, "percentile", 90.0, 0.02)
        if on_probe is not None:
            on_probe(Probe(g, 0.0, 0.0, 1.0, True))
        return res

    def describe(self) -> dict:
        return {"table": self.table is not None}

    def caveats(self, config, rate_rps, run=None) -> list[str]:
        return []

    def close(self) -> None:
        pass
