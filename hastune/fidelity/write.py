"""Writing fitted engine terms into hastune/engine_fitted.py (a Python literal: it ships with
the package, no data file to lose)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hastune.fidelity.fit import NAMES

TARGET = Path(__file__).resolve().parent.parent / "engine_fitted.py"

HEADER = '''"""Engine terms fitted on measured end-to-end runs (hastune.engine_terms; written by
`hastune fidelity {file} --write`, from {rows} rows, sha256 {sha}).
Keys: (engine, GPU); clients_max is the most closed-loop clients of a run fitted on. POOLED
names, per engine, the GPU whose terms apply on GPUs it has no measurements on (its GPU with
the most rows). Fitted on that file only (docs/fidelity.md)."""

FITTED: dict[tuple[str, str], dict] = {{
'''


def write_fitted(card, source: str | Path, target: Path = TARGET) -> Path:
    src = Path(source)
    sha = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    counts: dict[tuple[str, str], int] = {}
    clients: dict[tuple[str, str], int] = {}  # the most clients of a run fitted on
    for r in card.rows:
        counts[r.case.group] = counts.get(r.case.group, 0) + 1
        clients[r.case.group] = max(clients.get(r.case.group, 0), r.case.clients)
    lines = [HEADER.format(file=src.name, rows=len(card.rows), sha=sha)]
    best: dict[str, tuple[str, str]] = {}
    for g in sorted(card.terms):
        if g[0] not in best or counts[g] > counts[best[g[0]]]:
            best[g[0]] = g
    for g in sorted(card.terms):
        key = g
        vals = {k: _round(float(x)) for k, x in zip(NAMES, card.terms[g])
                if k != "prefill_scale" or float(x) != 1.0}  # held at 1: left out
        body = "".join(f"        {k!r}: {v!r},\n" for k, v in vals.items())
        body += f"        'clients_max': {clients[g]},\n"
        body += f"        'fitted_on': '{counts[g]} rows of {src.name} ({g[0]} on {g[1]})',\n"
        lines.append(f"    {key!r}: {{\n{body}    }},\n")
    lines.append("}\n\nPOOLED: dict[str, str] = {\n")
    for e, g in sorted(best.items()):
        lines.append(f"    {e!r}: {g[1]!r},\n")
    lines.append("}\n")
    target.write_text("".join(lines))
    return target


def _round(x: float) -> float:
    """Six significant digits; what the bounded fit left at ~0 is 0."""
    return 0.0 if abs(x) < 1e-12 else float(f"{x:.6g}")
