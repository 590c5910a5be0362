"""Models the engine serves: the `ServingModel` interface and the reference multimodal model.

`config` is torch-free; everything else loads torch. `load_model(name)` accepts a preset name
(`ref-tiny`, `ref-small`, `ref-base`) or `package.module:factory` for a model of your own (a
callable taking `device=` and returning a `ServingModel`). See docs/engine.md#models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runners.model.config import (
    PRESETS,
    AudioConfig,
    LMConfig,
    ModelConfig,
    VisionConfig,
    get_config,
)

if TYPE_CHECKING:
    from runners.model.base import ServingModel

__all__ = ["PRESETS", "AudioConfig", "LMConfig", "ModelConfig", "VisionConfig", "get_config",
           "load_model"]


def load_model(name: str, device: str = "cpu", **kwargs: object) -> ServingModel:
    """A preset of the reference model, or `module:factory` (called with device=, **kwargs)."""
    if ":" in name:
        import importlib

        mod_name, _, attr = name.partition(":")
        try:
            factory = getattr(importlib.import_module(mod_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot load model factory {name!r} ({exc}). Fix: give "
                             "package.module:callable, importable from here") from None
        from runners.model.base import ServingModel

        if not callable(factory):
            raise ValueError(f"{name} is a {type(factory).__name__}, not a callable. Fix: "
                             "give package.module:callable returning a ServingModel")
        try:
            model = factory(device=device, **kwargs)
        except Exception as exc:  # the factory is the user's code: say what it raised
            text = " ".join(str(exc).split())[:200]
            raise ValueError(f"calling {name}(device={device!r}) raised "
                             f"{type(exc).__name__}: {text}. Fix: give package.module:callable"
                             " that takes device= and returns a ServingModel") from None
        if not isinstance(model, ServingModel):
            raise ValueError(f"{name} returned {type(model).__name__}, not a ServingModel. "
                             "Fix: give package.module:callable returning a subclass of "
                             "runners.model.base.ServingModel")
        return model
    from runners.model.reference import ReferenceModel

    return ReferenceModel(get_config(name), device=device, **kwargs)  # type: ignore[arg-type]
