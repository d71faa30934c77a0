"""Record the attention weights of every ``attend`` call inside a ``with`` block.

For example::

    with setattn.capture() as att:
        out = model(batch)
    att["encoder.layers.0.attn"]   # AttentionGraph(edge_index (2, E), weights (E, H))

Keys are the dotted path of the innermost module running when ``attend`` was called,
relative to the outermost module called inside the block (as in
``model.named_modules()``). A module that attends several times in one forward gets
``path``, ``path#1``, ``path#2`` ... ; a bare ``attend`` outside any module is recorded
under ``"attend"``. Forward signatures stay unchanged: module entry and exit are
tracked with global forward hooks that exist only while the block is open.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn
from torch.nn.modules.module import (
    register_module_forward_hook,
    register_module_forward_pre_hook,
)

_captures: list[Capture] = []


class Capture(dict):
    """Mapping from module path to the ``AttentionGraph`` its attention produced."""

    def __init__(self) -> None:
        super().__init__()
        self._stack: list[nn.Module] = []
        self._names: dict[int, str] = {}

    def _enter(self, module: nn.Module) -> None:
        if not self._stack:
            self._names = {id(m): name for name, m in module.named_modules()}
        self._stack.append(module)

    def _exit(self, module: nn.Module) -> None:
        if self._stack and self._stack[-1] is module:
            self._stack.pop()

    def _path(self) -> str:
        if not self._stack:
            return "attend"
        name = self._names.get(id(self._stack[-1]))
        if name is None:  # a module created during the forward pass
            name = type(self._stack[-1]).__name__
        return name or type(self._stack[-1]).__name__

    def record(self, graph: Any) -> None:
        key = base = self._path()
        n = 1
        while key in self:
            key, n = f"{base}#{n}", n + 1
        self[key] = graph


def is_capturing() -> bool:
    """True inside a ``capture()`` block: ``attend`` then computes weights to record."""
    return bool(_captures)


def record(graph: Any) -> None:
    """Called by the engine with a detached ``AttentionGraph``."""
    for cap in _captures:
        cap.record(graph)


def _pre_hook(module: nn.Module, args: Any) -> None:
    for cap in _captures:
        cap._enter(module)


def _post_hook(module: nn.Module, args: Any, output: Any) -> None:
    for cap in _captures:
        cap._exit(module)


@contextmanager
def capture() -> Iterator[Capture]:
    """Open a recording of attention weights; yields the ``Capture`` mapping."""
    cap = Capture()
    handles = []
    if not _captures:
        handles = [
            register_module_forward_pre_hook(_pre_hook),
            register_module_forward_hook(_post_hook, always_call=True),
        ]
    _captures.append(cap)
    try:
        yield cap
    finally:
        _captures.remove(cap)
        for h in handles:
            h.remove()
