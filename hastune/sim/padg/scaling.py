"""Mitosis scaling inside the padg simulator: applies hastune.policies.Mitosis every
`scale_interval_s` to each macro-instance.

- grow: a spare instance (of the `max_instances` the config reserves) is loaded for
  `startup_s`, then joins the macro-instance that asked (or the smallest, if that one has
  since split or merged); past N_u the macro-instance splits in two — the instances keep
  their requests and KV, only the scheduler that owns them changes;
- shrink (after `cooldown` = 3 intervals in a row that asked for it, so a group does not
  thrash between growing and shrinking): the instance holding the least KV leaves the
  rolling order and drains (finishes its window and decodes, takes nothing new), then
  returns to the spare pool; a macro-instance that drops below N_l merges into another one
  if the two fit under N_u.

`timeline` records (time, active instances, macro-instances, draining) after each decision.
"""

from __future__ import annotations

from hastune.policies import GROW, SHRINK, Mitosis
from hastune.sim.events import PRIO_DONE
from hastune.sim.padg.state import READY, Macro


class Scaler:
    def __init__(self, sim, insts: list, macros: list, push, pump):
        cfg = sim.config
        self.policy = Mitosis(cfg.n_lower, cfg.n_upper, sim.slo.ttft_s, sim.slo.tpot_s)
        self.interval = cfg.scale_interval_s
        self.startup = cfg.startup_s
        self.insts, self.macros = insts, macros
        self.push, self.pump = push, pump
        self.spare = [x for x in insts if not x.active]
        self.timeline: list[tuple[float, int, int, int]] = [self._point(0.0)]
        # a macro-instance shrinks only after `cooldown` quiet intervals: no thrashing
        self.cooldown = 3
        self.quiet: dict[int, int] = {}
        self.events: list[tuple[float, str]] = []

    def _point(self, t: float) -> tuple[float, int, int, int]:
        act = sum(1 for x in self.insts if x.active and not x.draining)
        drn = sum(1 for x in self.insts if x.draining)
        return (t, act, len(self.macros), drn)

    def step(self, t: float) -> None:
        pol = self.policy
        for m in list(self.macros):
            if m not in self.macros:
                continue  # merged away this round
            members = m.rolling.members
            n_act = len(members)
            mean_ttft = m.ttft_sum / m.ttft_n if m.ttft_n else None
            m.ttft_sum, m.ttft_n = 0.0, 0
            queued = m.blocked_since is not None and t - m.blocked_since >= self.interval
            tot = cnt = 0.0
            for k in members:
                sl = self.insts[k].slack
                if sl.n:
                    tot += sl.mean_saved(self.insts[k].dec.step, t) * sl.n
                    cnt += sl.n
            saved = tot / cnt if cnt else 0.0
            n_dec = n_act + m.starting
            if n_act <= pol.n_lower:  # it can only shrink by merging: judge the merged group
                partner = self._partner(m, n_act)
                if partner is not None:
                    n_dec += len(partner.rolling.members)
            act = pol.decide(n_dec, mean_ttft, saved, queued)
            quiet = self.quiet.get(id(m), 0) + 1 if act == SHRINK else 0
            self.quiet[id(m)] = quiet
            if act == GROW and self.spare:
                x = self.spare.pop(0)
                x.active = True
                m.starting += 1
                self.events.append((t, "grow"))
                self.push(t + self.startup, PRIO_DONE, READY, x, m)
            elif act == SHRINK and m.starting == 0 and quiet >= self.cooldown:
                self.quiet[id(m)] = 0
                self._shrink(m, t)
        self.timeline.append(self._point(t))

    def _shrink(self, m, t: float) -> None:
        pol = self.policy
        n_act = len(m.rolling.members)
        partner = self._partner(m, n_act)
        if n_act <= pol.n_lower and partner is None:
            return
        victim = min(m.rolling.members,
                     key=lambda k: self.insts[k].dec.reserved + self.insts[k].kv_other)
        self.drain(self.insts[victim], m, t)
        self.events.append((t, "shrink"))
        if len(m.rolling.members) < pol.n_lower and partner is not None:
            self.merge(m, partner, t)

    def _partner(self, m, n_act: int):
        """The smallest other macro-instance that m, one instance lighter, can merge into."""
        fits = [o for o in self.macros if o is not m
                and self.policy.can_merge(n_act - 1, len(o.rolling.members))]
        return min(fits, key=lambda o: len(o.rolling.members)) if fits else None

    def ready(self, x, m, t: float) -> None:
        """A started instance has loaded its weights: it joins a macro-instance."""
        if m not in self.macros:  # it split or merged meanwhile
            m = min(self.macros, key=lambda o: len(o.rolling.members))
        m.starting = max(0, m.starting - 1)
        x.draining = False
        x.macro = m
        x.dec.t0 = t
        m.rolling.add(x.id)
        halves = self.policy.split(len(m.rolling.members))
        if halves is not None:
            self.split(m, halves[1], t)
        self.timeline.append(self._point(t))
        if m.queue:
            self.pump(m, t)

    def split(self, m, size: int, t: float) -> None:
        moved = m.rolling.members[-size:]
        for k in moved:
            m.rolling.remove(k)
        new = Macro(moved)
        for k in moved:
            self.insts[k].macro = new
        self.macros.append(new)
        self.events.append((t, "split"))

    def merge(self, m, into, t: float) -> None:
        for k in list(m.rolling.members):
            m.rolling.remove(k)
            into.rolling.add(k)
            self.insts[k].macro = into
        for x in self.insts:  # draining instances report to the surviving scheduler
            if x.macro is m:
                x.macro = into
        into.queue.extend(m.queue)
        m.queue.clear()
        into.starting += m.starting
        self.macros.remove(m)
        self.events.append((t, "merge"))
        if into.queue:
            self.pump(into, t)

    def drain(self, x, m, t: float) -> None:
        m.rolling.remove(x.id)
        x.draining = True
        if x.idle:
            self.retire(x, t)

    def retire(self, x, t: float) -> None:
        x.active = False
        x.draining = False
        self.spare.append(x)
