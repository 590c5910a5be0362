"""What a tune tells whoever watches it (hastune.tune.run's `progress`): the CLI draws a live
table from it; a script may pass its own, or none. Every method is optional: the base class
does nothing."""

from __future__ import annotations

from typing import Any


class Progress:
    """Override what you want to see; each is called in the process running the tune."""

    def started(self, tuner: Any, study: Any, resumed: int) -> None:
        """The study is open; `resumed` evaluations were recorded before this run."""

    def trial(self, trial: Any) -> None:
        """A trial finished in this process (an optuna FrozenTrial; its user_attrs hold the
        config, and `evaluated` when it was measured rather than skipped)."""

    def refresh(self) -> None:
        """About twice a second while worker processes search (their trials are in the
        study, not reported one by one)."""

    def stopped(self) -> None:
        """The search is over (finished, interrupted or failed)."""

    def recheck(self, kind: str, info: dict) -> None:
        """An event of the recheck stage (hastune.tune.recheck.Runner.on_event)."""


def config_line(cfg: dict | None) -> str:
    """A config in one line: its architecture and the knobs not at their defaults."""
    from hastune.config import parse_config
    from hastune.errors import InputError

    if not cfg:
        return "-"
    try:
        d = parse_config(cfg).model_dump(exclude_defaults=True)
    except InputError:
        d = dict(cfg)
    skip = {"architecture", "kind", "name"}
    return f"{cfg['architecture']} " + " ".join(f"{k}={v}" for k, v in d.items()
                                                  if k not in skip)
