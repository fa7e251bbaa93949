"""Checks of what a user hands to the public entry points (raw numbers, images, data splits), called
once there, never in the model's ``forward``; integer images are refused, not converted."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .config import check_range
from .data.datasets import DataError, ImageData

__all__ = ["ParameterError", "check_images", "check_scores", "check_split", "number_in"]


class ParameterError(ValueError):
    """A notebook or command-line parameter is wrong; the message names it."""


def number_in(name: str, value: Any, low: float, high: float, *, integer: bool = False,
              hint: str = "", error: type[Exception] = ValueError) -> float | int:
    """``value`` in the closed interval [low, high] (NaN never is); an int when ``integer``. A real number is
    a Python or numpy scalar, or a one-element tensor or array; bool is not (True is an int to Python)."""
    what, kind = ("an integer", numbers.Integral) if integer else ("a real number", numbers.Real)
    one = isinstance(value, (Tensor, np.ndarray)) and math.prod(value.shape) == 1  # 0-dim, or one element
    scalar = value.item() if one else value
    if isinstance(scalar, (bool, np.bool_)) or not isinstance(scalar, kind):
        raise error(f"{name}={value!r} must be {what} in [{low}, {high}]{hint}")
    check_range(name, float(scalar), low, high, what=what, hint=hint, error=error)
    return int(scalar) if integer else float(scalar)


def check_scores(values: np.ndarray, where: str) -> None:
    """Halting scores are probabilities: all finite, in [0, 1], else ValueError (``where`` starts it)."""
    bad = ~((values >= 0.0) & (values <= 1.0))  # NaN fails both comparisons
    if not bad.any():
        return
    nan, inf = int(np.isnan(values).sum()), int(np.isinf(values).sum())
    counts = {"NaN": nan, "infinite": inf, "finite but outside [0, 1]": int(bad.sum()) - nan - inf}
    found = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
    raise ValueError(f"{where} {found} value(s), out of {values.size}. Halting scores are "
                     f"probabilities sigmoid(halt_logits) in [0, 1] (not the logits); NaN or "
                     f"infinite ones mean the model diverged.")


def _check_image_shape(config: Any, shape: tuple[int, ...], what: str, allow_other_size: bool,
                       error: type[Exception]) -> None:
    """(N, C, H, W) against the config's in_channels, image_size and backbone (those it has)."""
    channels, size = getattr(config, "in_channels", None), getattr(config, "image_size", None)
    if channels is None and size is None:
        return  # not an image model (a stand-in with the step-wise API): nothing to compare
    if len(shape) == 3:  # one image (C, H, W), or a batch of one-channel images (N, H, W)
        batch = ", x[:, None] for a batch of one-channel images (N, H, W)" if channels == 1 else ""
        raise error(f"{what} has shape {shape}, no batch dimension: the model takes a batch of "
                    f"images (N, C, H, W) with C={channels}; use x[None] (or x.unsqueeze(0)) "
                    f"for one image (C, H, W){batch}")
    if len(shape) != 4:
        raise error(f"{what} has shape {shape}: the model takes a batch of images (N, C, H, W) "
                    f"with C={channels}, H=W={size}")
    if channels is not None and shape[1] != channels:
        raise error(f"{what} has {shape[1]} channel(s) (shape {shape}), the model takes "
                    f"{channels}: images must be (N, C, H, W) with C={channels}")
    if size is None or shape[2:] == (size, size):
        return
    if getattr(config, "backbone", None) == "vit":
        raise error(f"{what} has images of {shape[2]}x{shape[3]}, the ViT model takes {size}x{size}: its "
                    f"position embedding has one entry per patch of a {size}x{size} image; resize the images")
    if not allow_other_size:
        raise error(f"{what} has images of {shape[2]}x{shape[3]}, the model was built for "
                    f"{size}x{size}: resize them, or pass allow_other_size=True to run the fully "
                    f"convolutional ResNet family at another size (its accuracy there is untested)")


def check_images(model: torch.nn.Module, x: Any, *, allow_other_size: bool = False,
                 name: str = "x") -> Tensor:
    """``x`` as the model's input: finite floats of the weights' dtype and device, (N, C, H, W) as its
    config says (other sizes for resnet with ``allow_other_size``); else TypeError or ValueError."""
    weights = next(model.parameters(), None)
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            raise TypeError(f"{name} is a numpy array of dtype {x.dtype}: expected float images")
        x = torch.as_tensor(x, device=None if weights is None else weights.device)
    elif not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array of images (N, C, H, W), "
                        f"got {type(x).__name__}")
    if not x.is_floating_point():
        if x.dtype in (torch.bool, torch.complex64, torch.complex128):
            raise TypeError(f"{name} has dtype {x.dtype}: expected float images")
        raise TypeError(f"{name} has dtype {x.dtype} (raw pixels?): the model takes float images normalised "
                        f"as in training, x.float().div(255).sub(mean).div(std) with the data set's "
                        f"per-channel mean and std, (1, C, 1, 1) tensors from "
                        "frost_nb.data.prepare.DATASETS[name].mean and .std (uint8 pixels in 0..255)")
    _check_image_shape(getattr(model, "config", None), tuple(x.shape), name, allow_other_size, ValueError)
    if weights is not None and weights.is_floating_point() and x.dtype != weights.dtype:
        x = x.to(weights.dtype)  # e.g. float64 numpy images for float32 weights
    if not torch.isfinite(x.sum()) and (bad := int((~torch.isfinite(x)).sum())):  # NaN, inf or overflow
        raise ValueError(f"{name} has {bad} NaN or infinite pixel value(s) out of {x.numel()}: "
                         f"the model would return NaN logits for those images")
    return x if weights is None else x.to(weights.device)  # e.g. CPU images for a GPU model


def check_split(model: torch.nn.Module, dataset: Any, *, allow_other_size: bool = False) -> None:
    """An ImageData split fits ``model``: uint8 images (N, C, H, W) of the model's channels and
    size (folder sets: the size their transforms give); else ``DataError`` (a ValueError)."""
    if not isinstance(dataset, ImageData):
        raise TypeError(f"dataset must be an ImageData split (frost_nb.data.datasets.load_dataset or "
                        f"training.load_split), got {type(dataset).__name__}; for a tensor of "
                        f"images use halting.adaptive_predict or training.full_depth_pass")
    what = f"the {dataset.name} {dataset.split} split"
    if dataset.x is None:  # folder set: its transforms give info.image_size
        shape = (len(dataset), dataset.info.channels, dataset.info.image_size, dataset.info.image_size)
    else:
        if dataset.x.dtype != torch.uint8:
            raise DataError(f"{what} holds {dataset.x.dtype} images; ImageData keeps uint8 pixels "
                            f"(batches are normalised from them)")
        shape = tuple(dataset.x.shape)
    _check_image_shape(getattr(model, "config", None), shape, what, allow_other_size, DataError)
