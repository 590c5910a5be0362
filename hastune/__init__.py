"""hastune: find the Encode/Prefill/Decode deployment of a multimodal LLM with the most P90 goodput.

`import hastune` stays light: no torch, ray or plotting libraries load here.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
