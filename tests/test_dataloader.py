"""MetadataTensor samples through torch.utils.data: default_collate, worker processes and
pinned memory keep every sample's metadata (batched as lists, one entry per sample)."""

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from tensortools import MetadataTensor


class _Samples(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        x = MetadataTensor(torch.full((2, 3), float(i)), {"id": i, "name": f"s{i}"})
        return x, i % 2


def _check_batches(batches, batch_size=4):
    seen = []
    for x, label in batches:
        assert type(x) is MetadataTensor
        ids = x.metadata["id"]
        assert x.metadata["name"] == [f"s{i}" for i in ids]
        torch.testing.assert_close(
            x.as_subclass(torch.Tensor), torch.stack([torch.full((2, 3), float(i)) for i in ids])
        )
        assert torch.equal(label, torch.tensor([i % 2 for i in ids]))
        seen += ids
    assert sorted(seen) == list(range(10))


def test_default_collate_lists_per_sample_metadata():
    batch = default_collate([MetadataTensor(torch.ones(2) * i, {"id": i}) for i in range(3)])
    assert type(batch) is MetadataTensor and batch.metadata == {"id": [0, 1, 2]}
    torch.testing.assert_close(
        batch.as_subclass(torch.Tensor), torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    )


def test_samples_with_different_keys_are_refused():
    with pytest.raises(ValueError, match="sample 1 has metadata keys"):
        default_collate(
            [MetadataTensor(torch.ones(1), {"a": 1}), MetadataTensor(torch.ones(1), {"b": 1})]
        )


def test_dataloader_in_process():
    _check_batches(DataLoader(_Samples(), batch_size=4))


def test_dataloader_two_workers():
    _check_batches(DataLoader(_Samples(), batch_size=4, num_workers=2))


def test_dataloader_pin_memory():
    # Without an accelerator DataLoader warns and leaves memory unpinned; the batches
    # keep their metadata either way.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(_Samples(), batch_size=4, num_workers=2, pin_memory=True)
        batches = list(loader)
    _check_batches(batches)
    if torch.cuda.is_available():
        assert all(x.is_pinned() for x, _ in batches)
