"""The recipe: model, cluster, workload, SLOs and how to evaluate — one YAML file."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from hastune import archs
from hastune.cluster import Cluster
from hastune.errors import InputError, from_pydantic, named_by
from hastune.model_ref import Engine, Precision, no_profile, shipped_profile
from hastune.profile import Profile, load_profile
from hastune.yamlio import read_yaml_mapping

MODALITIES = ("text", "image", "video", "audio")

# Plausibility bounds: far above any real model or run, so only a typo or a hostile file meets
# them (and the arrays they would size are never allocated).
MAX_TOKENS = 10_000_000      # a length (tokens, audio seconds): 10M, above any model's context
MAX_REQUESTS = 10_000_000    # requests in one run or probe
MAX_SLO_S = 1e9              # an SLO (or a think time) in seconds: ~30 years, "never missed"
MIX_TOLERANCE = 0.01         # mix shares must sum to 1 within this
MAX_PATH = 4096              # characters of a path (Linux's PATH_MAX)
# What a tune maximises (and a result is ranked by): goodput (req/s), or goodput per dollar
# (requests served within the SLOs per dollar: goodput × 3600 / cost per hour; hastune.cost)
OBJECTIVES = ("goodput", "goodput_per_dollar")
COST_OBJECTIVES = ("goodput_per_dollar",)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # no NaN / ±inf


class LengthDist(_Strict):
    """A distribution of a token count (or of seconds of audio).

    `fixed`: always `mean`; `uniform`: between min and max; `lognormal`/`gamma`/`normal`: with
    the given mean and coefficient of variation, then clipped to [min, max] and rounded.
    """

    dist: Literal["fixed", "uniform", "lognormal", "gamma", "normal", "exponential"] = "lognormal"
    mean: float | None = Field(default=None, gt=0, le=MAX_TOKENS)
    cv: float = Field(default=0.5, ge=0, le=100)
    min: float = Field(default=1, ge=0, le=MAX_TOKENS)
    max: float = Field(default=1_000_000, gt=0, le=1e9,
                       description="a clip only (up to 1e9: unclipped); mean and min ≤ 10M")

    @model_validator(mode="after")
    def _consistent(self) -> LengthDist:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) > max ({self.max}). Fix: make min ≤ max")
        if self.dist != "uniform" and self.mean is None:
            raise ValueError(f"dist {self.dist!r} needs a mean. Fix: add mean: <value>")
        return self


def _dist(v: object) -> object:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if not 0 < v <= MAX_TOKENS:  # NaN fails too
            raise ValueError(f"a length must be in (0, {MAX_TOKENS:,}] (got {v}). "
                             f"Fix: use a value > 0 and ≤ {MAX_TOKENS:,}")
        return {"dist": "fixed", "mean": v, "min": 0, "max": max(float(v), 1.0)}
    return v


class Arrival(_Strict):
    """`poisson` or `gamma` (bursts: gaps with coefficient of variation `cv`) open-loop
    arrivals at the probe's rate; or `closed`: a fixed number of clients (the probe's "rate" is
    the concurrency), each sending its next request `think_s` after the previous one ends."""

    process: Literal["poisson", "gamma", "closed"] = "poisson"
    cv: float = Field(default=1.0, ge=0.001, le=100,
                      description="coefficient of variation of gaps (gamma)")
    think_s: float = Field(default=0.0, ge=0, le=MAX_SLO_S,
                           description="closed loop: pause between requests")


class RateSchedule(_Strict):
    """A time-varying arrival rate: the probe's rate × a multiplier that follows `points`
    ([t_s, multiplier], t from 0, increasing), held (`step`) or interpolated (`linear`) between
    points and held after the last. Arrivals are the request set's unit gaps time-rescaled, so
    common random numbers still hold."""

    shape: Literal["step", "linear"] = "step"
    points: list[tuple[float, float]]

    @field_validator("points")
    @classmethod
    def _points(cls, v: list[tuple[float, float]]) -> list[tuple[float, float]]:
        if not v:
            raise ValueError("points is empty. Fix: give [[0, 1.0], [t, multiplier], ...]")
        if v[0][0] != 0:
            raise ValueError(f"the first point is at t = {v[0][0]}. Fix: start at [0, m]")
        ts = [t for t, _ in v]
        if any(b <= a for a, b in zip(ts, ts[1:])):
            raise ValueError("point times must increase. Fix: sort them, no repeats")
        if any(m <= 0 for _, m in v):
            raise ValueError("a multiplier is ≤ 0. Fix: use multipliers > 0")
        return v


# EcoServe's datasets (Table 4): mean prompt / output tokens and default SLOs. The means are
# the paper's; the shapes are ours (lognormal, clipped): `mean` below is the pre-clip mean
# that gives the paper's mean after clipping and rounding (checked in tests/test_presets.py).
PRESETS: dict[str, dict] = {
    "alpaca": {  # Alpaca-GPT4: short instructions, mid-length answers
        "prompt_tokens": {"dist": "lognormal", "mean": 20.63, "cv": 0.8, "min": 1, "max": 1024},
        "output_tokens": {"dist": "lognormal", "mean": 163.82, "cv": 0.8, "min": 1, "max": 2048},
        "slo": {"ttft_s": 1.0, "tpot_s": 0.1},
        "means": (20.63, 163.80),
    },
    "sharegpt": {  # ShareGPT conversations: heavy-tailed prompts
        "prompt_tokens": {"dist": "lognormal", "mean": 348.36, "cv": 1.5, "min": 4, "max": 4096},
        "output_tokens": {"dist": "lognormal", "mean": 238.03, "cv": 1.0, "min": 1, "max": 2048},
        "slo": {"ttft_s": 5.0, "tpot_s": 0.1},
        "means": (343.76, 237.20),
    },
    "longbench": {  # LongBench: long documents, short answers
        "prompt_tokens": {"dist": "lognormal", "mean": 2687.42, "cv": 0.6, "min": 64,
                          "max": 16384},
        "output_tokens": {"dist": "lognormal", "mean": 101.99, "cv": 1.0, "min": 1, "max": 1024},
        "slo": {"ttft_s": 15.0, "tpot_s": 0.1},
        "means": (2686.89, 101.78),
    },
}


class ModalityPayload(_Strict):
    """How big one request's non-text input is, and what the encoder turns it into.

    Schemes: `tokens` (give encoder_tokens and llm_tokens directly), `anyres-336` (LLaVA-1.6
    tiles of 336 px, 577 patches → 576 tokens each, plus one base tile), `patch-14-merge-2`
    (Qwen2.5-VL: 14 px patches, 2×2 merged; video frames in temporal pairs), `whisper`
    (30 s windows of 1,500 frames, stacked by `stack` into LLM tokens).
    """

    scheme: Literal["tokens", "anyres-336", "patch-14-merge-2", "whisper"] = "tokens"
    encoder_tokens: LengthDist | None = None
    llm_tokens: LengthDist | None = None
    resolution: tuple[int, int] | None = None
    frames: int | None = Field(default=None, gt=0, le=100_000)
    seconds: LengthDist | None = None
    stack: int = Field(default=8, gt=0, le=MAX_TOKENS)
    items: int = Field(default=1, gt=0, le=10_000, description="images per request")

    @field_validator("encoder_tokens", "llm_tokens", "seconds", mode="before")
    @classmethod
    def _lengths(cls, v: object) -> object:
        return _dist(v)

    @field_validator("resolution")
    @classmethod
    def _res(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and not (0 < v[0] <= 100_000 and 0 < v[1] <= 100_000):
            raise ValueError("resolution must be two pixel counts in 1..100,000. "
                             "Fix: e.g. [672, 672]")
        return v

    @model_validator(mode="after")
    def _needs(self) -> ModalityPayload:
        need = {
            "tokens": ("encoder_tokens",),
            "anyres-336": ("resolution",),
            "patch-14-merge-2": ("resolution",),
            "whisper": ("seconds",),
        }[self.scheme]
        for f in need:
            if getattr(self, f) is None:
                raise ValueError(f"scheme {self.scheme!r} needs {f}. Fix: add {f}")
        return self


class Workload(_Strict):
    preset: Literal["alpaca", "sharegpt", "longbench"] | None = Field(
        default=None, description="EcoServe dataset: its length distributions (and default SLOs)")
    requests: int = Field(default=2000, gt=0, le=MAX_REQUESTS,
                          description="requests simulated per rate probe")
    warmup: float = Field(default=0.1, ge=0, lt=1, description="share of first requests ignored")
    arrival: Arrival = Field(default_factory=Arrival)
    rate_schedule: RateSchedule | None = None
    max_context: int | None = Field(
        default=None, gt=1, description="model context: prompts are cut so prompt + output fit")
    mix: dict[str, float] = Field(default_factory=lambda: {"text": 1.0})
    prompt_tokens: LengthDist = Field(default_factory=lambda: LengthDist(mean=256))
    output_tokens: LengthDist = Field(default_factory=lambda: LengthDist(mean=128))
    modalities: dict[str, ModalityPayload] = Field(default_factory=dict, validate_default=True)
    trace: str | None = Field(default=None, max_length=MAX_PATH, description="JSONL trace path")

    @field_validator("prompt_tokens", "output_tokens", mode="before")
    @classmethod
    def _lengths(cls, v: object) -> object:
        return _dist(v)

    @field_validator("mix")
    @classmethod
    def _mix(cls, v: dict[str, float]) -> dict[str, float]:
        # shares, not ratios: they must sum to 1 (within MIX_TOLERANCE), so a forgotten
        # modality or a ratio typed by mistake is refused rather than silently rescaled
        # (sampling divides by the sum). NaN and ±inf never get here (allow_inf_nan).
        shares = ", ".join(f"{k}: {w:g}" for k, w in v.items())
        fix = ("give each modality's share of requests, summing to 1 within 0.01, e.g. "
               "{image: 0.7, text: 0.3} (weights are not rescaled)")
        for k, w in v.items():
            if k not in MODALITIES:
                raise ValueError(f"unknown modality {k!r}. Fix: use {', '.join(MODALITIES)}")
            if w < 0:
                raise ValueError(f"mix weight of {k} is negative ({w:g}). Fix: {fix}")
        total = sum(v.values())
        if total <= 0:
            raise ValueError(f"mix weights sum to 0 ({shares}). Fix: {fix}")
        if abs(total - 1.0) > MIX_TOLERANCE:
            raise ValueError(f"mix shares sum to {total:g}, not 1 ({shares}). Fix: {fix}")
        return v

    @field_validator("modalities")
    @classmethod
    def _payloads(cls, v: dict[str, ModalityPayload], info: ValidationInfo
                  ) -> dict[str, ModalityPayload]:
        for k in v:
            if k not in MODALITIES or k == "text":
                raise ValueError(
                    f"modalities has {k!r}. Fix: describe only image, video or audio payloads"
                )
        for k, w in (info.data.get("mix") or {}).items():
            if k != "text" and w > 0 and k not in v:
                raise ValueError(
                    f"mix has {k} but modalities.{k} does not say its size. "
                    f"Fix: add modalities.{k} (e.g. scheme: tokens, encoder_tokens: 576), "
                    "or give a trace with encoder_tokens"
                )
        return v

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, data: object) -> object:
        # a preset fills the lengths the recipe does not give itself
        if isinstance(data, dict) and str(data.get("preset")) in PRESETS:  # a str of them
            p = PRESETS[data["preset"]]
            data = {**data}
            for k in ("prompt_tokens", "output_tokens"):
                data.setdefault(k, dict(p[k]))
        return data

    @model_validator(mode="before")
    @classmethod
    def _trace_sizes(cls, data: object) -> object:
        # a trace may carry sizes itself: then mix/modalities are not required to match
        if isinstance(data, dict) and data.get("trace") and "modalities" not in data:
            data = {**data, "modalities": {}}
            data.setdefault("mix", {"text": 1.0})
        return data


class SLO(_Strict):
    ttft_s: float = Field(gt=0, le=MAX_SLO_S)
    tpot_s: float = Field(gt=0, le=MAX_SLO_S)
    percentile: float = Field(default=90.0, gt=0, le=100)
    criterion: Literal["percentile", "attainment"] = "percentile"
    attainment: float = Field(default=0.9, gt=0, le=1, description="for criterion: attainment")


class Evaluator(_Strict):
    """The goodput search's settings (the simulator's probes; the real evaluator takes its own,
    hastune.evaluators.engine.RealOptions). Which evaluator runs is the command's `--evaluator`."""

    @model_validator(mode="before")
    @classmethod
    def _old_kind(cls, data: object) -> object:
        # recipes once said `kind: sim` here; it chose nothing, so it is accepted and dropped
        if isinstance(data, dict) and data.get("kind") == "sim":
            data = {k: v for k, v in data.items() if k != "kind"}
        return data

    tolerance: float = Field(default=0.02, gt=0, lt=1,
                             description="relative step of the rate grid the search bisects on")
    max_probes: int = Field(default=40, ge=3, le=10_000)
    start_rate: float | None = Field(default=None, gt=0, description="first rate tried (req/s)")
    min_span: float = Field(
        default=50.0, ge=0,
        description="each probe's arrivals span at least this many request lifetimes — the "
                    "longer of the zero-load lifetime and the SLO lifetime (TTFT SLO + TPOT "
                    "SLO × (mean output tokens − 1)) — so a run reaches and shows steady state")
    min_requests: int = Field(
        default=5000, ge=0, le=MAX_REQUESTS,
        description="each probe simulates at least this many requests (with workload.requests "
                    "as a second floor): a P90 of fewer, near capacity, is a matter of luck")
    max_requests: int = Field(default=200_000, gt=0, le=MAX_REQUESTS,
                              description="cap on requests per probe")
    shortfall: float = Field(
        default=0.03, gt=0, lt=1,
        description="stability: a probe whose departures fall short of its arrivals by more "
                    "than this share (last two thirds of the window) is unstable")
    extend: float = Field(
        default=4.0, ge=1,
        description="stability: a probe whose window disagrees with itself is run again, twice "
                    "as long each time, up to this many times the min_span window")


class Recipe(_Strict):
    kind: Literal["recipe"] = "recipe"
    name: str = Field(default="recipe", max_length=1000)
    model: str = Field(max_length=MAX_PATH, description="a shipped model's name, or a "
                       "config.json (or its folder) relative to the recipe (hastune.model_ref)")
    precision: Precision | None = Field(default=None, description="weights / KV cache: bf16 "
                                        "or fp8 (default: the checkpoint's, KV bf16)")
    engine: Engine = Field(default_factory=Engine, description="whose kernels a built "
                           "profile is fitted on (vllm, sglang, trtllm)")
    profile: str | None = Field(default=None, max_length=MAX_PATH, description="profile path")
    cluster: Cluster
    workload: Workload = Field(default_factory=Workload)
    slo: SLO = Field(description="TTFT/TPOT SLOs (default: the workload preset's)")
    architecture: Union[str, list[str]] = Field(
        default=archs.NAMES[0],
        description="an architecture of hastune.archs (default: the first registered), or a list")
    search_space: str | None = Field(default=None, max_length=MAX_PATH)
    evaluator: Evaluator = Field(default_factory=Evaluator)
    seed: int = Field(default=0, ge=0)
    objective: Literal["goodput", "goodput_per_dollar"] = Field(
        default="goodput", description="what tune maximises: goodput (req/s), or "
        "goodput_per_dollar (goodput × 3600 / cost per hour; needs every GPU type's price)")
    path: str | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _preset_slo(cls, data: object) -> object:
        if isinstance(data, dict) and "slo" not in data:
            wl = data.get("workload")
            preset = str(wl.get("preset")) if isinstance(wl, dict) else None
            if preset not in PRESETS:
                raise ValueError("slo is missing and no workload.preset gives default SLOs. Fix: "
                                 "add slo: {ttft_s: ..., tpot_s: ...}, or a workload.preset")
            data = {**data, "slo": dict(PRESETS[preset]["slo"])}
        return data

    @field_validator("architecture")
    @classmethod
    def _known(cls, v: str | list[str]) -> str | list[str]:
        names = v if isinstance(v, list) else [v]
        if not names:
            raise ValueError(f"lists no architecture. Fix: give one of {', '.join(archs.NAMES)}")
        for n in names:
            if n not in archs.NAMES:
                raise ValueError(f"unknown architecture {n!r}. Fix: use one of "
                                 f"{', '.join(archs.NAMES)}")
        if len(set(names)) < len(names):
            raise ValueError(f"lists an architecture twice ({', '.join(names)}). "
                             "Fix: name each once")
        return v

    @model_validator(mode="after")
    def _priced(self) -> Recipe:
        # an InputError (not a ValueError) passes through pydantic whole: it names the exact
        # field, which a model-level ValueError cannot; load_recipe adds the file
        missing = self.cluster.unpriced()
        if self.objective in COST_OBJECTIVES and missing:
            field = self.cluster.price_field(missing[0])
            raise InputError(self.path, field, f"objective {self.objective} needs a price for "
                             f"every GPU type, and {missing[0]} has none",
                             f"give {field} (what one GPU costs per hour), or objective: "
                             "goodput")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler):  # defaults left out: a study's recipe hash stays what it was
        out = handler(self)
        if self.precision is None:
            out.pop("precision", None)
        if self.engine == Engine():
            out.pop("engine", None)
        if self.objective == "goodput":
            out.pop("objective", None)
        return out

    def check_one_type(self) -> None:
        """Refuse a cluster of several GPU types where a deployment runs on an engine (the
        simulator takes pools on several types; an engine's trials run on this machine's
        devices, one type)."""
        types = self.cluster.types
        if len(types) > 1:
            names = ", ".join(t.gpu for t in types)
            raise InputError(self.path, "cluster.inventory", f"it holds {len(types)} GPU "
                             f"types ({names}); an engine's trials run on one",
                             "keep one entry in cluster.inventory for --evaluator real, or "
                             "tune it with the simulator")

    @property
    def architectures(self) -> list[str]:
        a = self.architecture
        return list(a) if isinstance(a, list) else [a]

    @property
    def base_dir(self) -> Path:
        return Path(self.path).resolve().parent if self.path else Path.cwd()

    def resolve(self, rel: str) -> Path:
        p = Path(rel)
        return p if p.is_absolute() else self.base_dir / p

    def load_profile(self) -> Profile:
        """The explicit or shipped profile (hastune.model_ref.shipped_profile); InputError if
        there is none (hastune.evaluators.profile.resolve_profile then builds one)."""
        p = shipped_profile(self)
        if p is None:
            raise no_profile(self)
        try:
            prof = load_profile(p)
        except InputError as exc:  # a named profile: its file (field, else `profile`), the recipe
            raise (named_by(exc, self.path, "profile") if self.profile else exc) from None
        if prof.model != self.model and not self.profile:
            raise InputError(p, "model", f"profile is for {prof.model!r}, recipe wants "
                             f"{self.model!r}", "fix the profile's model field")
        return prof


def load_recipe(path: str | Path) -> Recipe:
    data = read_yaml_mapping(path, "recipe")
    try:
        rec = Recipe.model_validate(data)
    except ValidationError as exc:
        raise from_pydantic(path, exc, model=Recipe) from None
    except InputError as exc:  # a check that names its field itself (_priced)
        raise InputError(path, exc.field, exc.problem, exc.fix) from None
    return rec.model_copy(update={"path": str(path)})
