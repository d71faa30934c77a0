"""examples/image_patches.py: a quick run learns; splits, shifts and pictures."""

from __future__ import annotations

import pytest
import torch
from example_runs import check_help, check_pictures, load_example, quick_run

from setattn.datasets import load_digits
from setattn.domains import images_to_batch

pytestmark = pytest.mark.slow  # make test-fast leaves these out


def test_image_patches_quick_run_learns(tmp_path):
    last, stderr, metrics = quick_run("image_patches.py", tmp_path, 1)
    assert last.startswith("result: patch-set test accuracy digits")
    assert "mnist5k" in last and "epoch chosen on validation" in last and "100%" in stderr

    digits, mnist = metrics["datasets"]["digits"], metrics["datasets"]["mnist5k"]
    assert (digits["test"], digits["validation"], digits["patches_per_image"]) == (359, 180, 16)
    assert (mnist["test"], mnist["validation"], mnist["patches_per_image"]) == (1000, 500, 16)
    # 10 classes, none over 12 % of either set: 8 quick epochs must beat that guess by far
    # (about 0.89 and 0.56 are reached; a model that does not learn stays near 0.1)
    assert digits["test_accuracy_mean"] > 0.5 and mnist["test_accuracy_mean"] > 0.3, metrics
    for result in (digits, mnist):
        (run,) = result["runs"]
        assert run["train"] == 1000 and len(run["val_curve"]) == 8
        assert run["val_accuracy"] == max(run["val_curve"])  # the epoch chosen on validation
        assert run["val_curve"][run["best_epoch"] - 1] == run["val_accuracy"]
        check_pictures(tmp_path, result["pictures"])
    assert digits["pictures"] == ["digits_integrated_gradients.png", "digits_attention.png"]


def test_splits_are_disjoint_and_seeded():
    module = load_example("image_patches.py")
    data = load_digits()
    train, val, test = module.split(data, 0.1, 0.2, seed=3)
    assert (len(train), len(val), len(test)) == (1258, 180, 359)
    together = torch.cat([train, val, test])
    assert together.unique().numel() == len(data.labels)  # a partition of all images
    assert torch.equal(module.split(data, 0.1, 0.2, seed=3)[2], test)
    assert not torch.equal(module.split(data, 0.1, 0.2, seed=4)[2], test)


def test_integrated_gradients_of_the_example_add_up():
    """The picture's values: per-patch contributions summing to logit(image) - logit(black)."""
    module = load_example("image_patches.py")
    torch.manual_seed(0)
    model = module.PatchSetClassifier(4, 10, dim=16, heads=2, layers=1)
    images = torch.rand(2, 1, 8, 8)
    preds, probs, ig, att = module.explain_images(model, images, 2)
    assert ig.shape == att.shape == (2, 16) and preds.shape == probs.shape == (2,)
    assert torch.allclose(att.mean(1), torch.ones(2), atol=1e-5)  # x P: mean 1 = uniform
    for k in range(2):
        data = module.one_set(images[k], 2, 2)
        batch = module.Batch.from_data_list([data])
        black = module.Batch.from_data_list([module.one_set(images[k] * 0, 2, 2)])
        with torch.no_grad():
            gap = (model(batch.x, batch.pos, batch.ptr) - model(black.x, black.pos, black.ptr))
        assert float(ig[k].sum()) == pytest.approx(float(gap[0, preds[k]]), abs=2e-2)


def test_random_shift_and_help(capsys):
    module = load_example("image_patches.py")
    images = torch.zeros(5, 1, 8, 8)
    images[:, :, 3:5, 3:5] = 1.0
    shifted = module.random_shift(images, 2, torch.Generator().manual_seed(0))
    assert shifted.shape == images.shape
    assert torch.equal(shifted.sum((1, 2, 3)), images.sum((1, 2, 3)))  # nothing cut off
    assert not torch.equal(shifted, images)  # something moved
    check_help(capsys, module.parse_args, ["--datasets", "--seeds", "--val-fraction",
                                           "--seed", "--out", "--quick"])


def test_overlapping_windows_keep_one_token_per_patch():
    """window = p gives the plain patches; a larger window adds the pixels around each."""
    module = load_example("image_patches.py")
    images, labels = torch.rand(3, 1, 8, 8), torch.tensor([0, 1, 2])
    plain, wide = module.to_batch(images, labels, 2, 2), module.to_batch(images, None, 2, 6)
    reference = images_to_batch(images, 2, labels=labels)
    for key in ("x", "pos", "ptr", "batch", "y"):
        assert torch.equal(plain[key], reference[key]), key
    assert wide.x.shape == (48, 36) and torch.equal(wide.pos, plain.pos)
    cells = wide.x.reshape(48, 6, 6)
    assert torch.equal(cells[:, 2:4, 2:4].reshape(48, 4), plain.x)  # the patch in the middle
    assert torch.equal(cells[0, :2], torch.zeros(2, 6))  # outside the image: zeros
    assert torch.equal(cells[1, 2:, 0:2], images[0, 0, 0:4, 0:2])  # the neighbour's pixels
    with pytest.raises(ValueError, match="window"):
        module.patch_windows(images, 2, 3)


def test_affine_augmentation_and_test_time_views():
    module = load_example("image_patches.py")
    images = torch.zeros(4, 1, 8, 8)
    images[:, :, 2:6, 3:5] = 1.0
    gen = torch.Generator().manual_seed(0)
    assert module.random_affine(images, 0.0, 0.0, gen) is images
    turned = module.random_affine(images, 20.0, 0.1, gen)
    assert turned.shape == images.shape and not torch.allclose(turned, images)
    assert abs(float(turned.sum() - images.sum())) < 0.3 * float(images.sum())  # moved, kept
    views = module.shifted_views(images, 1)
    assert len(views) == 5 and torch.equal(views[0], images)
    assert torch.equal(views[1][:, :, 3:7], images[:, :, 2:6])  # down by one row
    assert torch.equal(views[2][:, :, 1:5], images[:, :, 2:6])  # up by one row
    assert len(module.shifted_views(images, 0)) == 1
