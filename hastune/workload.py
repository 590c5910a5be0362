"""Request sets: sampled from a recipe's workload, or read from a JSONL trace.

Common random numbers: a RequestSet holds unit-rate arrival gaps; `arrivals(rate)` scales them,
so every rate and every deployment compared sees the same requests in the same order. Sets are
also prefix-consistent: the first n requests of a larger set drawn with the same seed are the
set of n (each attribute has its own random stream), so a longer run extends a shorter one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hastune.engine_terms import FrontEnd
from hastune.errors import InputError
from hastune.recipe import (
    MAX_TOKENS,
    MODALITIES,
    LengthDist,
    ModalityPayload,
    RateSchedule,
    Workload,
)

MODALITY_CODE = {m: i for i, m in enumerate(MODALITIES)}


@dataclass(frozen=True)
class RequestSet:
    """Per-request arrays (length n). `gaps` are unit-mean inter-arrival gaps."""

    gaps: np.ndarray
    modality: np.ndarray         # int codes into MODALITIES
    encoder_tokens: np.ndarray   # encoder input units (patches, audio frames); 0 for text
    llm_tokens: np.ndarray       # multimodal embedding tokens fed to the LLM
    prompt_tokens: np.ndarray    # text tokens
    output_tokens: np.ndarray    # tokens generated, ≥ 1
    seed: int
    schedule: RateSchedule | None = None  # time-varying rate multiplier
    think_s: float | None = None          # closed loop: clients' pause (None: open loop)
    frontend: FrontEnd | None = None      # the engine's front end (hastune.engine_terms)
    ramp_s: float = 0.0                   # closed loop: clients start evenly over ramp_s
    steady: bool = True                   # closed loop: warm-up to the steady state
    # (hastune.sim.warmup); False: the first two rounds only (a benchmark's mean, fidelity)
    life_s: float = 0.0  # open loop: a request's zero-load lifetime, the slack a serial front
    # end gives before it holds a request back (hastune.sim.frontend); 0: no such front end
    ramp_random: bool = False  # closed loop: clients start at random over ramp_s (not evenly),
    # drawn from `seed` (hastune.sim.warmup.client_starts)

    def __len__(self) -> int:
        return int(self.gaps.shape[0])

    def arrivals(self, rate: float) -> np.ndarray:
        """Arrival times at `rate` (× the schedule's multiplier, if any)."""
        if rate <= 0:
            raise ValueError("rate must be > 0")
        u = np.cumsum(self.gaps) / rate
        return u if self.schedule is None else _rescale(u, self.schedule)

    @property
    def prefill_tokens(self) -> np.ndarray:
        return self.prompt_tokens + self.llm_tokens

    def head(self, n: int) -> RequestSet:
        """The first n requests."""
        if n >= len(self):
            return self
        return RequestSet(self.gaps[:n], self.modality[:n], self.encoder_tokens[:n],
                          self.llm_tokens[:n], self.prompt_tokens[:n], self.output_tokens[:n],
                          self.seed, self.schedule, self.think_s, self.frontend, self.ramp_s,
                          self.steady, self.life_s, self.ramp_random)


def _rescale(u: np.ndarray, sched: RateSchedule) -> np.ndarray:
    """Time-rescaling: with Λ(t) = rate·m(t), an arrival at unit-rate operational time u/rate
    happens at M⁻¹(u/rate), M(t) = ∫₀ᵗ m. M is piecewise linear for a step schedule and
    piecewise quadratic for a linear one (inverted on a fine grid)."""
    pts = sched.points
    ts = [t for t, _ in pts]
    ms = [m for _, m in pts]
    grid_t, grid_M = [0.0], [0.0]
    for i in range(1, len(pts)):
        t0, t1 = ts[i - 1], ts[i]
        if sched.shape == "step":
            grid_t.append(t1)
            grid_M.append(grid_M[-1] + ms[i - 1] * (t1 - t0))
        else:
            k = 256
            for j in range(1, k + 1):
                a, b = t0 + (t1 - t0) * (j - 1) / k, t0 + (t1 - t0) * j / k
                ma = ms[i - 1] + (ms[i] - ms[i - 1]) * (a - t0) / (t1 - t0)
                mb = ms[i - 1] + (ms[i] - ms[i - 1]) * (b - t0) / (t1 - t0)
                grid_t.append(b)
                grid_M.append(grid_M[-1] + 0.5 * (ma + mb) * (b - a))
    gt, gm = np.array(grid_t), np.array(grid_M)
    out = np.interp(u, gm, gt)
    tail = u > gm[-1]
    out[tail] = gt[-1] + (u[tail] - gm[-1]) / ms[-1]
    return out


def sample_lengths(d: LengthDist, n: int, rng: np.random.Generator) -> np.ndarray:
    if d.dist == "fixed":
        x = np.full(n, float(d.mean))
    elif d.dist == "uniform":
        x = rng.uniform(d.min, d.max, n)
    else:
        mean, cv = float(d.mean), d.cv
        if cv == 0:
            x = np.full(n, mean)
        elif d.dist == "lognormal":
            sigma2 = math.log1p(cv * cv)
            x = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
        elif d.dist == "gamma":
            k = 1.0 / (cv * cv)
            x = rng.gamma(k, mean / k, n)
        elif d.dist == "exponential":
            x = rng.exponential(mean, n)
        else:  # normal
            x = rng.normal(mean, cv * mean, n)
    return np.clip(np.rint(x), max(d.min, 0), d.max)


def payload_tokens(p: ModalityPayload, n: int, rng: np.random.Generator,
                   rng2: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(encoder tokens, LLM tokens) for n requests of one modality. A second stream `rng2`
    (for llm_tokens) keeps draws prefix-consistent."""
    if p.scheme == "tokens":
        enc = sample_lengths(p.encoder_tokens, n, rng) * p.items  # type: ignore[arg-type]
        llm = (sample_lengths(p.llm_tokens, n, rng2 or rng) * p.items
               if p.llm_tokens is not None else enc.copy())
        return enc, llm
    if p.scheme == "anyres-336":
        w, h = p.resolution  # type: ignore[misc]
        tiles = min(math.ceil(w / 336) * math.ceil(h / 336), 4) + 1  # grid ≤ 2×2, plus base
        return (np.full(n, 577.0 * tiles * p.items), np.full(n, 576.0 * tiles * p.items))
    if p.scheme == "patch-14-merge-2":
        w, h = p.resolution  # type: ignore[misc]
        per_frame = math.ceil(h / 28) * 2 * math.ceil(w / 28) * 2
        groups = math.ceil(p.frames / 2) if p.frames else 1
        enc = float(per_frame * groups * p.items)
        return np.full(n, enc), np.full(n, enc / 4)
    # whisper: 30 s windows of 1,500 frames; LLM tokens after stacking
    secs = sample_lengths(p.seconds, n, rng)  # type: ignore[arg-type]
    windows = np.maximum(1, np.ceil(secs / 30.0))
    frames = np.ceil(secs * 50.0)
    return windows * 1500.0, np.ceil(frames / p.stack)


def sample_requests(w: Workload, n: int | None, seed: int, base: Path | None = None,
                    arrival_cv: float | None = None) -> RequestSet:
    """Draw n requests from a workload (or read its trace). Same (w, n, seed) → same set."""
    n = n or w.requests
    if w.trace:
        path = Path(w.trace)
        if base is not None and not path.is_absolute():
            path = base / path
        return load_trace(path, n, seed, w)
    # one stream per attribute (and two per modality): prefix-consistent sets
    streams = [np.random.default_rng(s)
               for s in np.random.SeedSequence(seed).spawn(4 + 2 * len(MODALITIES))]
    gaps = _gaps(w, n, streams[0], arrival_cv)
    names = [m for m in MODALITIES if w.mix.get(m, 0) > 0]
    probs = np.array([w.mix[m] for m in names], dtype=float)
    cum = np.cumsum(probs / probs.sum())
    mod_idx = np.minimum(np.searchsorted(cum, streams[1].random(n), side="right"),
                         len(names) - 1)
    modality = np.array([MODALITY_CODE[names[i]] for i in mod_idx], dtype=np.int64)
    prompt = sample_lengths(w.prompt_tokens, n, streams[2])
    output = np.maximum(1, sample_lengths(w.output_tokens, n, streams[3]))
    enc = np.zeros(n)
    llm = np.zeros(n)
    for m, payload in w.modalities.items():
        sel = modality == MODALITY_CODE[m]
        k = int(sel.sum())
        if k:
            c = MODALITY_CODE[m]
            e, l_ = payload_tokens(payload, k, streams[4 + 2 * c], streams[5 + 2 * c])
            enc[sel], llm[sel] = e, l_
    return _finish(w, RequestSet(gaps, modality, enc, llm, prompt, output, seed))


def _finish(w: Workload | None, rs: RequestSet) -> RequestSet:
    """Apply the workload's context limit, rate schedule and closed-loop mode."""
    if w is None:
        return rs
    prompt, llm = rs.prompt_tokens, rs.llm_tokens
    if w.max_context is not None:
        # keep the output, cut the text prompt (the paper truncates LongBench for Llama-30B)
        room = np.maximum(w.max_context - rs.output_tokens - llm, 1.0)
        prompt = np.minimum(prompt, room)
    think = w.arrival.think_s if w.arrival.process == "closed" else None
    return RequestSet(rs.gaps, rs.modality, rs.encoder_tokens, llm, prompt, rs.output_tokens,
                      rs.seed, w.rate_schedule, think)


def _gaps(w: Workload, n: int, rng: np.random.Generator, cv: float | None = None) -> np.ndarray:
    if w.arrival.process in ("poisson", "closed") and cv is None:
        return rng.exponential(1.0, n)
    cv = cv if cv is not None else w.arrival.cv
    k = 1.0 / (cv * cv)
    return rng.gamma(k, 1.0 / k, n)


_TRACE_FIELDS = ("prompt_tokens", "output_tokens")
MAX_TRACE_BYTES = 256 * 2**20   # a trace file: 256 MiB (millions of requests)
MAX_TRACE_LINE = 2**20          # one line: 1 MiB
MAX_ARRIVAL_S = 1e12            # arrival_s: finite and below ~30,000 years


def _count(path: Path, lineno: int, f: str, v: object, least: float, most: float) -> None:
    """InputError unless `v` is a finite number in [least, most] (NaN, Infinity, booleans,
    strings and huge integers refused; the bound is checked before any float conversion)."""
    if (not isinstance(v, (int, float)) or isinstance(v, bool) or not least <= v <= most
            or (isinstance(v, float) and not math.isfinite(v))):
        shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
        raise InputError(path, f"line {lineno}: {f}",
                         f"missing or not a valid count (got {shown})" if f in _TRACE_FIELDS
                         else f"not a number in {least:,.0f}..{most:,.0f} (got {shown})",
                         f"give {f} as a number in {least:,.0f}..{most:,.0f}"
                         + (" (tokens)" if f != "arrival_s" else " (seconds)"))


def _trace_lines(path: Path):
    """(line number, parsed object) of each non-blank line; InputError for a file that is not
    a regular file under MAX_TRACE_BYTES, a line that is not UTF-8, too long or not JSON."""
    from hastune.yamlio import check_file

    check_file(path, "trace", MAX_TRACE_BYTES)
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise InputError(path, None, f"cannot read the trace file ({exc.strerror or exc})",
                         "check the path and its permissions") from None
    with fh:
        lineno = 0
        while True:
            try:
                raw = fh.readline(MAX_TRACE_LINE + 1)
            except OSError as exc:  # a regular file by stat() whose read fails: /proc/self/mem
                raise InputError(path, f"line {lineno + 1}", f"cannot be read "
                                 f"({exc.strerror or exc})", "give a JSONL trace file that "
                                 "can be read") from None
            if not raw:
                return
            lineno += 1
            if len(raw) > MAX_TRACE_LINE:
                raise InputError(path, f"line {lineno}", f"longer than {MAX_TRACE_LINE:,} bytes",
                                 "write one request per line")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(path, f"line {lineno}", "not UTF-8 text (a binary file?)",
                                 "give a JSONL trace: one JSON object per line") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(path, f"line {lineno}", f"not valid JSON ({exc.msg})",
                                 "write one JSON object per line") from None
            except ValueError as exc:  # an integer of over 4,300 digits
                raise InputError(path, f"line {lineno}", f"not valid JSON ({exc})",
                                 "write one JSON object per line, its counts as numbers "
                                 "of tokens") from None
            except RecursionError:
                raise InputError(path, f"line {lineno}", "JSON nested too deeply",
                                 "write one flat JSON object per line") from None
            yield lineno, obj


def load_trace(path: Path, n: int | None, seed: int, w: Workload | None = None) -> RequestSet:
    """Read a JSONL trace: one object per line with prompt_tokens, output_tokens and optionally
    modality, encoder_tokens, llm_tokens, arrival_s. With arrival_s the trace's own gaps are kept
    (normalised to unit mean, so `arrivals(rate)` replays it at `rate`); without, Poisson gaps
    drawn from `seed`. The trace is cycled if shorter than n. Counts are finite numbers of at
    most MAX_TOKENS (10M) tokens, arrival_s finite ≥ 0."""
    if not path.exists():
        raise InputError(path, None, "trace file not found", "check workload.trace")
    rows = []
    for lineno, obj in _trace_lines(path):
        if not isinstance(obj, dict):
            raise InputError(path, f"line {lineno}", "not a JSON object",
                             'write objects like {"prompt_tokens": 100, "output_tokens": 50}')
        for f in _TRACE_FIELDS:
            _count(path, lineno, f, obj.get(f), 1 if f == "output_tokens" else 0, MAX_TOKENS)
        mod = obj.get("modality", "text")
        if not isinstance(mod, str) or mod not in MODALITY_CODE:
            raise InputError(path, f"line {lineno}: modality", f"unknown modality {mod!r}",
                             f"use one of {', '.join(MODALITIES)}")
        for f in ("encoder_tokens", "llm_tokens", "arrival_s"):
            _count(path, lineno, f, obj.get(f, 0), 0,
                   MAX_ARRIVAL_S if f == "arrival_s" else MAX_TOKENS)
        rows.append(obj)
    if not rows:
        raise InputError(path, None, "the trace has no requests",
                         "add JSONL lines, one per request")
    n = n or len(rows)
    rows = [rows[i % len(rows)] for i in range(n)]
    rng = np.random.default_rng(seed)
    if all("arrival_s" in r for r in rows[: min(n, len(rows))]) and len(rows) > 1:
        t = np.array([float(r["arrival_s"]) for r in rows])
        gaps = np.diff(t, prepend=t[0])
        if np.any(gaps < 0) or gaps.sum() <= 0:
            gaps = rng.exponential(1.0, n)
        else:
            gaps = gaps / gaps[1:].mean()
    else:
        gaps = rng.exponential(1.0, n)
    modality = np.array([MODALITY_CODE[r.get("modality", "text")] for r in rows], dtype=np.int64)
    enc = np.array([float(r.get("encoder_tokens", 0)) for r in rows])
    llm = np.array([float(r.get("llm_tokens", r.get("encoder_tokens", 0))) for r in rows])
    if w is not None:  # fill sizes from the recipe's payloads where the trace does not say
        for m, payload in w.modalities.items():
            sel = (modality == MODALITY_CODE[m]) & (enc == 0)
            if sel.any():
                e, l_ = payload_tokens(payload, int(sel.sum()), rng)
                enc[sel], llm[sel] = e, l_
    return _finish(w, RequestSet(
        gaps, modality, enc, llm,
        np.array([float(r["prompt_tokens"]) for r in rows]),
        np.array([max(1.0, float(r["output_tokens"])) for r in rows]),
        seed,
    ))
