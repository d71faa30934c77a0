"""examples/image_patches.py runs end to end in --quick mode: metrics and overlays."""

from __future__ import annotations

import pytest
import torch
from example_runs import check_help, check_pictures, load_example, quick_run

pytestmark = pytest.mark.slow  # make test-fast leaves these out


def test_image_patches_quick(tmp_path):
    last, stderr, metrics = quick_run("image_patches.py", tmp_path, 1)
    assert last.startswith("result: patch-set test accuracy digits")
    assert "mnist5k" in last and "100%" in stderr

    assert set(metrics["test_accuracy"]) == {"digits", "mnist5k"}
    digits, mnist = metrics["datasets"]["digits"], metrics["datasets"]["mnist5k"]
    assert digits["test"] == 359 and digits["patches_per_image"] == 16
    assert mnist["test"] == 1000 and mnist["patches_per_image"] == 49
    for result in (digits, mnist):
        assert 0.0 <= result["test_accuracy"] <= 1.0 and result["train"] == 300
    check_pictures(tmp_path, [digits["picture"], mnist["picture"]])


def test_random_shift_and_help(capsys):
    module = load_example("image_patches.py")
    images = torch.zeros(5, 1, 8, 8)
    images[:, :, 3:5, 3:5] = 1.0
    shifted = module.random_shift(images, 2, torch.Generator().manual_seed(0))
    assert shifted.shape == images.shape
    assert torch.equal(shifted.sum((1, 2, 3)), images.sum((1, 2, 3)))  # nothing cut off
    assert not torch.equal(shifted, images)  # something moved
    check_help(capsys, module.parse_args, ["--datasets", "--seed", "--out", "--quick"])
