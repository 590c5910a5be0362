"""What a real trial sends (hastune.evaluators.openai.OpenAIEvaluation, nothing launched): each
request's prompt is its text plus media LLM tokens as token ids, max_tokens its output
length, offsets the request set's arrivals at the rate; closed loop is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from hastune.errors import InputError
from hastune.evaluators.openai import OpenAIEvaluation, OpenAIOptions
from hastune.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("rate", [0.5, 7.0, 120.0])
def test_requests_follow_the_recipe(rate: float) -> None:
    rec = load_recipe(ROOT / "examples" / "reference-cpu.yaml")
    ev = OpenAIEvaluation(rec, OpenAIOptions(launch_cmd="true"), requests=50)
    reqs = ev.requests_at(rate)
    sent = ev._requests(reqs, rate, 0)
    assert len(sent) == len(reqs) == min(50, max(20, int(rate * 20)))
    assert [len(q.prompt) for q in sent] == [int(p) for p in reqs.prefill_tokens]
    assert [q.max_tokens for q in sent] == [int(o) for o in reqs.output_tokens]
    arr = reqs.arrivals(rate)
    assert np.allclose([q.offset for q in sent], arr - arr[0])
    assert all(100 <= t < 1000 for q in sent for t in q.prompt)
    assert ev.describe()["media_as_text_tokens"] == int((ev.pool.llm_tokens > 0).sum()) > 0


def test_closed_loop_is_refused(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "examples" / "reference-cpu.yaml").read_text())
    data["workload"]["arrival"] = {"process": "closed"}
    data["profile"] = str(ROOT / "profiles" / "cpu" / "ref-small-1core.yaml")
    p = tmp_path / "closed.yaml"
    p.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="open-loop"):
        OpenAIEvaluation(load_recipe(p), OpenAIOptions(launch_cmd="true"))
