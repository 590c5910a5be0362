"""Tune a shipped recipe from Python (docs/api.md): what `hastune tune` does, as data.

    python examples/api_tune.py [RECIPE] [TRIALS] [OUT]
"""

import sys

from hastune.tune import run

recipe = sys.argv[1] if len(sys.argv) > 1 else "examples/audio-ultravox-8xa100.yaml"
trials = int(sys.argv[2]) if len(sys.argv) > 2 else 20
out = sys.argv[3] if len(sys.argv) > 3 else "api-tune-out"

result = run(recipe, trials=trials, out=out, seed=7)  # resumes the study in OUT if there is one
print(f"{result.goodput_rps:.3f} req/s with {result.best_config!r}")
for caveat in (result.summary or {}).get("caveats", []):
    print(f"caveat: {caveat}")
print(f"wrote {', '.join(str(f) for f in result.files)}; exit code {result.exit_code}")
sys.exit(result.exit_code)
