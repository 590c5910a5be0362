"""The engine times itself: every worker records its own steps into a `StepLog`, and the
frontend puts them in the run record (`RunRecord.steps`, the real evaluator's and `hastune
serve --json`'s `engine_steps`), where `hastune calibrate` reads them.

One row per step, the columns of `COLUMNS`:
- `kind`: `encode` (a batch of payloads), `prefill` (a prefill batch: remote worker, an encode
  worker's local prefill, a replica's prefill-only iteration or a windowed instance's window
  batch), `decode` (one decode step of a batch), `mixed` (a chunked iteration: one decode step
  of `batch` plus `tokens` prefill-chunk tokens), `kv_export` / `kv_import` (a sequence's KV
  leaving its prefill worker / entering its decode worker), `handoff_emb` / `handoff_kv` (an
  item from the sender's put to the receiver's get: the transfer, and any wait for the
  receiver's current step);
- `t`: when it started (time.monotonic, one clock for the machine), `dur`: seconds;
- `batch`: items (payloads, prompts, sequences), `tokens`: encoder tokens (encode), prompt
  positions incl. embeddings (prefill, mixed), KV tokens (kv_*, handoff_kv), LLM tokens
  (handoff_emb); `context`: KV tokens the decode batch attends to (decode, mixed);
- `share`: the device share it ran on (green contexts: SMs given / SMs; else 1.0),
  `overlap`: 1 when an encode and a local prefill of the same worker ran at once (CPU threads
  time-share the worker's cores); `tokens_sq`: Σ over items of their tokens² (encode: encoder
  tokens, prefill: prompt positions; the profile's attention terms).

Cost: one tuple appended per step (a step is milliseconds; this is about a microsecond), sent
to the frontend in chunks of `CHUNK` rows or when the worker goes idle, and on request at the
end of a run (`FLUSH` in the inbox → `EV_STEPS` with final=True).
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from runners.engine.messages import EV_SPLIT, EV_STEP, EV_STEPS

COLUMNS = ("kind", "t", "dur", "batch", "tokens", "context", "share", "overlap", "tokens_sq")
CHUNK = 512
FLUSH = "flush-steps"


class StepLog:
    """A worker's step rows since the last send. Thread safe (an encode worker's encoder and
    its local prefill thread share one)."""

    __slots__ = ("rows", "on", "name", "events", "_lock")

    def __init__(self, name: str, events: Any, on: bool = True):
        self.rows: list[tuple] = []
        self.on, self.name, self.events = on, name, events
        self._lock = threading.Lock()

    def add(self, kind: str, t: float, dur: float, batch: int = 1, tokens: int = 0,
            context: int = 0, share: float = 1.0, overlap: int = 0, sq: int = 0) -> None:
        if not self.on:
            return
        with self._lock:
            self.rows.append((kind, t, dur, batch, tokens, context, share, overlap, sq))
            full = len(self.rows) >= CHUNK
        if full:
            self.send()

    def send(self, final: bool = False) -> None:
        """Send the rows held (and, `final`, say that this is all until now)."""
        with self._lock:
            rows, self.rows = self.rows, []
        if rows or final:
            self.events.put((EV_STEPS, -1, self.name, time.monotonic(), (rows, final)))


def columns(rows: list[tuple]) -> dict[str, list]:
    """Rows as a dict of columns (the run record's form: compact JSON)."""
    cols: dict[str, list] = {c: [] for c in COLUMNS}
    for r in rows:
        for c, v in zip(COLUMNS, r):
            cols[c].append(round(v, 7) if isinstance(v, float) else v)
    return cols


def rows_of(cols: dict[str, list]) -> list[dict[str, Any]]:
    """Columns back into one dict per step."""
    keys = [c for c in COLUMNS if c in cols]
    n = len(cols.get("kind", []))
    return [{k: cols[k][i] for k in keys} for i in range(n)]


def summary(steps: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Per step kind over all workers: count, total and mean seconds."""
    out: dict[str, dict[str, float]] = {}
    for cols in steps.values():
        for k, d in zip(cols.get("kind", []), cols.get("dur", [])):
            s = out.setdefault(k, {"count": 0.0, "total_s": 0.0})
            s["count"] += 1
            s["total_s"] += d
    for s in out.values():
        s["mean_s"] = s["total_s"] / s["count"] if s["count"] else 0.0
    return out


def run_steps(engine: Any, steps: dict[str, list], since: float) -> dict[str, dict]:
    """Each worker's rows of this run (from `since`, on the frontend's clock: Ray workers on
    other machines are shifted) as columns."""
    out = {}
    for name, rows in sorted(steps.items()):
        sh = getattr(engine.procs.get(name), "clock_shift", 0.0)
        if sh:
            rows = [(r[0], r[1] + sh, *r[2:]) for r in rows]
        out[name] = columns([r for r in rows if r[1] >= since])
    return out


def flush_steps(engine: Any, steps: dict[str, list], dead: set[str],
                overhead: dict[str, tuple] | None = None, wait_s: float = 2.0) -> None:
    """Ask every live worker of `engine` for the step rows it still holds and wait (≤ wait_s)
    for them all, adding them to `steps`; other events that arrive meanwhile belong to no
    request of the run that ended (an encode worker's split report and the decode timing
    samples, into `overhead`, are kept)."""
    if not engine.opts.record_steps:
        return
    want = {n for n in engine.names if n not in dead and engine.procs[n].is_alive()}
    for n in want:
        engine.inboxes[n].put(FLUSH)
    deadline = time.monotonic() + wait_s
    while want and time.monotonic() < deadline:
        try:
            kind, _, name, _, extra = engine.events.get(timeout=0.1)
        except queue.Empty:
            continue
        if kind == EV_STEPS:
            steps.setdefault(name, []).extend(extra[0])
            if extra[1]:
                want.discard(name)
        elif kind == EV_SPLIT:
            engine.sm_split[name] = extra
        elif kind == EV_STEP and overhead is not None:
            overhead[name] = (extra[0], extra[1], extra[2])
