"""Word pictures of examples/documents.py: test sentences with every word shaded by its
contribution to the predicted class, by two methods of ``setattn.explain``.

- attention: the pooling weight of the word (mean over heads) times the number of words,
  so that 1, "as much as a uniform weight", is white; what the model looks at, not a
  contribution to the output.
- integrated gradients (captum) on the word's inputs (its embedding and its log-count
  ratios, those of the n-grams starting at it included), from all-zero inputs: the
  contributions sum to the predicted class's logit minus the logit of all-zero inputs.

Both are means over the ensemble's models; the prediction is the models' averaged
probabilities (the attention models alone, without the linear partner).
"""

from __future__ import annotations

from pathlib import Path

import torch
from documents_data import Encoded
from torch import Tensor, nn
from torch_geometric.data import Batch, Data

from setattn.explain import attention_contributions, integrated_gradients
from setattn.viz import WordSection, plot_word_contributions, words_contributions_html


class FromInputs(nn.Module):
    """A classifier run from its node inputs: (batch with x (N, D + R)) -> (G, C) logits.

    Called as a module, so that ``setattn.capture`` names its pooling ``model.pool``.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: Batch) -> Tensor:
        return self.model.from_inputs(batch.x, batch.ptr)  # (G, C)


def explain_sentence(models: list[nn.Module], sentence: Encoded, target: int
                     ) -> tuple[Tensor, Tensor]:
    """Attention relative to uniform and integrated gradients of one sentence.

    Args:
        models: ``DocumentClassifier``s (with ``node_inputs`` and ``from_inputs``).
        sentence: one sentence of n words.
        target: the class whose logit is explained.

    Returns:
        (n,) pooling weight x n, and (n,) integrated gradients of the logit of
        ``target``, each averaged over the models.
    """
    attention, gradients = 0.0, 0.0
    for model in models:
        model.eval()
        with torch.no_grad():
            data = Data(x=model.node_inputs(sentence.ids, sentence.ratios,
                                            sentence.chars))  # (n, D + R)
        forward = FromInputs(model)
        attention = attention + attention_contributions(forward, data, "model.pool",
                                                        target).values
        gradients = gradients + integrated_gradients(forward, data, target).values
        model.train()
    return attention / len(models), gradients / len(models)  # (n,), (n,)


def draw_sentences(models: list[nn.Module], data: Encoded, tokens: list[list[str]],
                   classes: list[str], probs: Tensor, out: Path, count: int) -> list[Path]:
    """An HTML page and two PNGs (attention, integrated gradients) of ``count`` sentences.

    Args:
        models: the ensemble.
        data: the (test) sentences.
        tokens: their tokens.
        classes: class names.
        probs: (M, C) the ensemble's probabilities of ``data``.
        out: output directory.
        count: sentences drawn: the first with 6 to 30 words.

    Returns:
        The files written (none when no sentence has 6 to 30 words).
    """
    chosen = [i for i, t in enumerate(tokens) if 6 <= len(t) <= 30][:count]
    attention_rows, gradient_rows = [], []
    for i in chosen:
        sentence = data.select(torch.tensor([i]))
        pred, truth = int(probs[i].argmax()), int(data.y[i])
        mark = "correct" if pred == truth else "wrong"
        caption = (f"predicted: {classes[pred]} (p={probs[i, pred]:.2f}), true: "
                   f"{classes[truth]} ({mark})")
        attention, gradients = explain_sentence(models, sentence, pred)
        words = tokens[i][: attention.numel()]
        attention_rows.append((words, attention, caption))
        gradient_rows.append((words, gradients, caption))
    if not chosen:
        return []
    models_note = f" (mean over {len(models)} models)" if len(models) > 1 else ""
    sections = [
        WordSection("attention pooling weight relative to uniform" + models_note,
                    attention_rows, "pooling weight x words (1 = uniform)", centre=1.0),
        WordSection("integrated gradients on the word inputs" + models_note, gradient_rows,
                    "contribution to the predicted class's logit"),
    ]
    title = "test sentences: words by their share in the prediction"
    return [words_contributions_html(sections, out / "sentences.html", title=title),
            plot_word_contributions(sections[0], out / "words_attention.png"),
            plot_word_contributions(sections[1], out / "words_integrated_gradients.png")]
