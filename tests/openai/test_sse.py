"""The client's SSE reading (hastune.evaluators.openai.client.SSE) on generated streams: however
the bytes are split and whichever line ending, it counts the chunks that carry text, takes
the usage's token count when there is one, and times the first and last text chunk by the
piece that completed them."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.evaluators.openai.client import SSE


@st.composite
def streams(draw):
    texts = draw(st.lists(st.sampled_from(["a", " tok", "", "é", "\n"]), min_size=0,
                          max_size=12))
    usage = draw(st.one_of(st.none(), st.integers(1, 50)))
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    events = [json.dumps({"choices": [{"index": 0, "text": t}]}) for t in texts]
    if usage is not None:
        events.append(json.dumps({"choices": [], "usage": {"completion_tokens": usage}}))
    events.append("[DONE]")
    blob, ends = b"", []
    for ev in events:
        blob += f"data: {ev}{eol}{eol}".encode()
        ends.append(len(blob))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(blob) - 1)), max_size=20))))
    return texts, usage, blob, ends, cuts


@given(streams())
@settings(max_examples=200, deadline=None)
def test_sse_counts_and_times_whatever_the_split(s) -> None:
    texts, usage, blob, ends, cuts = s
    pieces = [blob[a:b] for a, b in zip([0, *cuts], [*cuts, len(blob)])]
    sse = SSE()
    for i, p in enumerate(pieces):
        sse.feed(p, float(i))
    with_text = [k for k, t in enumerate(texts) if t]
    assert sse.chunks == len(with_text)
    assert sse.tokens == (usage if usage is not None else len(with_text))
    bounds = [0, *cuts, len(blob)]

    def piece_of(end: int) -> float:  # the piece whose bytes complete the event
        return float(next(i for i in range(len(pieces)) if bounds[i + 1] >= end))

    if with_text:
        assert sse.first == piece_of(ends[with_text[0]])
        assert sse.last == piece_of(ends[with_text[-1]])
    else:
        assert sse.first != sse.first  # nan: no token came
