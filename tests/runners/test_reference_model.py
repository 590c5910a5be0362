"""The reference model: deterministic weights, documented token counts, the KV cache paths
equal recomputation, batching changes nothing."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from runners.model.kv_cache import KVCacheFull  # noqa: E402

TOL = dict(atol=2e-4, rtol=1e-4)


def payloads(model):
    return [model.example_payload("image", 64, seed=1), model.example_payload("audio", 1.0),
            model.example_payload("video", 2), model.example_payload("image", 100, seed=2),
            model.example_payload("audio", 0.37, seed=3)]


def test_same_seed_same_model_other_seed_other_model(torch, tiny):
    from runners.model.reference import ReferenceModel

    again = ReferenceModel(tiny.config)
    for a, b in zip(tiny.net.state_dict().values(), again.net.state_dict().values()):
        assert torch.equal(a, b)
    other = ReferenceModel(tiny.config.with_(seed=1))
    prompt = list(range(5, 25))
    assert again.generate(prompt, max_new_tokens=6) == tiny.generate(prompt, max_new_tokens=6)
    assert not torch.allclose(other.forward_logits(prompt), tiny.forward_logits(prompt))


def test_encoders_give_the_documented_token_counts(torch, tiny):
    cfg = tiny.config
    embs = tiny.encode(payloads(tiny))
    expect = [cfg.vision.tokens(64, 64), cfg.audio.tokens(100), (2 * 16, 2 * 4),
              cfg.vision.tokens(100, 100), cfg.audio.tokens(37)]
    for p, e, (enc, llm) in zip(payloads(tiny), embs, expect):
        assert tiny.token_counts(p) == (enc, llm)
        assert e.shape == (llm, cfg.lm.width) and torch.isfinite(e).all()
    assert expect[0] == (16, 4) and expect[3] == (64, 16) and expect[1] == (50, 13)


def test_a_mixed_encode_batch_equals_encoding_one_at_a_time(torch, tiny):
    ps = payloads(tiny)
    together = tiny.encode(ps)
    for p, e in zip(ps, together):
        torch.testing.assert_close(tiny.encode([p])[0], e, **TOL)


def test_cached_decode_equals_recomputation_without_cache(torch, tiny):
    emb = tiny.encode([tiny.example_payload("audio", 1.0)])[0]
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    logits, (kv,) = tiny.prefill_logits([(prompt, emb)])
    steps, gen = [logits[0]], [kv.last_token]
    for _ in range(12):  # crosses several 4-token blocks
        steps.append(tiny.step_logits([kv])[0])
        gen.append(kv.last_token)
    full = tiny.forward_logits(prompt + gen[:-1], emb)
    start = emb.shape[0] + len(prompt) - 1
    torch.testing.assert_close(torch.stack(steps), full[start:], **TOL)
    assert gen == full[start:].argmax(-1).tolist()
    assert kv.length == emb.shape[0] + len(prompt) + 12
    tiny.free(kv)


def test_batched_prefill_and_decode_equal_one_at_a_time(torch, tiny):
    embs = tiny.encode(payloads(tiny)[:3])
    items = [(list(range(1, 4)), embs[0]), (list(range(7, 30)), None),
             (list(range(2, 9)), embs[1]), ([11], embs[2])]
    alone = []
    for it in items:
        logits, (kv,) = tiny.prefill_logits([it])
        rows = [logits[0]] + [tiny.step_logits([kv])[0] for _ in range(9)]
        alone.append(torch.stack(rows))
        tiny.free(kv)
    logits, kvs = tiny.prefill_logits(items)
    rows = [logits] + [tiny.step_logits(kvs) for _ in range(9)]
    together = torch.stack(rows, dim=1)  # [seq, step, vocab]
    for a, b in zip(alone, together):
        torch.testing.assert_close(b, a, **TOL)
    assert len({kv.length for kv in kvs}) == len(kvs)  # really different lengths
    # a sequence that joins a running batch late (continuous batching)
    _, late = tiny.prefill([5, 6])
    toks = tiny.decode_step([*kvs, late])
    assert len(toks) == 5 and late.length == 3
    for kv in [*kvs, late]:
        tiny.free(kv)


def test_kv_memory_is_accounted_and_returned(torch, tiny):
    pool = tiny.pool
    free0 = pool.free_blocks
    _, kv = tiny.prefill(list(range(10)))
    assert pool.free_blocks == free0 - 3  # 10 tokens in blocks of 4
    tiny.decode_step([kv])
    tiny.decode_step([kv])
    assert pool.free_blocks == free0 - 3 and kv.length == 12
    tiny.decode_step([kv])
    assert pool.free_blocks == free0 - 4
    tiny.free(kv)
    assert pool.free_blocks == free0
    with pytest.raises(ValueError, match="freed"):
        tiny.free(kv)
    with pytest.raises(ValueError, match="freed"):
        tiny.decode_step([kv])


def test_a_full_cache_refuses_without_changing_anything(torch):
    from runners.model.config import get_config
    from runners.model.reference import ReferenceModel

    m = ReferenceModel(get_config("ref-tiny", kv_block=4, kv_tokens=16))
    assert m.can_allocate(16) and not m.can_allocate(17)
    with pytest.raises(KVCacheFull):
        m.prefill(list(range(17)))
    assert m.pool.free_blocks == 4
    _, a = m.prefill(list(range(8)))
    _, b = m.prefill(list(range(8)))
    with pytest.raises(KVCacheFull):
        m.decode_step([a, b])
    assert (a.length, b.length, m.pool.free_blocks) == (8, 8, 0)


def test_kv_export_import_continues_the_same_sequence(torch, tiny):
    from runners.model.reference import ReferenceModel

    decoder = ReferenceModel(tiny.config)  # another instance: the decode worker
    _, kv = tiny.prefill(list(range(3, 12)))
    state = tiny.export_kv(kv)
    moved = decoder.import_kv(state)
    assert moved.length == kv.length == state.length
    assert [decoder.decode_step([moved])[0] for _ in range(5)] == \
        [tiny.decode_step([kv])[0] for _ in range(5)]
    tiny.free(kv)
    decoder.free(moved)


def test_bad_inputs_name_the_fix(torch, tiny):
    from runners.model.base import Payload

    with pytest.raises(ValueError, match="Fix:"):
        tiny.prefill([tiny.config.lm.vocab])
    with pytest.raises(ValueError, match="Fix:"):
        tiny.prefill([])
    with pytest.raises(ValueError, match="Fix:"):
        tiny.encode([Payload("image", torch.zeros(8, 8))])
    with pytest.raises(ValueError, match="Fix:"):
        Payload("smell", None)


@pytest.mark.cuda
def test_cuda_matches_cpu(torch, tiny, cuda):
    from runners.model.reference import ReferenceModel

    gpu = ReferenceModel(tiny.config, device="cuda")
    emb_c = tiny.encode([tiny.example_payload("image", 64)])[0]
    emb_g = gpu.encode([tiny.example_payload("image", 64)])[0]
    torch.testing.assert_close(emb_g.cpu(), emb_c, atol=1e-3, rtol=1e-3)
    prompt = list(range(4, 20))
    torch.testing.assert_close(gpu.forward_logits(prompt, emb_g).cpu(),
                               tiny.forward_logits(prompt, emb_c), atol=1e-3, rtol=1e-3)
    _, kv = gpu.prefill(prompt, emb_g)
    gpu.decode_step([kv])
    gpu.free(kv)


def test_chunked_prefill_equals_whole_prefill(torch, tiny):
    emb = tiny.encode([tiny.example_payload("image", 64, seed=1)])[0]
    prompt = list(range(3, 26))
    logits, (whole,) = tiny.prefill_logits([(prompt, emb)])
    kv = tiny.begin_prefill(prompt, emb)
    total = emb.shape[0] + len(prompt)
    got = [tiny.prefill_chunk(kv, 5) for _ in range(-(-total // 5))]
    assert got[:-1] == [None] * (len(got) - 1) and got[-1] == whole.last_token
    assert kv.length == whole.length == total
    # the cache it wrote is the same: decoding continues identically
    torch.testing.assert_close(tiny.step_logits([kv])[0], tiny.step_logits([whole])[0], **TOL)
    tiny.free(kv)
    tiny.free(whole)
    with pytest.raises(ValueError, match="complete"):
        tiny.prefill_chunk(kv, 1)
