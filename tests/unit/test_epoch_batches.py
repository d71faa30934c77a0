"""The training loop's batches: DataLoader's order for a seed, and the sum readout."""

from __future__ import annotations

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler
from torch_geometric.data import Data
from torch_geometric.utils import scatter

from setattn.molprop.batching import PackedMolecules
from setattn.molprop.distributed import ShardBatchSampler
from setattn.molprop.loop import EpochBatches
from setattn.molprop.network import sum_pool


def _molecules(m: int) -> list[Data]:
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(m):
        n = 2 + i % 5
        ring = torch.arange(n)
        edge_index = torch.stack([torch.cat([ring, ring.roll(1)]), torch.cat([ring.roll(1), ring])])
        out.append(Data(x=torch.randn(n, 4, generator=g), edge_index=edge_index, smiles="C",
                        edge_attr=torch.randn(2 * n, 3, generator=g), y=torch.tensor([[float(i)]])))
    return out


def _sampler(m: int, generator: torch.Generator) -> ShardBatchSampler:
    return ShardBatchSampler(BatchSampler(RandomSampler(range(m), generator=generator), 4, False),
                             0, 1)


def test_epoch_batches_give_dataloaders_batches_and_leave_its_generator_state():
    data = _molecules(23)
    packed = PackedMolecules(data)
    ours_gen, ref_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    ours = EpochBatches(packed, _sampler(23, ours_gen), ours_gen)
    ref = DataLoader(range(23), batch_sampler=_sampler(23, ref_gen), generator=ref_gen,
                     collate_fn=packed.training_batch)
    assert len(ours) == len(ref) == 6
    for _ in range(3):  # epochs: each draws what DataLoader draws
        got, want = list(ours), list(ref)
        assert [b.y.flatten().tolist() for b in got] == [b.y.flatten().tolist() for b in want]
        for a, b in zip(got, want):
            assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(ours_gen.get_state(), ref_gen.get_state())


def test_sum_pool_gives_scatters_sums_and_gradient():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(50, 8, generator=g, requires_grad=True)
    batch = torch.arange(7).repeat_interleave(torch.tensor([9, 1, 6, 12, 3, 11, 8]))  # (50,)
    ours = sum_pool(h, batch, 8)  # one empty molecule at the end
    ref = scatter(h, batch, 0, dim_size=8, reduce="sum")
    assert torch.equal(ours, ref)
    weight = torch.randn(8, 8, generator=g)
    (g_ours,) = torch.autograd.grad((ours * weight).sum(), h)
    (g_ref,) = torch.autograd.grad((ref * weight).sum(), h)
    assert torch.equal(g_ours, g_ref)
