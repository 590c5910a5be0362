"""The recipe's latency profile, found or built: the seam between the core, which never
imports hastune.calibrate, and the profile builder."""

from __future__ import annotations

import sys

from hastune.errors import InputError
from hastune.model_ref import ProfileSource, load_arch, precision_of, shipped_profile
from hastune.models.spec import refuse_experts_only
from hastune.profile import Profile
from hastune.recipe import Recipe


def resolve_profile(recipe: Recipe, quiet: bool = False) -> tuple[Profile, ProfileSource]:
    """The recipe's profile and where it came from: its `profile:` file or a shipped one
    (hastune.model_ref.shipped_profile), else one built from kernel tables on first use and
    cached (hastune.calibrate.ondemand; one stderr line says so unless `quiet`). The seam
    between the core, which never imports hastune.calibrate, and the builder."""
    path = shipped_profile(recipe)
    if path is not None:
        kind = "file" if recipe.profile else "shipped"
        return recipe.load_profile(), ProfileSource(kind, str(path), precision_of(recipe),
                                                    recipe.engine)
    from hastune.calibrate import ondemand
    from hastune.calibrate.aic import PACKAGE, package_version

    arch = load_arch(recipe)
    media = sorted(k for k, w in recipe.workload.mix.items() if k != "text" and w > 0)
    if arch.encoder is None and media:
        raise InputError(recipe.path, "workload.mix", f"{arch.name} is a text-only model (its "
                         f"config has no vision or audio encoder) but the mix sends "
                         f"{', '.join(media)} requests", "give a multimodal model's config "
                         "(e.g. Qwen2.5-VL, LLaVA-NeXT), or mix: {text: 1.0}")
    prec = precision_of(recipe, arch)
    refuse_experts_only(prec.weights, arch, recipe.path)  # (before a cached profile is read)
    req = ondemand.Request(arch, recipe.cluster.gpu, prec, recipe.engine)
    try:
        got = ondemand.ensure(req, recipe.path)
    except InputError as exc:  # the GPU as the recipe names it (an inventory's entry)
        if exc.field != "cluster.gpu" or exc.file != (str(recipe.path) if recipe.path else None):
            raise
        raise InputError(exc.file, recipe.cluster.gpu_field, exc.problem, exc.fix) from None
    prof = got.profile
    need = prof.min_pp * min(prof.tp_degrees)
    if need > recipe.cluster.gpus:  # larger than one node: it needs pipeline stages
        raise InputError(recipe.path, "cluster.gpus", f"{arch.name} ({prec.label}) does not "
                         f"fit on {recipe.cluster.gpus} {recipe.cluster.gpu}: its weights need "
                         f"tp {min(prof.tp_degrees)} × {prof.min_pp} pipeline stages, "
                         f"{need} GPUs", f"give cluster.gpus ≥ {need} (pp across nodes), "
                         "fp8 weights, or a GPU with more memory")
    src = ProfileSource("built" if got.built else "cache", str(got.path), prec, recipe.engine,
                        f"{PACKAGE} {package_version()}", got.seconds)
    if got.built and not quiet:
        print(f"hastune: built profile {got.profile.name} ({prec.label}, {recipe.engine.name} "
              f"kernels of {src.kernels}) in {got.seconds:.1f} s -> {got.path} (cached; "
              f"clear with: rm -r {got.path.parent})", file=sys.stderr, flush=True)
    return got.profile, src
