"""Plain PyTorch / PyG attention over a batch of sets, the anchors of benchmarks/engine.py.

Each takes the flat node layout PyG batches in, q, k, v (N, H, D) with the sets back to
back (``ptr`` (G + 1,) offsets, ``batch`` (N,) set of every node), and returns the
(N, H, D) output of every item attending to every item of its own set, with
``scaled_dot_product_attention`` doing the attention:

* :func:`pyg_dense_sdpa`: PyG's ``to_dense_batch`` pads every set to the largest, one
  SDPA call with a key padding mask (no mask when no slot is padding);
* :func:`nested_sdpa`: jagged nested tensors (``torch.nested``, ``layout=torch.jagged``),
  SDPA on them, no padding in the user's code;
* :func:`bucket_sdpa`: sets grouped by size into power-of-two buckets, ``to_dense_batch``
  + SDPA per bucket: a user's own size bucketing in a dozen lines.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import to_dense_batch


def pyg_dense_sdpa(q: Tensor, k: Tensor, v: Tensor, batch: Tensor, num_sets: int) -> Tensor:
    """Every set padded to the largest by ``to_dense_batch``, one masked SDPA call.

    Args:
        q, k, v: (N, H, D); batch: (N,) sorted set index; num_sets: G.

    Returns:
        (N, H, D).
    """
    heads, dim = q.shape[1], q.shape[2]
    qd, valid = to_dense_batch(q.flatten(1), batch, batch_size=num_sets)  # (G, L, H*D)
    kd, _ = to_dense_batch(k.flatten(1), batch, batch_size=num_sets)
    vd, _ = to_dense_batch(v.flatten(1), batch, batch_size=num_sets)
    g, length = valid.shape
    qd, kd, vd = (t.view(g, length, heads, dim).transpose(1, 2) for t in (qd, kd, vd))
    mask = None if bool(valid.all()) else valid[:, None, None, :]  # (G, 1, 1, L)
    out = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=mask)  # (G, H, L, D)
    return out.transpose(1, 2)[valid]  # (N, H, D)


def nested_sdpa(q: Tensor, k: Tensor, v: Tensor, ptr: Tensor) -> Tensor:
    """SDPA on jagged nested tensors built from the flat rows and ``ptr``.

    Args:
        q, k, v: (N, H, D); ptr: (G + 1,) set offsets.

    Returns:
        (N, H, D).
    """
    qn, kn, vn = (torch.nested.nested_tensor_from_jagged(t, ptr).transpose(1, 2)
                  for t in (q, k, v))  # (G, H, j, D)
    out = F.scaled_dot_product_attention(qn, kn, vn)  # (G, H, j, D)
    return out.transpose(1, 2).values()  # (N, H, D)


def bucket_sdpa(q: Tensor, k: Tensor, v: Tensor, batch: Tensor, ptr: Tensor) -> Tensor:
    """Sets grouped by ceil(log2(size)), ``to_dense_batch`` + SDPA per group.

    Args:
        q, k, v: (N, H, D); batch: (N,) sorted set index; ptr: (G + 1,) offsets.

    Returns:
        (N, H, D).
    """
    sizes = ptr[1:] - ptr[:-1]  # (G,)
    bucket = torch.ceil(torch.log2(sizes.clamp_min(1).double())).long()  # (G,)
    node_bucket = bucket[batch]  # (N,)
    out = torch.zeros_like(v)
    for b in torch.unique(bucket).tolist():
        sets = torch.nonzero(bucket == b).flatten()  # (B,) sets of this bucket
        nodes = torch.nonzero(node_bucket == b).flatten()  # (N_b,) their nodes, in order
        local = torch.searchsorted(sets, batch[nodes])  # (N_b,) set within the bucket
        ob = pyg_dense_sdpa(q[nodes], k[nodes], v[nodes], local, sets.numel())  # (N_b, H, D)
        out = out.index_copy(0, nodes, ob)
    return out
