"""Write hastune/data/calibration/e2e/inferencex_disagg.csv: every disaggregated deployment
SemiAnalysis InferenceX's NVIDIA master config listed, with when it listed it. The measured
disaggregated runs from InferenceX (silicon_data_source `source_file=<date>.csv; model=…`)
give their workers' TP but not how many prefill and decode workers ran, nor attention-DP or
speculative decoding; the config that ran them does (hastune.fidelity.inferencex).

    python scripts/inferencex_deployments.py REPO [--until 2026-04-30] [--write]

REPO is a clone (or bare git directory) of github.com/SemiAnalysisAI/InferenceX (Apache-2.0).
The script reads `.github/configs/nvidia-master.yaml` (later `configs/nvidia-master.yaml`) at
every commit that changed it up to --until, with yaml.safe_load; one output row is one
(config entry, sequence lengths, concurrency, deployment), `valid_from` the commit date that
first listed it and `valid_to` the one that dropped it (empty: still listed at --until);
`recipe` the file name of the multi-node recipe it names (CONFIG_FILE=…), empty where none;
`drafts` the MTP draft tokens a step its settings give (DECODE_MTP_SIZE=…), empty where none.
Without --write the counts are printed only.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "hastune" / "data" / "calibration" / "e2e" / "inferencex_disagg.csv"
PATHS = (".github/configs/nvidia-master.yaml", "configs/nvidia-master.yaml")
COLUMNS = ("config", "model", "precision", "framework", "isl", "osl", "concurrency",
           "spec_decoding", "prefill_workers", "prefill_tp", "prefill_ep", "prefill_dp_attn",
           "decode_workers", "decode_tp", "decode_ep", "decode_dp_attn", "recipe", "drafts",
           "valid_from", "valid_to")


def git(repo: str, *args: str) -> str:
    where = "--git-dir" if Path(repo, "HEAD").is_file() else "-C"  # bare or a work tree
    return subprocess.run(["git", where, repo, *args], check=True, capture_output=True,
                          text=True).stdout


def versions(repo: str, until: str) -> list[tuple[dt.datetime, str, str]]:
    """(commit date UTC, commit, path) of every commit that changed a master config."""
    out: list[tuple[dt.datetime, str, str]] = []
    when, commit = None, ""
    for line in git(repo, "log", f"--until={until}", "--format=@%H %cI", "--name-only",
                    "--", *PATHS).splitlines():
        if line.startswith("@"):
            commit, date = line[1:].split()
            when = dt.datetime.fromisoformat(date).astimezone(dt.timezone.utc)
        elif line.strip() in PATHS and when is not None:
            out.append((when, commit, line.strip()))
    return sorted(out)


def setting(name: str, *parts: dict) -> str | None:
    """The value of `name`=… in the first of `parts` (prefill, decode, the entry itself)
    whose `additional-settings` set it; None where none does."""
    for part in parts:
        for item in part.get("additional-settings") or []:
            if isinstance(item, str) and item.startswith(f"{name}="):
                return item.split("=", 1)[1]
    return None


def recipe(*parts: dict) -> str:
    """The file name of the multi-node recipe an entry runs (its `additional-settings`'
    CONFIG_FILE=…, under prefill, decode or the entry itself), "" where none is named."""
    path = setting("CONFIG_FILE", *parts)
    return "" if path is None else path.rsplit("/", 1)[-1]


def drafts(*parts: dict) -> int | str:
    """The MTP draft tokens a step an entry sets in its `additional-settings`
    (DECODE_MTP_SIZE=N, how entries that name no recipe set them), "" where none is set."""
    n = (setting("DECODE_MTP_SIZE", *parts) or "").strip()
    return int(n) if n.isdigit() else ""


def entries(text: str) -> set[tuple]:
    """The disaggregated deployments one version of the config lists, one per concurrency."""
    found = set()
    for name, e in (yaml.safe_load(text) or {}).items():
        if not isinstance(e, dict) or not e.get("disagg"):
            continue
        for lens in e.get("seq-len-configs") or []:
            for sp in lens.get("search-space") or []:
                p, d = sp.get("prefill") or {}, sp.get("decode") or {}
                for c in sp.get("conc-list") or []:
                    found.add((name, e.get("model"), e.get("precision"), e.get("framework"),
                               lens["isl"], lens["osl"], c, sp.get("spec-decoding", "none"),
                               p.get("num-worker"), p.get("tp"), p.get("ep", 1),
                               bool(p.get("dp-attn")), d.get("num-worker"), d.get("tp"),
                               d.get("ep", 1), bool(d.get("dp-attn")), recipe(p, d, sp),
                               drafts(d, p, sp)))
    return found


def table(repo: str, until: str) -> list[tuple]:
    live: dict[tuple, dt.datetime] = {}
    rows = []
    for when, commit, path in versions(repo, until):
        try:
            now = entries(git(repo, "show", f"{commit}:{path}"))
        except subprocess.CalledProcessError:  # the commit removed (moved) this path
            continue
        for k in [k for k in live if k not in now]:
            rows.append((*k, live.pop(k).isoformat(), when.isoformat()))
        for k in now - live.keys():
            live[k] = when
    rows += [(*k, since.isoformat(), "") for k, since in live.items()]
    return sorted(rows, key=lambda r: tuple(map(str, r)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", help="a clone or git directory of SemiAnalysisAI/InferenceX")
    ap.add_argument("--until", default="2026-04-30")
    ap.add_argument("--write", action="store_true", help=f"write {OUT}")
    args = ap.parse_args()
    rows = table(args.repo, args.until)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerows(rows)
    head = git(args.repo, "log", "-1", f"--until={args.until}", "--format=%H %cI", "--",
               *PATHS).strip()
    print(f"{len(rows)} deployments, {len({r[0] for r in rows})} config entries; "
          f"last config commit {head}")
    if args.write:
        OUT.write_text(buf.getvalue())
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
