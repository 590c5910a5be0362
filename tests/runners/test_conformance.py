"""One suite for every ServingModel: the reference model and a minimal user model."""

from __future__ import annotations

import pytest

from runners.model.base import KVHandle, ServingModel


@pytest.fixture(params=["reference", "toy"])
def model(request, torch, tiny):
    if request.param == "reference":
        return tiny
    from runners.model import load_model

    return load_model("tests.runners.toy_model:make")


def test_is_a_serving_model_with_sizes(model):
    assert isinstance(model, ServingModel)
    assert model.weight_bytes > 0 and model.kv_bytes_per_token > 0
    assert model.encoder_weight_bytes >= 0 and model.hidden_size > 0
    assert model.modalities and set(model.profile_sizes()) <= set(model.modalities)


def test_encode_gives_one_embedding_per_payload(model):
    ps = [model.example_payload(m) for m in model.modalities]
    embs = model.encode(ps)
    assert len(embs) == len(ps)
    for p, e in zip(ps, embs):
        assert tuple(e.shape) == (model.token_counts(p)[1], model.hidden_size)


def test_prefill_decode_free_lifecycle(model):
    emb = model.encode([model.example_payload(model.modalities[0])])[0]
    tok, kv = model.prefill([1, 2, 3], emb)
    assert isinstance(kv, KVHandle) and isinstance(tok, int)
    assert kv.length == 3 + emb.shape[0] and kv.last_token == tok
    _, kv2 = model.prefill([4, 5])
    out = model.decode_step([kv, kv2])
    assert len(out) == 2 and kv.length == 4 + emb.shape[0] and kv2.length == 3
    assert [kv.last_token, kv2.last_token] == out
    for h in (kv, kv2):
        model.free(h)
    with pytest.raises(ValueError):
        model.free(kv)


def test_batched_decode_equals_one_at_a_time(model):
    def run(together: bool) -> list[list[int]]:
        kvs = [model.prefill(list(range(1, n)))[1] for n in (3, 9, 17)]
        outs: list[list[int]] = [[] for _ in kvs]
        for _ in range(6):
            if together:
                toks = model.decode_step(kvs)
            else:
                toks = [model.decode_step([kv])[0] for kv in kvs]
            for o, t in zip(outs, toks):
                o.append(t)
        for kv in kvs:
            model.free(kv)
        return outs

    assert run(True) == run(False)


def test_prefill_batch_equals_prefill(model):
    items = [([1, 2, 3], None), ([9, 8, 7, 6, 5], None)]
    batch = model.prefill_batch(items)
    single = [model.prefill(t, e) for t, e in items]
    assert [t for t, _ in batch] == [t for t, _ in single]
    for _, kv in batch + single:
        model.free(kv)


def test_load_model_refuses_what_is_not_a_model():
    from runners.model import load_model

    with pytest.raises(ValueError, match="Fix:"):
        load_model("tests.runners.nowhere:make")
    with pytest.raises(ValueError, match="Fix:"):
        load_model("tests.runners.toy_model:WIDTH")
