"""examples/documents.py's ``--pool attn+max`` against a per-text max computed by hand,
its default pooling unchanged, and the CNN-rand reference of benchmarks/examples.py: its folds
and model shapes."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from example_runs import load_example

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _batch(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    ptr = torch.tensor([0, 3, 4, 9])  # 3 texts of 3, 1 and 5 words
    ids = torch.randint(2, 20, (9, 1), generator=gen)  # (N, K)
    ratios = torch.randn(9, 2, generator=gen)  # (N, R)
    return ids, ratios, torch.zeros(9, 0, dtype=torch.long), ptr


def _states(model, batch):
    """Logits, the normed word states and the attention-pooled vectors of one pass."""
    seen = {}
    hooks = [model.norm.register_forward_hook(lambda m, i, o: seen.update(states=o)),
             model.pool.register_forward_hook(lambda m, i, o: seen.update(pooled=o))]
    with torch.no_grad():
        logits = model(*batch)
    for hook in hooks:
        hook.remove()
    return logits, seen["states"], seen["pooled"]


def test_segment_max_matches_a_float64_loop():
    docs = load_example("documents.py")
    x = torch.randn(9, 4, generator=torch.Generator().manual_seed(1))  # (N, D)
    ptr = torch.tensor([0, 3, 4, 9])
    hand = torch.stack([x[a:b].double().max(0).values
                        for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist())])  # (G, D)
    torch.testing.assert_close(docs.segment_max(x, ptr).double(), hand)


def test_attn_max_pool_reads_attention_and_per_text_max():
    docs = load_example("documents.py")
    torch.manual_seed(0)
    model = docs.DocumentClassifier(20, 3, dim=8, heads=2, layers=1, radius=-1,
                                    ratio_features=2, pool="attn+max").eval()
    assert model.out.in_features == 16
    batch = _batch()
    logits, states, pooled = _states(model, batch)
    ptr = batch[3]
    hand = torch.stack([states[a:b].double().max(0).values
                        for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist())])  # (G, D)
    w, b = model.out.weight.double(), model.out.bias.double()  # (C, 2D), (C,)
    expected = pooled.double() @ w[:, :8].T + hand @ w[:, 8:].T + b  # (G, C)
    torch.testing.assert_close(logits.double(), expected, rtol=1e-5, atol=1e-5)
    # the max half matters: zeroing its weights changes the logits
    with torch.no_grad():
        model.out.weight[:, 8:] = 0
    assert not torch.allclose(model(*batch), logits)


def test_default_pool_is_attention_alone():
    docs = load_example("documents.py")
    torch.manual_seed(0)
    model = docs.DocumentClassifier(20, 3, dim=8, heads=2, ratio_features=2).eval()
    assert not model.max_pool and model.out.in_features == 8
    logits, _, pooled = _states(model, _batch())
    torch.testing.assert_close(logits, model.out(pooled))
    assert docs.parse_args([]).pool == "attn"
    with pytest.raises(ValueError, match="pool"):
        docs.DocumentClassifier(20, 3, pool="max")


def test_trec_cnn_uses_the_inner_folds_of_documents(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    load_example("documents.py")  # puts examples/ on sys.path
    import documents_data

    import examples as trec_cnn

    labels = torch.arange(5452) % 6
    ours = trec_cnn.inner_splits(5452, 3, seed=0)
    args = argparse.Namespace(inner_folds=3, folds=10, run_folds=0, seed=0,
                              val_fraction=0.1)
    corpus = documents_data.Corpus("t", ["x"] * 5452, labels, ["a"] * 6)
    theirs = documents_data.splits(corpus, args)
    assert [len(s[2]) for s in ours] == [1818, 1817, 1817]
    for a, b in zip(ours, theirs):
        for part_a, part_b in zip(a, b):
            assert torch.equal(part_a, part_b)
    model = trec_cnn.CNNRand(50, 6)
    ids = trec_cnn.pad_batch([[5, 6, 7], [8]])  # (2, 11)
    assert ids.shape == (2, 11) and ids[1, 4] == 8 and ids[1, :4].sum() == 0
    assert model(ids).shape == (2, 6)
    assert model.embed.weight[0].abs().sum() == 0
    weight = torch.full((6, 300), 1.0)  # row norms sqrt(300) > 3
    trec_cnn.max_norm_(weight)
    torch.testing.assert_close(weight.norm(dim=1), torch.full((6,), 3.0))
