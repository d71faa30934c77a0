"""Documents as word sets: tokenizer, vocabulary, document -> PyG ``Data``.

A document becomes a set of N token nodes with

- ``tokens`` (N,) long: vocabulary ids (the model embeds them);
- ``pos`` (N,) long: positions 0 .. N-1 (for positional encodings);
- optionally ``edge_index`` (2, E) long: the local-attention window graph, an
  edge j -> i for every pair with ``|i - j| <= window``, self pairs included
  (a token sees itself), sorted by target then source.

An empty document is valid and gives a ``Data`` with 0 tokens (and an empty
``edge_index`` when a window is asked for); pooled models then see an empty set,
which the engine turns into zeros rather than NaN.

Example:
    >>> tokenizer = Tokenizer()
    >>> docs = [tokenizer("A fine film."), tokenizer("A dull film!")]
    >>> vocab = Vocabulary.build(docs)
    >>> data = document_to_data("a fine, fine film", vocab, window=1)
    >>> data.tokens.shape, data.edge_index.shape
    (torch.Size([5]), torch.Size([2, 13]))
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

import torch
from torch_geometric.data import Batch, Data

__all__ = [
    "PAD",
    "UNK",
    "Tokenizer",
    "Vocabulary",
    "document_to_data",
    "documents_to_batch",
    "window_edge_index",
]

PAD = "<pad>"  # id 0
UNK = "<unk>"  # id 1

# A word is a run of letters/digits/underscores, with inner apostrophes kept
# ("it's", "don't"); every other non-space character is a token of its own.
_WORD = r"\w+(?:['\u2019]\w+)*"
_SPLIT_PATTERN = re.compile(rf"{_WORD}|[^\w\s]")
_DROP_PATTERN = re.compile(_WORD)


class Tokenizer:
    """Split text into tokens.

    Args:
        lower: lower-case the text first.
        punctuation: ``"split"`` makes each punctuation mark a token of its own,
            ``"drop"`` removes punctuation, ``"keep"`` splits on whitespace only
            (punctuation stays attached to words).
        pattern: a regular expression whose matches are the tokens; overrides
            ``punctuation`` when given.

    Example:
        >>> Tokenizer()("It's a co-writer's film!")
        ["it's", 'a', 'co', '-', "writer's", 'film', '!']
    """

    def __init__(
        self,
        *,
        lower: bool = True,
        punctuation: Literal["split", "drop", "keep"] = "split",
        pattern: str | None = None,
    ) -> None:
        if punctuation not in ("split", "drop", "keep"):
            raise ValueError(
                f"argument punctuation must be 'split', 'drop' or 'keep', got {punctuation!r}"
            )
        self.lower = lower
        self.punctuation = punctuation
        self.pattern = pattern
        if pattern is not None:
            self._regex: re.Pattern[str] | None = re.compile(pattern)
        elif punctuation == "split":
            self._regex = _SPLIT_PATTERN
        elif punctuation == "drop":
            self._regex = _DROP_PATTERN
        else:
            self._regex = None  # whitespace split

    def __call__(self, text: str) -> list[str]:
        """Tokenize one text; an empty or blank text gives an empty list."""
        if self.lower:
            text = text.lower()
        if self._regex is None:
            return text.split()
        return self._regex.findall(text)

    def __repr__(self) -> str:
        return (
            f"Tokenizer(lower={self.lower}, punctuation={self.punctuation!r}, "
            f"pattern={self.pattern!r})"
        )


class Vocabulary:
    """A token <-> id mapping with ``<pad>`` = 0 and ``<unk>`` = 1.

    Args:
        tokens: the regular tokens in id order (ids 2, 3, ...). They must be
            distinct and must not include the two special tokens.

    Example:
        >>> vocab = Vocabulary(["film", "fine"])
        >>> vocab.encode(["fine", "film", "dull"])
        [3, 2, 1]
    """

    pad_id = 0
    unk_id = 1

    def __init__(self, tokens: Iterable[str] = ()) -> None:
        self._itos: list[str] = [PAD, UNK]
        self._stoi: dict[str, int] = {PAD: 0, UNK: 1}
        for token in tokens:
            if token in self._stoi:
                raise ValueError(f"argument tokens: {token!r} appears twice or is special")
            self._stoi[token] = len(self._itos)
            self._itos.append(token)

    @classmethod
    def build(
        cls,
        documents: Iterable[Sequence[str]],
        *,
        min_count: int = 1,
        max_size: int | None = None,
    ) -> Vocabulary:
        """Build a vocabulary from tokenized documents.

        Tokens are ordered by decreasing count, ties alphabetically, so the same
        corpus always gives the same ids.

        Args:
            documents: token lists (e.g. ``[tokenizer(t) for t in texts]``).
            min_count: keep tokens seen at least this many times.
            max_size: the largest vocabulary size, the two special tokens included;
                None for no limit.

        Returns:
            The vocabulary.
        """
        if min_count < 1:
            raise ValueError(f"argument min_count must be >= 1, got {min_count}")
        if max_size is not None and max_size < 2:
            raise ValueError(f"argument max_size must be >= 2 (the special tokens), got {max_size}")
        counts: Counter[str] = Counter()
        for document in documents:
            counts.update(document)
        for special in (PAD, UNK):
            counts.pop(special, None)
        kept = [token for token, count in counts.items() if count >= min_count]
        kept.sort(key=lambda token: (-counts[token], token))
        if max_size is not None:
            kept = kept[: max_size - 2]
        return cls(kept)

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: object) -> bool:
        return token in self._stoi

    def __getitem__(self, token: str) -> int:
        """The id of ``token``, or ``unk_id`` if it is not in the vocabulary."""
        return self._stoi.get(token, self.unk_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Vocabulary) and self._itos == other._itos

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)})"

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order, the special tokens first."""
        return list(self._itos)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        """Token ids; unknown tokens map to ``unk_id``."""
        get = self._stoi.get
        return [get(token, 1) for token in tokens]

    def decode(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """Tokens for ids (a list or a 1-D tensor)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return [self._itos[i] for i in ids]

    def save(self, path: str | Path) -> None:
        """Write the vocabulary as JSON: ``{"format": ..., "tokens": [...]}``."""
        payload = {"format": "setattn.Vocabulary", "version": 1, "tokens": self._itos}
        Path(path).write_text(json.dumps(payload, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Vocabulary:
        """Read a vocabulary written by ``save``.

        Raises:
            ValueError: if the file is not a saved vocabulary (naming the file).
        """
        path = Path(path)
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not JSON ({err})") from None
        tokens = payload.get("tokens") if isinstance(payload, dict) else None
        if not isinstance(tokens, list) or tokens[:2] != [PAD, UNK]:
            raise ValueError(
                f"{path}: not a saved Vocabulary (expected 'tokens' starting {PAD}, {UNK})"
            )
        try:
            return cls(tokens[2:])
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None


def window_edge_index(num_tokens: int, window: int, *,
                      device: torch.device | str | None = None) -> torch.Tensor:
    """The local-attention window graph over a sequence.

    Args:
        num_tokens: N, the sequence length.
        window: w >= 0; token i attends to tokens i - w .. i + w (itself included).
        device: where the edges are built (the CPU by default).

    Returns:
        edge_index (2, E) long, row 0 = source j, row 1 = target i, sorted by
        target then source.
    """
    if window < 0:
        raise ValueError(f"argument window must be >= 0, got {window}")
    offsets = torch.arange(-window, window + 1, device=device)  # (2w+1,)
    tokens = torch.arange(num_tokens, device=device)  # (N,)
    target = tokens[:, None].expand(-1, offsets.numel())  # (N, 2w+1)
    source = target + offsets  # (N, 2w+1)
    valid = (source >= 0) & (source < num_tokens)
    return torch.stack([source[valid], target[valid]])  # (2, E)


def document_to_data(
    document: str | Sequence[str],
    vocab: Vocabulary,
    *,
    tokenizer: Tokenizer | None = None,
    window: int | None = None,
    max_length: int | None = None,
    y: int | None = None,
) -> Data:
    """Turn one document into a set of token nodes.

    Args:
        document: a text, or an already tokenized list of tokens.
        vocab: maps tokens to ids (unknown tokens get ``<unk>``).
        tokenizer: used for a text; defaults to ``Tokenizer()``.
        window: if given, add the window graph (see ``window_edge_index``).
        max_length: keep only the first ``max_length`` tokens.
        y: an optional class label, stored as ``y`` of shape (1,).

    Returns:
        ``Data`` with ``tokens`` (N,) long, ``pos`` (N,) long, ``num_nodes`` N,
        and optionally ``edge_index`` (2, E) long and ``y`` (1,) long.
        An empty document gives N = 0.
    """
    if isinstance(document, str):
        tokens = (tokenizer or Tokenizer())(document)
    elif isinstance(document, Sequence):
        tokens = list(document)
    else:
        raise TypeError(
            "argument document must be a text or a sequence of tokens, "
            f"got {type(document).__name__}"
        )
    if max_length is not None:
        if max_length < 0:
            raise ValueError(f"argument max_length must be >= 0, got {max_length}")
        tokens = tokens[:max_length]
    num_tokens = len(tokens)
    data = Data(
        tokens=torch.tensor(vocab.encode(tokens), dtype=torch.long),  # (N,)
        pos=torch.arange(num_tokens),  # (N,)
        num_nodes=num_tokens,
    )
    if window is not None:
        data.edge_index = window_edge_index(num_tokens, window)
    if y is not None:
        data.y = torch.tensor([y], dtype=torch.long)
    return data


def documents_to_batch(
    documents: Sequence[str | Sequence[str]],
    vocab: Vocabulary,
    *,
    labels: Sequence[int] | torch.Tensor | None = None,
    tokenizer: Tokenizer | None = None,
    window: int | None = None,
    max_length: int | None = None,
) -> Batch:
    """Turn several documents into one PyG ``Batch``.

    Args:
        documents: G texts or token lists.
        vocab: maps tokens to ids.
        labels: optional G class labels, stored as ``y`` (G,).
        tokenizer, window, max_length: as in ``document_to_data``.

    Returns:
        ``Batch`` with ``tokens`` (N_total,), ``pos`` (N_total,), ``batch``
        (N_total,) graph ids, ``ptr`` (G + 1,), and ``edge_index`` / ``y`` when asked.
    """
    if labels is not None and len(labels) != len(documents):
        raise ValueError(
            f"argument labels has {len(labels)} entries for {len(documents)} documents"
        )
    tokenizer = tokenizer or Tokenizer()
    data_list = [
        document_to_data(
            document,
            vocab,
            tokenizer=tokenizer,
            window=window,
            max_length=max_length,
            y=None if labels is None else int(labels[k]),
        )
        for k, document in enumerate(documents)
    ]
    return Batch.from_data_list(data_list)
