"""Random batches of molecule-like graphs for the benchmarks (benchmarks/compile.py,
benchmarks/layers.py --small).

A molecule-like graph of n atoms is a chain with a ring closure every 6 atoms (bond
i -> i + 5), bonds in both directions: about 2.3 n directed bonds, degree 2 to 3, as
organic molecules have.
"""

from __future__ import annotations

import torch


def molecule_batch(graphs: int, gen: torch.Generator, sizes: tuple[int, int] = (10, 40),
                   dim: int = 64, bond_dim: int = 7) -> dict[str, torch.Tensor]:
    """``graphs`` random molecule-like graphs of ``sizes[0]``..``sizes[1]`` atoms.

    Returns:
        x (N, dim), edge_index (2, E) bonds both directions, edge_attr (E, bond_dim),
        batch (N,) and ptr (G + 1,).
    """
    counts = torch.randint(sizes[0], sizes[1] + 1, (graphs,), generator=gen)  # (G,)
    ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])  # (G + 1,)
    src, dst = [], []
    for g in range(graphs):
        start, n = int(ptr[g]), int(counts[g])
        chain = torch.arange(start, start + n - 1)  # (n - 1,)
        ring = torch.arange(start, start + n - 6, 6)  # ring closures i -> i + 5
        src += [chain, ring]
        dst += [chain + 1, ring + 5]
    src, dst = torch.cat(src), torch.cat(dst)
    bonds = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])  # (2, E)
    n = int(ptr[-1])
    return {"x": torch.randn(n, dim, generator=gen),
            "edge_index": bonds,
            "edge_attr": torch.randn(bonds.shape[1], bond_dim, generator=gen),
            "batch": torch.repeat_interleave(torch.arange(graphs), counts),
            "ptr": ptr}
