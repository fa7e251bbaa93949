"""Tests of frost_nb.inputs: the number validators, the split check, and the command line's
evaluate and sweep on a split that does not fit the model. (The image checks are tested at
their entry points: adaptive_predict in test_halting.py, ExitCache.from_model in
test_exits.py.)"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from frost_nb.__main__ import main
from frost_nb.config import ConfigError, make_config
from frost_nb.data.datasets import DATASETS, DataError, ImageData
from frost_nb.halting import HaltingCalibrator
from frost_nb.inputs import check_images, check_split, number_in
from frost_nb.models import create_model

# --- numbers -----------------------------------------------------------------------------------

def test_number_in():
    assert number_in("q", 0, 0, 1) == 0.0 and number_in("q", 1, 0, 1) == 1.0  # closed interval
    assert number_in("k", np.int64(8), 8, 16, integer=True) == 8
    assert type(number_in("k", 9, 8, 16, integer=True)) is int
    for bad in (-0.1, 1.5, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"is (outside \[0, 1\]|not a number): expected a real number in \[0, 1\]: hint"):
            number_in("q", bad, 0, 1, hint=": hint")
    with pytest.raises(ValueError, match=r"k=2\.0 must be an integer in \[8, 16\]"):
        number_in("k", 2.0, 8, 16, integer=True)
    with pytest.raises(ValueError, match=r"k=True must be an integer"):
        number_in("k", True, 0, 16, integer=True)
    # a real number: a one-element tensor or array counts, +-inf within an infinite interval; NaN never
    assert number_in("a", np.float32(0.25), 0, 1) == 0.25 and number_in("a", torch.tensor([0.5]), 0, 1) == 0.5
    assert number_in("a", math.inf, -math.inf, math.inf) == math.inf
    with pytest.raises(ValueError, match=r"a=nan is not a number: expected a real number in \[-inf, inf\]"):
        number_in("a", math.nan, -math.inf, math.inf)
    for bad in (True, "1", None, [1.0], torch.tensor([1.0, 2.0])):
        with pytest.raises(ValueError, match=r"must be a real number in \[0, 1\]"):
            number_in("a", bad, 0, 1)


# --- images and splits -------------------------------------------------------------------------

def _split(x: torch.Tensor | None, name: str = "digits") -> ImageData:
    n = 4 if x is None else len(x)
    return ImageData(x, torch.zeros(n, dtype=torch.int64), DATASETS[name], ["a", "b"], name,
                     "test", "synthetic")


@pytest.fixture(scope="module")
def smoke():
    config = make_config("smoke")
    torch.manual_seed(0)
    return config, create_model(config.model).eval()


def test_check_images_leaves_a_good_batch_alone_and_skips_shapes_without_an_image_config(smoke):
    _, model = smoke
    x = torch.randn(3, 1, 8, 8)
    assert check_images(model, x) is x  # no copy when nothing needs converting
    standin = torch.nn.Linear(6, 2)
    standin.config = SimpleNamespace(steps=3)  # no in_channels, no image_size
    assert check_images(standin, torch.ones(5, 6)).shape == (5, 6)
    with pytest.raises(ValueError, match="NaN or infinite"):
        check_images(standin, torch.full((5, 6), math.nan))
    huge = torch.full((5, 6), 3e38)  # finite pixels whose sum overflows: counted, and good
    assert torch.isinf(huge.sum()) and check_images(standin, huge) is huge
    for bad in (math.inf, -math.inf):  # one infinity among them (a sum of inf or inf - inf): named
        x = huge.clone()
        x[1, 2] = bad
        with pytest.raises(ValueError, match=r"1 NaN or infinite pixel value\(s\) out of 30"):
            check_images(standin, x)
    # defect: a tensor kept its device (CPU images for a GPU model failed inside the model); "meta" stands in
    # for the model's device, checked on the images' own
    assert check_images(standin.to("meta"), torch.ones(5, 6)).device.type == "meta"


def test_check_split(smoke):
    _, model = smoke
    check_split(model, _split(torch.zeros(5, 1, 8, 8, dtype=torch.uint8)))
    with pytest.raises(DataError, match=r"the imagenet100 test split has 3 channel\(s\)"):
        check_split(model, _split(None, "imagenet100"))  # a folder set: its info's shape
    with pytest.raises(DataError, match=r"the digits test split has shape \(5, 8, 8\), no batch"):
        check_split(model, _split(torch.zeros(5, 8, 8, dtype=torch.uint8)))


# --- the command line ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["evaluate", "--quantile", "0.5"], ["sweep"]])
def test_cli_reports_a_split_that_does_not_fit_the_model(smoke, monkeypatch, capsys, command):
    # the split (3-channel images) disagrees with the checkpoint's model (1 channel): an error
    # message and exit status 2, not a convolution's shape error mid-run
    import frost_nb.__main__ as cli

    config, model = smoke
    calibrator = HaltingCalibrator().update(torch.rand(100))
    split = _split(torch.zeros(5, 3, 8, 8, dtype=torch.uint8))
    # the checkpoint and the split as the command's own loading reads them (its check included)
    monkeypatch.setattr(cli.checkpoint, "checkpoint_config", lambda path: config)
    monkeypatch.setattr(cli.checkpoint, "load_model", lambda path: (model, calibrator))
    monkeypatch.setattr(cli.training, "load_split", lambda config, name, root=None: split)
    assert main([command[0], "--checkpoint", "unused.pt", *command[1:]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the digits test split has 3 channel(s)") and "takes 1" in err
