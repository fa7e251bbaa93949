"""Data sets by name: `load_dataset(name, split, root=None, ...)`.

(skeleton: the registry below is the contract; loaders to be written)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    channels: int
    image_size: int  # side of the (square) images the model sees
    num_classes: int
    mean: tuple[float, ...]  # per-channel normalisation, on [0, 1] pixels
    std: tuple[float, ...]
    augmentation: str  # "shift" | "crop_flip" | "resized_crop_flip"
    in_memory: bool  # batches come from device-resident tensors
    how_to_get: str  # shown when the data cannot be found


DATASETS: dict[str, DatasetInfo] = {
    "digits": DatasetInfo("digits", 1, 8, 10, (0.3,), (0.38,), "shift", True,
                          "bundled with scikit-learn: pip install scikit-learn"),
    "fashion-mnist": DatasetInfo(
        "fashion-mnist", 1, 28, 10, (0.286,), (0.353,), "crop_flip", True,
        "apt-get install dataset-fashion-mnist (Debian), or put the four IDX .gz files in "
        "<root>/fashion-mnist/, or allow torchvision's download (data.download=True)"),
    "cifar10": DatasetInfo(
        "cifar10", 3, 32, 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616), "crop_flip", True,
        "put train.npz/test.npz (packed JPEG format) or torchvision's cifar-10-batches-py in "
        "<root>/cifar10/, or allow torchvision's download (data.download=True)"),
    "cifar100": DatasetInfo(
        "cifar100", 3, 32, 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762), "crop_flip", True,
        "put torchvision's cifar-100-python in <root>/cifar100/, or allow torchvision's download"),
    "imagenet100": DatasetInfo(
        "imagenet100", 3, 224, 100, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225), "resized_crop_flip",
        False, "put the ImageNet-100 class folders in <root>/imagenet100/train/ and .../val/ "
        "(100 ImageNet classes; no automatic download exists)"),
}
