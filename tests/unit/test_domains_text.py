"""Documents -> word sets: tokenizer, vocabulary, window graph, empty documents, batches."""

from __future__ import annotations

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from setattn.datasets import load_mr
from setattn.domains.text import (
    Tokenizer,
    Vocabulary,
    document_to_data,
    documents_to_batch,
    window_edge_index,
)


def test_tokenizer_modes():
    text = "It's a CO-writer's film... 10/10!"
    assert Tokenizer()(text) == [
        "it's", "a", "co", "-", "writer's", "film", ".", ".", ".", "10", "/", "10", "!",
    ]  # fmt: skip
    dropped = ["it's", "a", "co", "writer's", "film", "10", "10"]
    assert Tokenizer(punctuation="drop")(text) == dropped
    assert Tokenizer(punctuation="keep", lower=False)(text) == [
        "It's", "a", "CO-writer's", "film...", "10/10!",
    ]  # fmt: skip
    assert Tokenizer(pattern=r"[a-z]+")("Ab cd") == ["ab", "cd"]
    assert Tokenizer()("") == [] and Tokenizer()("  \n ") == []
    with pytest.raises(ValueError, match="punctuation"):
        Tokenizer(punctuation="strip")


def test_vocabulary_build_order_and_limits():
    docs = [["b", "a", "c"], ["a", "b"], ["a", "d"]]
    vocab = Vocabulary.build(docs)
    assert vocab.tokens == ["<pad>", "<unk>", "a", "b", "c", "d"]  # count desc, then alphabetical
    assert vocab.pad_id == 0 and vocab.unk_id == 1
    assert vocab.encode(["a", "zzz", "d"]) == [2, 1, 5]
    assert vocab.decode(torch.tensor([2, 1, 0])) == ["a", "<unk>", "<pad>"]
    assert vocab["missing"] == 1 and "a" in vocab and "zzz" not in vocab
    assert Vocabulary.build(docs, min_count=2).tokens == ["<pad>", "<unk>", "a", "b"]
    assert len(Vocabulary.build(docs, max_size=3)) == 3
    with pytest.raises(ValueError, match="twice"):
        Vocabulary(["a", "a"])
    with pytest.raises(ValueError, match="max_size"):
        Vocabulary.build(docs, max_size=1)


def test_vocabulary_json_round_trip(tmp_path):
    vocab = Vocabulary(["film", "fine", "été"])
    path = tmp_path / "vocab.json"
    vocab.save(path)
    assert json.loads(path.read_text(encoding="utf-8"))["tokens"][:3] == ["<pad>", "<unk>", "film"]
    loaded = Vocabulary.load(path)
    assert loaded == vocab and loaded.encode(["été"]) == [4]

    bad = tmp_path / "bad.json"
    bad.write_text('{"tokens": ["a", "b"]}')
    with pytest.raises(ValueError, match="bad.json"):
        Vocabulary.load(bad)
    bad.write_text("not json")
    with pytest.raises(ValueError, match="bad.json: not JSON"):
        Vocabulary.load(bad)


def test_window_edges_exact():
    edge_index = window_edge_index(4, 1)
    assert edge_index.tolist() == [
        [0, 1, 0, 1, 2, 1, 2, 3, 2, 3],  # sources
        [0, 0, 1, 1, 1, 2, 2, 2, 3, 3],  # targets
    ]
    assert torch.equal(window_edge_index(3, 0), torch.tensor([[0, 1, 2], [0, 1, 2]]))
    assert window_edge_index(5, 10).shape == (2, 25)  # window wider than the text: complete
    assert window_edge_index(0, 2).shape == (2, 0)
    with pytest.raises(ValueError, match="window"):
        window_edge_index(3, -1)


def test_document_to_data():
    vocab = Vocabulary(["a", "fine", "film"])
    data = document_to_data("A fine, fine film", vocab, window=2, y=1)
    assert data.tokens.tolist() == [2, 3, 1, 3, 4]  # "," is unknown
    assert data.pos.tolist() == [0, 1, 2, 3, 4]
    assert data.num_nodes == 5
    assert data.edge_index.shape == (2, 19)
    assert data.y.tolist() == [1]
    tokens = document_to_data(["film", "a"], vocab, max_length=1)
    assert tokens.tokens.tolist() == [4] and "edge_index" not in tokens


def test_empty_document_gives_empty_set():
    vocab = Vocabulary(["a"])
    data = document_to_data("", vocab, window=3)
    assert data.num_nodes == 0
    assert data.tokens.shape == (0,) and data.tokens.dtype == torch.long
    assert data.pos.shape == (0,)
    assert data.edge_index.shape == (2, 0) and data.edge_index.dtype == torch.long
    assert document_to_data(" ?! ", vocab, tokenizer=Tokenizer(punctuation="drop")).num_nodes == 0
    with pytest.raises(TypeError, match="argument document"):
        document_to_data(None, Vocabulary())
    with pytest.raises(ValueError, match="max_length"):
        document_to_data("a b", Vocabulary(), max_length=-1)


def test_batch_with_an_empty_document():
    vocab = Vocabulary(["good", "bad", "film"])
    batch = documents_to_batch(
        ["good film", "", "bad bad bad film"], vocab, labels=[1, 0, 0], window=1
    )
    assert batch.num_graphs == 3
    assert batch.ptr.tolist() == [0, 2, 2, 6]
    assert batch.batch.tolist() == [0, 0, 2, 2, 2, 2]
    assert batch.tokens.tolist() == [2, 4, 3, 3, 3, 4]
    assert batch.pos.tolist() == [0, 1, 0, 1, 2, 3]
    assert batch.y.tolist() == [1, 0, 0]
    assert batch.edge_index.shape == (2, 4 + 10)
    assert int(batch.edge_index.min()) == 0 and int(batch.edge_index.max()) == 5
    # edges never cross documents
    assert torch.equal(batch.batch[batch.edge_index[0]], batch.batch[batch.edge_index[1]])
    with pytest.raises(ValueError, match="labels"):
        documents_to_batch(["a", "b"], vocab, labels=[1])


def test_mr_sentences_as_word_sets():
    mr = load_mr()
    tokenizer = Tokenizer(punctuation="keep")  # MR is already tokenised
    documents = [tokenizer(text) for text in mr.texts]
    assert documents[0] == ["simplistic", ",", "silly", "and", "tedious", "."]
    vocab = Vocabulary.build(documents, min_count=2)
    counts = [len(doc) for doc in documents]
    data = document_to_data(documents[0], vocab)
    assert data.num_nodes == 6 and vocab.unk_id not in data.tokens.tolist()
    batch = documents_to_batch(documents[:64], vocab, labels=mr.labels[:64])
    assert batch.num_nodes == sum(counts[:64])
    assert batch.y.tolist() == [0] * 64


def test_docstring_examples():
    import doctest

    from setattn.domains import text

    result = doctest.testmod(text, verbose=False)
    assert result.attempted > 0 and result.failed == 0


@settings(max_examples=50, deadline=None)
@given(num_tokens=st.integers(0, 30), window=st.integers(0, 6))
def test_window_edges_match_definition(num_tokens, window):
    edge_index = window_edge_index(num_tokens, window)
    expected = [
        (j, i) for i in range(num_tokens) for j in range(num_tokens) if abs(i - j) <= window
    ]  # target-major, sources ascending
    assert list(zip(*edge_index.tolist(), strict=True)) == expected
