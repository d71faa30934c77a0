"""Linear text classifiers for examples/documents.py: the TF-IDF + logistic regression
baseline, the linear partner of the ensemble, and the choice of the ensemble weight.

Both linear models are scikit-learn pipelines: TF-IDF features (sublinear term
frequencies) and a logistic regression (liblinear; one-vs-rest for more than two
classes), whose inverse regularisation C is chosen on the validation part. Then the
model is refitted with that C on the training and validation parts together, the best
use of the same data the example's own model sees.

- ``baseline``: word unigrams and bigrams (the usual strong baseline of short-text
  classification).
- ``partner``: the same plus character 2- to 5-grams inside word boundaries, which
  carry rare and unseen words (names, numbers, misspellings) that word features lose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from scipy.sparse import csr_matrix
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import FeatureUnion
from torch import Tensor

C_GRID = (0.3, 1.0, 3.0, 10.0, 30.0)
"""Values of C tried on the validation part."""

WEIGHT_GRID = tuple(k / 10 for k in range(11))
"""Weights of the attention model's probabilities tried on the validation part."""


@dataclass
class LinearResult:
    """A linear model's choice of C and its probabilities.

    Attributes:
        name: ``baseline`` or ``partner``.
        c: the C chosen on the validation part.
        val_accuracy: validation accuracy of the model fitted on the training part.
        val_probs: (M_val, C) probabilities of that model on the validation part.
        test_probs: (M_test, C) probabilities of the model refitted on training and
            validation parts, on the test part.
        test_accuracy: accuracy of ``test_probs``.
    """

    name: str
    c: float
    val_accuracy: float
    val_probs: Tensor
    test_probs: Tensor
    test_accuracy: float


def _features(chars: bool, word_ngrams: int = 2) -> FeatureUnion:
    """TF-IDF word 1- to ``word_ngrams``-grams (plus char_wb 2-5-grams when ``chars``)."""
    words = TfidfVectorizer(ngram_range=(1, word_ngrams), token_pattern=r"\S+",
                            lowercase=True, sublinear_tf=True)
    parts = [("words", words)]
    if chars:
        parts.append(("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5),
                                               lowercase=True, sublinear_tf=True)))
    return FeatureUnion(parts)


def _classifier(c: float, classes: int) -> LogisticRegression | OneVsRestClassifier:
    """Logistic regression (liblinear), one-vs-rest for more than two classes."""
    lr = LogisticRegression(C=c, solver="liblinear")
    return lr if classes == 2 else OneVsRestClassifier(lr)


def _probs(model: LogisticRegression | OneVsRestClassifier, x: csr_matrix, classes: int
           ) -> Tensor:
    """(M, C) probabilities of the rows of x; classes absent from training get 0."""
    out = np.zeros((x.shape[0], classes))
    if x.shape[0]:
        out[:, model.classes_] = model.predict_proba(x)
    return torch.tensor(out, dtype=torch.float32)


def fit_linear(name: str, texts: Sequence[str], labels: Tensor, split: tuple[Tensor, ...],
               classes: int, word_ngrams: int = 2) -> LinearResult:
    """Choose C on the validation part, refit on training + validation, predict the test part.

    Args:
        name: ``baseline`` (word 1-2 grams) or ``partner`` (plus character n-grams).
        texts: all M texts, space-separated tokens.
        labels: (M,) class indices.
        split: (train, validation, test) index tensors into ``texts``.
        classes: C.
        word_ngrams: word n-grams up to this n.

    Returns:
        A ``LinearResult``.
    """
    train, val, test = split
    pick = [[texts[i] for i in part.tolist()] for part in split]
    partner = name == "partner"
    features = _features(partner, word_ngrams).fit(pick[0])  # on the training part only
    x_train, x_val = features.transform(pick[0]), features.transform(pick[1])
    best = None
    for c in C_GRID:
        model = _classifier(c, classes).fit(x_train, labels[train].numpy())
        probs = _probs(model, x_val, classes)  # (M_val, C)
        acc = float((probs.argmax(1) == labels[val]).float().mean()) if len(val) else 0.0
        if best is None or acc > best[1]:
            best = (c, acc, probs)
    c, val_acc, val_probs = best
    both = torch.cat([train, val])
    features = _features(partner, word_ngrams).fit(pick[0] + pick[1])
    model = _classifier(c, classes).fit(features.transform(pick[0] + pick[1]),
                                        labels[both].numpy())
    test_probs = _probs(model, features.transform(pick[2]), classes)  # (M_test, C)
    test_acc = float((test_probs.argmax(1) == labels[test]).float().mean())
    return LinearResult(name, c, val_acc, val_probs, test_probs, test_acc)


def choose_weight(attention: Tensor, linear: Tensor, y: Tensor) -> tuple[float, float]:
    """The weight w of ``w * attention + (1 - w) * linear`` best on validation.

    Args:
        attention: (M, C) the attention model's validation probabilities.
        linear: (M, C) the linear partner's validation probabilities.
        y: (M,) validation labels.

    Returns:
        (w, validation accuracy); ties go to the w closest to 0.5.
    """
    scored = []
    for w in WEIGHT_GRID:
        acc = float(((w * attention + (1 - w) * linear).argmax(1) == y).float().mean())
        scored.append((acc, -abs(w - 0.5), w))
    acc, _, w = max(scored)
    return w, acc
