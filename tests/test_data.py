"""Tests of frost_nb.data.datasets and frost_nb.data.prepare: preparing each source kind once, loaders (real
and fabricated files), splits, errors, batches.

Fabricated files are written in each set's real on-disk format (IDX headers, packed JPEG
npz, torchvision's CIFAR pickles, ImageFolder trees) so the parsers are tested, not mocks.
"""

from __future__ import annotations

import collections
import gzip
import io
import os
import pickle
import shutil
import subprocess
import sys
import urllib.error
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from frost_nb.data import datasets as data
from frost_nb.data import prepare as prep
from frost_nb.data.datasets import (
    DATASETS,
    DataError,
    ImageData,
    available_datasets,
    load_dataset,
    make_batches,
    random_crop,
    random_flip,
)
from frost_nb.data.prepare import prepare, read_prepared
from frost_nb.paths import system_data_dir

# the project's shared folder sits beside the checkout (CI clones it so too)
SHARED_CIFAR10 = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10"


@pytest.fixture(autouse=True)
def fresh_cache():
    data.clear_cache()  # every test sees its own files, never a decoded copy of another's
    yield
    data.clear_cache()


@pytest.fixture
def no_system_fashion(monkeypatch, tmp_path):
    monkeypatch.setenv("FROST_SYSTEM_DATA", str(tmp_path / "no-system-copy"))


# --- fabricated files in each set's real format ----------------------------------------------

def write_idx(path: Path, arr: np.ndarray) -> None:
    """IDX: magic 0x0000080<ndim> (unsigned bytes), big-endian int32 sizes, then the bytes."""
    header = np.array([0x0800 + arr.ndim, *arr.shape], dtype=">i4").tobytes()
    blob = header + arr.astype(np.uint8).tobytes()
    if path.suffix == ".gz":
        blob = gzip.compress(blob)
    path.write_bytes(blob)


def make_fashion(folder: Path, n_train=12, n_test=5, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for part, prefix, n in (("train", "train", n_train), ("test", "t10k", n_test)):
        x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, n, dtype=np.uint8)
        ext = ".gz" if gz else ""
        write_idx(folder / f"{prefix}-images-idx3-ubyte{ext}", x)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte{ext}", y)
        arrays[part] = (x, y)
    return arrays


def flat_colour_images(labels: np.ndarray) -> np.ndarray:
    """(N, 32, 32, 3) images of one flat colour each (JPEG keeps flat colours almost exactly)."""
    colours = np.stack([labels * 23 % 256, labels * 71 % 256, 255 - labels * 19 % 256], axis=1)
    return np.broadcast_to(colours[:, None, None, :], (len(labels), 32, 32, 3)).astype(np.uint8)


def write_packed(path: Path, images: np.ndarray, labels: np.ndarray, classes: list[str],
                 image_format: str = "JPEG", **extra) -> None:
    """The packed format of ../shared/data/cifar10/README.md (JPEG) and ../cifar100/ (PNG, with
    ``coarse_labels``, ``coarse_classes`` and ``format`` as ``extra``)."""
    blobs = []
    for im in images:
        buf = io.BytesIO()
        Image.fromarray(im).save(buf, format=image_format, **({"quality": 95} if image_format == "JPEG" else {}))
        blobs.append(np.frombuffer(buf.getvalue(), dtype=np.uint8))
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
    np.savez(path, jpeg=np.concatenate(blobs), offsets=offsets, labels=labels.astype(np.int64),
             classes=np.array(classes), **extra)


CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                   "truck"]


def make_packed_cifar10(folder: Path, n_train=20, n_test=10):
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for part, n in (("train", n_train), ("test", n_test)):
        labels = np.sort(np.arange(n) % 10)  # sorted by class, like the real files
        images = flat_colour_images(labels)
        write_packed(folder / f"{part}.npz", images, labels, CIFAR10_CLASSES)
        out[part] = (images, labels)
    return out


def make_packed_cifar100(folder: Path, per_class_train=5, per_class_test=2, seed=0):
    """The packed PNG copy of ../shared/data/cifar100/README.md: sorted by fine class, random pixels
    (PNG is lossless, so they come back exactly), coarse label = fine // 5."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for part, per_class in (("train", per_class_train), ("test", per_class_test)):
        labels = np.repeat(np.arange(100), per_class)
        images = rng.integers(0, 256, (len(labels), 32, 32, 3), dtype=np.uint8)
        write_packed(folder / f"{part}.npz", images, labels, [f"class{i:02d}" for i in range(100)], "PNG",
                     coarse_labels=labels // 5, coarse_classes=np.array([f"super{i}" for i in range(20)]),
                     format=np.array("png"))
        out[part] = (images, labels)
    return out


def dump(path: Path, obj) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def make_cifar10_pickles(folder: Path, per_batch=3, n_test=4, seed=0):
    """torchvision's cifar-10-batches-py: rows of 1024 R, 1024 G, 1024 B bytes."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    xs, ys = [], []
    for i in range(1, 6):
        x = rng.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8)
        y = rng.integers(0, 10, per_batch).tolist()
        dump(folder / f"data_batch_{i}", {"batch_label": f"batch {i}", "data": x.reshape(per_batch, -1),
                                          "labels": y, "filenames": ["f.png"] * per_batch})
        xs.append(x)
        ys += y
    xt = rng.integers(0, 256, (n_test, 3, 32, 32), dtype=np.uint8)
    yt = rng.integers(0, 10, n_test).tolist()
    dump(folder / "test_batch", {"data": xt.reshape(n_test, -1), "labels": yt})
    dump(folder / "batches.meta", {"label_names": CIFAR10_CLASSES, "num_cases_per_batch": per_batch})
    return np.concatenate(xs), np.array(ys), xt, np.array(yt)


def make_cifar100_pickles(folder: Path, n_train=7, n_test=3, seed=1):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    out = {}
    for part, n in (("train", n_train), ("test", n_test)):
        x = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        y = rng.integers(0, 100, n).tolist()
        dump(folder / part, {"data": x.reshape(n, -1), "fine_labels": y,
                             "coarse_labels": [c // 5 for c in y]})
        out[part] = (x, np.array(y))
    dump(folder / "meta", {"fine_label_names": [f"class{i:02d}" for i in range(100)],
                           "coarse_label_names": [f"super{i}" for i in range(20)]})
    return out


def make_image_folders(root: Path, per_class_train=5, per_class_val=2):
    rng = np.random.default_rng(2)
    for split, n in (("train", per_class_train), ("val", per_class_val)):
        for cls in ("n01440764", "n01443537"):
            d = root / "imagenet100" / split / cls
            d.mkdir(parents=True)
            for i in range(n):
                im = rng.integers(0, 256, (30 + 3 * i, 40, 3), dtype=np.uint8)
                Image.fromarray(im).save(d / f"img{i}.JPEG", format="JPEG")


def origin(ds: ImageData) -> str:
    """What a prepared set was converted from: ``source`` reads "<prepared file> (prepared from <origin>)"."""
    prepared, _, rest = ds.source.partition(" (prepared from ")
    assert prepared.endswith(f"prepared/{ds.name}/{'test' if ds.split == 'test' else 'train'}.npz")
    assert rest.endswith(")"), ds.source
    return rest[:-1]


def image_keys(ds: ImageData) -> collections.Counter:
    """Multiset of (pixels, label): compares splits without knowing their order."""
    return collections.Counter((x.numpy().tobytes(), int(y)) for x, y in zip(ds.x, ds.y))


# --- digits and splits --------------------------------------------------------------------------

def test_digits_shapes_pixels_and_fixed_test_split():
    from sklearn.datasets import load_digits

    train, val, test = (load_dataset("digits", s) for s in ("train", "val", "test"))
    assert len(train) + len(val) + len(test) == 1797
    assert len(test) == 359  # sum over classes of round(20% of the class)
    assert len(val) == round(0.1 * (1797 - 359)) == 144
    for ds in (train, val, test):
        assert ds.x.dtype == torch.uint8 and ds.x.shape[1:] == (1, 8, 8)
        assert ds.y.dtype == torch.int64 and ds.x.shape[0] == ds.y.shape[0]
    assert test.classes == [str(c) for c in range(10)]
    counts = torch.bincount(test.y, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified
    # 0..16 -> 0..255 exactly: the three splits are the rescaled bundled images
    raw = load_digits()
    expected = collections.Counter(
        (np.rint(im * 255 / 16).astype(np.uint8)[None].tobytes(), int(t))
        for im, t in zip(raw.images, raw.target))
    assert image_keys(train) + image_keys(val) + image_keys(test) == expected
    assert int(train.x.max()) == 255
    # the test split does not move with split_seed or val_fraction
    other = load_dataset("digits", "test", split_seed=5, val_fraction=0.3)
    assert torch.equal(other.x, test.x) and torch.equal(other.y, test.y)


def test_val_split_disjoint_complete_and_seeded():
    whole = load_dataset("digits", "train", val_fraction=0.0)  # the whole training split
    train = load_dataset("digits", "train", split_seed=3)
    val = load_dataset("digits", "val", split_seed=3)
    assert image_keys(train) + image_keys(val) == image_keys(whole)  # disjoint and complete
    again = load_dataset("digits", "val", split_seed=3)
    assert torch.equal(again.x, val.x) and torch.equal(again.y, val.y)
    other = load_dataset("digits", "val", split_seed=4)
    assert len(other) == len(val) and image_keys(other) != image_keys(val)


def test_split_indices_properties():
    for n, frac in ((1438, 0.1), (10, 0.25), (7, 0.0), (5, 0.9)):
        tr, va = data._split_indices(torch.zeros(n, dtype=torch.int64), frac, seed=0)
        assert len(va) == round(frac * n) and len(tr) + len(va) == n
        assert torch.equal(torch.sort(torch.cat([tr, va])).values, torch.arange(n))
    # val sets of one seed are nested in val_fraction
    plain = torch.zeros(100, dtype=torch.int64)  # one class: the plain seeded split
    small, large = data._split_indices(plain, 0.1, 0)[1], data._split_indices(plain, 0.3, 0)[1]
    assert set(small.tolist()) <= set(large.tolist())


@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5])
def test_val_fraction_honoured(fraction):
    n = 1797 - 359
    assert len(load_dataset("digits", "val", val_fraction=fraction)) == round(fraction * n)
    assert len(load_dataset("digits", "train", val_fraction=fraction)) == n - round(fraction * n)


def test_limit_keeps_first_images_of_split():
    full = load_dataset("digits", "train", split_seed=1)
    few = load_dataset("digits", "train", split_seed=1, limit=10)
    assert len(few) == 10 and torch.equal(few.x, full.x[:10]) and torch.equal(few.y, full.y[:10])
    assert len(load_dataset("digits", "test", limit=10_000)) == 359  # a limit above N keeps all


def test_loaded_tensors_do_not_alias_the_cache():
    ds = load_dataset("digits", "test")
    ds.x.zero_()
    assert int(load_dataset("digits", "test").x.max()) == 255


@pytest.mark.parametrize("kwargs, param", [
    ({"name": "mnist", "split": "train"}, "name="),
    ({"name": "digits", "split": "validation"}, "split="),
    ({"name": "digits", "split": "val", "val_fraction": 1.0}, "val_fraction="),
    ({"name": "digits", "split": "val", "limit": 0}, "limit="),
])
def test_bad_parameters_raise_data_error(kwargs, param):
    with pytest.raises(DataError) as err:
        load_dataset(**kwargs)
    assert isinstance(err.value, ValueError) and param in str(err.value)
    if param == "name=":
        assert all(repr(n) in str(err.value) for n in DATASETS)
    if param == "split=":
        assert "'train', 'val', 'test'" in str(err.value)


# --- Fashion-MNIST -----------------------------------------------------------------------------

@pytest.mark.parametrize("layout, gz", [("fashion-mnist", True), ("fashion-mnist/raw", False),
                                        ("FashionMNIST/raw", True)])
def test_fashion_mnist_from_idx_files(tmp_path, layout, gz, no_system_fashion):
    arrays = make_fashion(tmp_path / layout, gz=gz)
    test = load_dataset("fashion-mnist", "test", tmp_path, download=False)
    x, y = arrays["test"]
    assert torch.equal(test.x, torch.from_numpy(x)[:, None]) and test.y.tolist() == y.tolist()
    assert origin(test) == str(tmp_path / layout) and test.classes[0] == "T-shirt/top"
    train = load_dataset("fashion-mnist", "train", tmp_path, val_fraction=0.25, download=False)
    val = load_dataset("fashion-mnist", "val", tmp_path, val_fraction=0.25, download=False)
    assert (len(train), len(val)) == (9, 3)
    assert train.x.shape == (9, 1, 28, 28)


def test_local_fashion_copy_wins_over_system_copy(tmp_path):
    make_fashion(tmp_path / "fashion-mnist")
    assert origin(load_dataset("fashion-mnist", "test", tmp_path)) == str(tmp_path / "fashion-mnist")


def test_fashion_mnist_system_copy(tmp_path, monkeypatch):
    """Debian's copy (``$FROST_SYSTEM_DATA/fashion-mnist``) is found when the data root has none;
    fabricated files in the package's layout stand in for it (tests never read real data)."""
    system = tmp_path / "usr-share-datasets"
    make_fashion(system / "fashion-mnist", n_train=40, n_test=10)
    monkeypatch.setenv("FROST_SYSTEM_DATA", str(system))
    root = tmp_path / "empty-root"
    train = load_dataset("fashion-mnist", "train", root, download=False, val_fraction=0.25)
    val = load_dataset("fashion-mnist", "val", root, download=False, val_fraction=0.25)
    test = load_dataset("fashion-mnist", "test", root, download=False)
    assert (len(train), len(val), len(test)) == (30, 10, 10)
    assert origin(test) == str(system / "fashion-mnist") and test.x.shape == (10, 1, 28, 28)
    assert test.source.startswith(str(root / "prepared" / "fashion-mnist"))  # written in the data root


def test_tests_never_see_real_data():
    """make test hides every system-wide data set and switches downloads off: any test that
    reaches for Fashion-MNIST (or CIFAR) without fabricating it fails on every machine."""
    import os

    from frost_nb.paths import data_root, downloads_allowed

    assert not downloads_allowed(), "FROST_OFFLINE is not set for the test run"
    for folder in (system_data_dir(), data_root()):
        assert not folder.exists() or not any(folder.iterdir()), f"{folder} is not empty in tests"
    with pytest.raises(DataError, match="Downloads are switched off"):
        load_dataset("fashion-mnist", "test")
    assert os.environ.get("FROST_DATA"), "FROST_DATA must point at an empty folder in tests"


def test_offline_switch_blocks_download_before_torchvision(tmp_path, monkeypatch):
    import torchvision.datasets

    FakeCIFAR10.calls = []
    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    monkeypatch.setenv("FROST_OFFLINE", "1")
    with pytest.raises(DataError, match="FROST_OFFLINE"):
        load_dataset("cifar10", "test", tmp_path / "empty", download=True)
    assert FakeCIFAR10.calls == []


def test_truncated_idx_gz_names_file(tmp_path, no_system_fashion):
    make_fashion(tmp_path / "fashion-mnist")
    bad = tmp_path / "fashion-mnist" / "t10k-images-idx3-ubyte.gz"
    bad.write_bytes(bad.read_bytes()[:200])
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.gz is truncated or corrupt"):
        load_dataset("fashion-mnist", "test", tmp_path, download=False)


def test_idx_wrong_magic_and_short_payload(tmp_path, no_system_fashion):
    folder = tmp_path / "fashion-mnist"
    make_fashion(folder, gz=False)
    labels = folder / "t10k-labels-idx1-ubyte"
    write_idx(labels, np.zeros((5, 2), np.uint8))  # a 2-d array where labels (1-d) belong
    with pytest.raises(DataError, match="magic 0x00000802, expected 0x00000801"):
        load_dataset("fashion-mnist", "test", tmp_path, download=False)
    images = folder / "train-images-idx3-ubyte"
    images.write_bytes(images.read_bytes()[:-10])
    with pytest.raises(DataError, match="train-images-idx3-ubyte is truncated"):
        load_dataset("fashion-mnist", "train", tmp_path, download=False)


# --- CIFAR-10 / CIFAR-100 ----------------------------------------------------------------------

def test_cifar10_packed_fabricated(tmp_path):
    files = make_packed_cifar10(tmp_path / "cifar10")
    test = load_dataset("cifar10", "test", tmp_path, download=False)
    images, labels = files["test"]
    assert test.x.shape == (10, 3, 32, 32) and test.classes == CIFAR10_CLASSES
    assert origin(test) == str(tmp_path / "cifar10" / "test.npz")
    assert sorted(test.y.tolist()) == sorted(labels.tolist())
    assert test.y.tolist() != sorted(test.y.tolist())  # fixed shuffle of the class-sorted file
    # every image is its label's flat colour, up to JPEG error
    expected = torch.from_numpy(flat_colour_images(test.y.numpy())).permute(0, 3, 1, 2).int()
    assert (test.x.int() - expected).abs().max() <= 3
    train = load_dataset("cifar10", "train", tmp_path, download=False, val_fraction=0.2)
    assert len(train) == 16 and len(load_dataset("cifar10", "val", tmp_path, val_fraction=0.2)) == 4


@pytest.mark.skipif(not (SHARED_CIFAR10 / "test.npz").is_file(), reason="no shared CIFAR-10 copy")
def test_cifar10_real_packed_copy(tmp_path):
    (tmp_path / "cifar10").symlink_to(SHARED_CIFAR10)  # read through the data root, never write there
    before = sorted(os.listdir(SHARED_CIFAR10))
    test = load_dataset("cifar10", "test", tmp_path, download=False)
    assert sorted(os.listdir(SHARED_CIFAR10)) == before  # prepared beside the link, not through it
    assert test.x.shape == (10_000, 3, 32, 32) and test.classes == CIFAR10_CLASSES
    assert torch.bincount(test.y).tolist() == [1000] * 10
    assert len(set(test.y[:100].tolist())) == 10  # `limit` on the test split sees every class
    assert torch.equal(load_dataset("cifar10", "test", tmp_path, limit=50).y, test.y[:50])
    x = torch.cat([xb for xb, _ in make_batches(test, 5000, shuffle=False, augment=False, device="cpu")])
    mean, std = x.mean((0, 2, 3)), x.std((0, 2, 3))
    assert mean.abs().max() < 0.05 and (std - 1).abs().max() < 0.05  # registry stats fit the JPEG copy
    train = load_dataset("cifar10", "train", tmp_path)
    val = load_dataset("cifar10", "val", tmp_path)
    assert (len(train), len(val)) == (45_000, 5_000)
    assert torch.bincount(torch.cat([train.y, val.y])).tolist() == [5000] * 10


def test_truncated_npz_names_file(tmp_path):
    make_packed_cifar10(tmp_path / "cifar10")
    bad = tmp_path / "cifar10" / "train.npz"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    with pytest.raises(DataError, match="train.npz is truncated or corrupt"):
        load_dataset("cifar10", "train", tmp_path, download=False)


def test_npz_with_inconsistent_offsets(tmp_path):
    make_packed_cifar10(tmp_path / "cifar10")
    path = tmp_path / "cifar10" / "test.npz"
    with np.load(path) as z:
        parts = dict(z)
    parts["offsets"] = parts["offsets"][:-1]  # one image short
    np.savez(path, **parts)
    with pytest.raises(DataError, match="test.npz: inconsistent offsets"):
        load_dataset("cifar10", "test", tmp_path, download=False)


def test_npz_with_garbage_jpeg(tmp_path):
    make_packed_cifar10(tmp_path / "cifar10")
    path = tmp_path / "cifar10" / "test.npz"
    with np.load(path) as z:
        parts = dict(z)
    parts["jpeg"][: parts["offsets"][1]] = 7  # image 0 is no longer a JPEG
    np.savez(path, **parts)
    with pytest.raises(DataError, match="test.npz: image 0 cannot be decoded"):
        load_dataset("cifar10", "test", tmp_path, download=False)


@pytest.mark.parametrize("where", ["cifar10/cifar-10-batches-py", "cifar-10-batches-py"])
def test_cifar10_torchvision_pickles(tmp_path, where):
    x, y, xt, yt = make_cifar10_pickles(tmp_path / where)
    train = load_dataset("cifar10", "train", tmp_path, download=False, val_fraction=0.0)
    test = load_dataset("cifar10", "test", tmp_path, download=False)
    assert origin(test) == str(tmp_path / where) and test.classes == CIFAR10_CLASSES
    assert torch.equal(test.x, torch.from_numpy(xt)) and test.y.tolist() == yt.tolist()
    assert len(train) == 15
    ref = collections.Counter((im.tobytes(), int(t)) for im, t in zip(x, y))
    assert image_keys(train) == ref


def test_cifar10_pickles_match_torchvision(tmp_path, monkeypatch):
    """Same pixels as torchvision's own reader (its md5 check is switched off for fake files)."""
    import torchvision.datasets.cifar as tv_cifar

    make_cifar10_pickles(tmp_path / "cifar-10-batches-py")
    monkeypatch.setattr(tv_cifar.CIFAR10, "_check_integrity", lambda self: True)
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **k: True)
    ref = tv_cifar.CIFAR10(str(tmp_path), train=False, download=False)
    ours = load_dataset("cifar10", "test", tmp_path, download=False)
    assert torch.equal(ours.x, torch.from_numpy(ref.data).permute(0, 3, 1, 2))  # HWC -> CHW
    assert ours.y.tolist() == ref.targets and ours.classes == ref.classes


def test_packed_copy_wins_over_pickles(tmp_path):
    make_cifar10_pickles(tmp_path / "cifar10" / "cifar-10-batches-py")
    make_packed_cifar10(tmp_path / "cifar10")
    assert origin(load_dataset("cifar10", "test", tmp_path)) == str(tmp_path / "cifar10" / "test.npz")


def test_cifar100_torchvision_pickles(tmp_path):
    arrays = make_cifar100_pickles(tmp_path / "cifar100" / "cifar-100-python")
    test = load_dataset("cifar100", "test", tmp_path, download=False)
    x, y = arrays["test"]
    assert torch.equal(test.x, torch.from_numpy(x)) and test.y.tolist() == y.tolist()
    assert len(test.classes) == 100 and test.classes[7] == "class07"
    assert len(load_dataset("cifar100", "train", tmp_path, val_fraction=0.0)) == 7


def test_cifar100_packed_png_exact_pixels_and_coarse_labels(tmp_path):
    arrays = make_packed_cifar100(tmp_path / "cifar100")
    make_cifar100_pickles(tmp_path / "cifar100" / "cifar-100-python")  # the packed copy comes first
    test = load_dataset("cifar100", "test", tmp_path, download=False)
    assert origin(test) == str(tmp_path / "cifar100" / "test.npz")
    images, labels = arrays["test"]
    # the reader shuffles the class-sorted file once: match each image back to its original row
    rows = {im.tobytes(): i for i, im in enumerate(images)}
    for x, y, c in zip(test.x, test.y, test.coarse_y):
        i = rows[x.permute(1, 2, 0).contiguous().numpy().tobytes()]  # lossless: every pixel exact
        assert y == labels[i] and c == labels[i] // 5
    assert sorted(test.y.tolist()) == sorted(labels.tolist())
    assert test.classes[7] == "class07" and test.coarse_classes[3] == "super3"


def test_cifar100_held_out_split_is_stratified_and_seeded(tmp_path):
    make_packed_cifar100(tmp_path / "cifar100", per_class_train=10)
    val = load_dataset("cifar100", "val", tmp_path, val_fraction=0.2)
    train = load_dataset("cifar100", "train", tmp_path, val_fraction=0.2)
    assert collections.Counter(val.y.tolist()) == {c: 2 for c in range(100)}  # 20% of every class
    assert collections.Counter(train.y.tolist()) == {c: 8 for c in range(100)}
    assert torch.equal(val.coarse_y, val.y // 5) and torch.equal(train.coarse_y, train.y // 5)
    seen = {x.numpy().tobytes() for x in train.x}
    assert not any(x.numpy().tobytes() in seen for x in val.x)  # disjoint, together the training part
    assert torch.equal(load_dataset("cifar100", "val", tmp_path, val_fraction=0.2).x, val.x)  # seeded
    other = load_dataset("cifar100", "val", tmp_path, val_fraction=0.2, split_seed=1)
    assert collections.Counter(other.y.tolist()) == collections.Counter(val.y.tolist()) \
        and not torch.equal(other.x, val.x)
    smaller = load_dataset("cifar100", "val", tmp_path, val_fraction=0.1)  # nested in the fraction
    assert {x.numpy().tobytes() for x in smaller.x} <= {x.numpy().tobytes() for x in val.x}
    assert data._split_indices(torch.tensor([0, 0, 0, 1]), 0.5, 0)[1].numel() == 2  # round(1.5), round(0.5)


def test_other_sets_keep_their_plain_seeded_split(tmp_path):
    make_packed_cifar10(tmp_path / "cifar10", n_train=40)
    part = data._load_part("cifar10", str(tmp_path.resolve()), "train", False, True)
    train_idx, val_idx = data._split_indices(torch.zeros(40, dtype=torch.int64), 0.25, 3)
    val = load_dataset("cifar10", "val", tmp_path, val_fraction=0.25, split_seed=3)
    assert torch.equal(val.y, part.y[val_idx]) and val.coarse_y is None
    assert not DATASETS["cifar10"].stratified_val and DATASETS["cifar100"].stratified_val


def test_cifar100_pickles_give_coarse_labels_or_a_clear_error(tmp_path):
    arrays = make_cifar100_pickles(tmp_path / "cifar-100-python")
    train = load_dataset("cifar100", "train", tmp_path, val_fraction=0.0)
    assert sorted(train.coarse_y.tolist()) == sorted((arrays["train"][1] // 5).tolist())
    assert train.coarse_classes[19] == "super19"
    dump(tmp_path / "cifar-100-python" / "test", {"data": np.zeros((2, 3072), np.uint8), "fine_labels": [1, 2],
                                                  "coarse_labels": [0]})
    data.clear_cache()
    assert len(load_dataset("cifar100", "test", tmp_path)) == 3  # prepared before the damage: source not read
    shutil.rmtree(tmp_path / "prepared")
    data.clear_cache()
    with pytest.raises(DataError, match="coarse labels do not match"):
        load_dataset("cifar100", "test", tmp_path)


SHARED_CIFAR100 = SHARED_CIFAR10.parent / "cifar100"


@pytest.mark.skipif(not (SHARED_CIFAR100 / "test.npz").is_file(), reason="no ../shared/data/cifar100")
def test_cifar100_real_packed_copy(tmp_path):
    """The shared copy, read through the data root: the official test split, 100 per class, and the
    published per-channel test means (its README)."""
    (tmp_path / "cifar100").symlink_to(SHARED_CIFAR100)
    before = sorted(os.listdir(SHARED_CIFAR100))
    test = load_dataset("cifar100", "test", tmp_path, download=False)
    assert sorted(os.listdir(SHARED_CIFAR100)) == before and (tmp_path / "prepared" / "cifar100").is_dir()
    assert test.x.shape == (10000, 3, 32, 32) and len(test.classes) == 100 and len(test.coarse_classes) == 20
    assert collections.Counter(test.y.tolist()) == {c: 100 for c in range(100)}
    means = (test.x.double() / 255).mean(dim=(0, 2, 3))
    assert means.tolist() == pytest.approx([0.5087964127604166, 0.48739301317401956, 0.44194221124387256],
                                           abs=1e-12)
    # every fine class lies in one superclass
    assert all(len(set(test.coarse_y[test.y == c].tolist())) == 1 for c in range(100))


def test_corrupt_pickle_names_file(tmp_path):
    make_cifar100_pickles(tmp_path / "cifar-100-python")
    (tmp_path / "cifar-100-python" / "test").write_bytes(b"\x80\x02}q\x00")  # cut-off pickle
    with pytest.raises(DataError, match="cifar100: .*cifar-100-python/test is truncated or corrupt"):
        load_dataset("cifar100", "test", tmp_path, download=False)


# --- missing data and downloads ----------------------------------------------------------------

def test_missing_data_lists_places_and_how_to_get(tmp_path):
    root = tmp_path / "nothing"
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", "train", root, download=False)
    msg = str(err.value)
    for place in ("cifar10", "cifar10/cifar-10-batches-py", "cifar-10-batches-py"):
        assert str(root / place) in msg
    assert DATASETS["cifar10"].how_to_get in msg and "download=False" in msg


def test_missing_fashion_lists_system_place(tmp_path, no_system_fashion):
    with pytest.raises(DataError) as err:
        load_dataset("fashion-mnist", "test", tmp_path, download=False)
    assert str(system_data_dir() / "fashion-mnist") in str(err.value)
    assert str(tmp_path / "FashionMNIST" / "raw") in str(err.value)


def test_failed_download_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("FROST_OFFLINE", raising=False)  # the download path itself, faked
    import torchvision.datasets

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torchvision.datasets, "CIFAR100", offline)
    with pytest.raises(DataError) as err:
        load_dataset("cifar100", "train", tmp_path, download=True)
    msg = str(err.value)
    assert "download" in msg and "failed (no internet access?)" in msg
    assert "Temporary failure in name resolution" in msg and str(tmp_path / "cifar-100-python") in msg
    assert isinstance(err.value.__cause__, urllib.error.URLError)


def _download_failing_halfway(sub=""):
    """A torchvision data set class whose download makes its folder, writes part of the archive
    and then loses the connection."""

    def download(root, train=True, download=False):
        folder = Path(root) / sub
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "archive.tar.gz.part").write_bytes(b"\x1f\x8b half an archive")
        raise urllib.error.URLError("[Errno 104] Connection reset by peer")

    return download


@pytest.mark.parametrize("name, klass, sub, made", [
    ("cifar10", "CIFAR10", "", "root"),  # the data root did not exist: it goes too
    ("cifar100", "CIFAR100", "", "set folder"),  # the data root existed: only <root>/cifar100 goes
    ("fashion-mnist", "FashionMNIST", "FashionMNIST/raw", "set folder"),  # <root>/FashionMNIST goes
])
def test_failed_download_removes_the_folders_it_made(name, klass, sub, made, tmp_path, monkeypatch,
                                                     no_system_fashion):
    monkeypatch.delenv("FROST_OFFLINE", raising=False)  # the download path itself, faked
    import torchvision.datasets

    monkeypatch.setattr(torchvision.datasets, klass, _download_failing_halfway(sub))
    root = tmp_path / "data"
    if made == "set folder":
        (root / "other").mkdir(parents=True)  # what the root held before is kept
    with pytest.raises(DataError, match="Connection reset by peer"):
        load_dataset(name, "train", root, download=True)
    if made == "root":
        assert not root.exists()
    else:
        assert sorted(p.name for p in root.iterdir()) == ["other"]


def fake_cifar10_data(train: bool) -> np.ndarray:
    n = 6 if train else 4
    return np.arange(n * 32 * 32 * 3, dtype=np.int64).reshape(n, 32, 32, 3).astype(np.uint8)  # (N, H, W, C)


class FakeCIFAR10:
    """Stands in for torchvision.datasets.CIFAR10: records calls, holds (N, H, W, C) data, and its
    download writes what torchvision's does: <root>/cifar-10-batches-py with 5 + 1 pickled batches."""

    calls: list = []

    def __init__(self, root, train=True, download=False):
        FakeCIFAR10.calls.append((root, train, download))
        self.data, self.classes = fake_cifar10_data(train), CIFAR10_CLASSES
        self.targets = list(range(len(self.data)))
        if download:
            folder = Path(root) / "cifar-10-batches-py"
            folder.mkdir(parents=True, exist_ok=True)
            rows = fake_cifar10_data(True).transpose(0, 3, 1, 2).reshape(6, -1)  # 1024 R, G, B bytes a row
            for i in range(1, 6):  # the 6 training images over 5 batches: 2, 1, 1, 1, 1
                batch = slice(0, 2) if i == 1 else slice(i, i + 1)
                dump(folder / f"data_batch_{i}", {"data": rows[batch], "labels": list(range(6))[batch]})
            test_rows = fake_cifar10_data(False).transpose(0, 3, 1, 2).reshape(4, -1)
            dump(folder / "test_batch", {"data": test_rows, "labels": [0, 1, 2, 3]})
            dump(folder / "batches.meta", {"label_names": CIFAR10_CLASSES})


def test_download_used_only_when_local_copies_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("FROST_OFFLINE", raising=False)  # the download path itself, faked
    import torchvision.datasets

    FakeCIFAR10.calls = []
    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    local = tmp_path / "local"
    make_packed_cifar10(local / "cifar10")
    test = load_dataset("cifar10", "test", local, download=True)
    assert origin(test) == str(local / "cifar10" / "test.npz")
    assert FakeCIFAR10.calls == []  # a local copy: no download tried
    empty = tmp_path / "empty"
    test = load_dataset("cifar10", "test", empty, download=True)
    assert FakeCIFAR10.calls == [(str(empty / "cifar10"), True, True)]  # one archive holds both parts
    # prepared from the files the download left, where a later prepare would find them offline
    assert origin(test) == str(empty / "cifar10" / "cifar-10-batches-py") and test.x.shape == (4, 3, 32, 32)
    assert torch.equal(test.x, torch.from_numpy(fake_cifar10_data(False)).permute(0, 3, 1, 2))
    assert test.y.tolist() == [0, 1, 2, 3]
    train = load_dataset("cifar10", "train", empty, val_fraction=0.0)
    assert len(FakeCIFAR10.calls) == 1  # prepared once: the train part needs no second download
    assert image_keys(train) == collections.Counter(
        (im.tobytes(), i) for i, im in enumerate(fake_cifar10_data(True).transpose(0, 3, 1, 2)))


def test_available_datasets_checks_existence_only(tmp_path, no_system_fashion):
    (tmp_path / "cifar10").mkdir()
    for part in ("train", "test"):
        (tmp_path / "cifar10" / f"{part}.npz").write_bytes(b"not decoded")  # garbage: never opened
    make_image_folders(tmp_path)
    found = available_datasets(tmp_path)
    assert set(found) == set(DATASETS)
    prepared = tmp_path / "prepared" / "cifar10"
    assert found["cifar10"] == f"{tmp_path / 'cifar10'} (prepared into {prepared} on first use)"
    assert not (tmp_path / "prepared").exists()  # nothing prepared by looking
    assert found["imagenet100"] == str(tmp_path / "imagenet100")
    assert "load_digits" in found["digits"]
    assert found["cifar100"] == f"missing: {DATASETS['cifar100'].how_to_get}"
    assert found["fashion-mnist"].startswith("missing: ")


# --- ImageNet-100 (folders) --------------------------------------------------------------------

def test_imagenet_folders_splits_and_transforms(tmp_path):
    make_image_folders(tmp_path)
    train = load_dataset("imagenet100", "train", tmp_path, val_fraction=0.2)
    val = load_dataset("imagenet100", "val", tmp_path, val_fraction=0.2)
    test = load_dataset("imagenet100", "test", tmp_path)
    assert (len(train), len(val), len(test)) == (8, 2, 4)
    assert train.x is None and train.classes == ["n01440764", "n01443537"]
    assert test.source == str(tmp_path / "imagenet100" / "val")
    assert sorted(train.folder.indices + val.folder.indices) == list(range(10))  # disjoint, complete
    image, label = test.folder[0]
    assert image.shape == (3, 224, 224) and image.dtype == torch.float32 and label == int(test.y[0])
    assert torch.equal(test.folder[0][0], image)  # evaluation transform: deterministic
    assert float(image.min()) < -1.5  # normalised with ImageNet statistics, not in [0, 1]
    assert train.folder[0][0].shape == (3, 224, 224)
    assert len(load_dataset("imagenet100", "test", tmp_path, limit=3)) == 3


def test_imagenet_empty_class_folders_say_how_to_get_the_set(tmp_path):
    make_image_folders(tmp_path)
    for image in (tmp_path / "imagenet100" / "train").rglob("*.*"):
        image.unlink()  # class folders without images
    with pytest.raises(DataError, match="imagenet100: .*train is not an image folder.*to get it"):
        load_dataset("imagenet100", "train", tmp_path)


def test_imagenet_batches_reproducible(tmp_path):
    make_image_folders(tmp_path)
    train = load_dataset("imagenet100", "train", tmp_path, val_fraction=0.0)

    def one_pass(seed, workers=0):
        b = make_batches(train, 4, shuffle=True, augment=True, device="cpu",
                         generator=torch.Generator().manual_seed(seed), num_workers=workers)
        assert len(b) == 3
        return list(b)

    first, again, other = one_pass(0), one_pass(0), one_pass(1)
    assert [x.shape for x, _ in first] == [(4, 3, 224, 224)] * 2 + [(2, 3, 224, 224)]
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, again))
    assert not all(torch.equal(a[0], b[0]) for a, b in zip(first, other))
    ys = torch.cat([y for _, y in first])
    assert sorted(ys.tolist()) == sorted(train.y.tolist())
    # the transforms' randomness is seeded per image, not per worker
    with_workers = one_pass(0, workers=2)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, with_workers))


# --- augmentation and batches ------------------------------------------------------------------

def reference_crop(img: torch.Tensor, dy: int, dx: int, pad: int) -> torch.Tensor:
    c, h, w = img.shape
    padded = torch.zeros(c, h + 2 * pad, w + 2 * pad, dtype=img.dtype)
    padded[:, pad:pad + h, pad:pad + w] = img
    return padded[:, dy:dy + h, dx:dx + w]


def test_random_crop_and_flip_match_slow_reference():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (16, 3, 9, 7), generator=g, dtype=torch.uint8)
    dy, dx = torch.randint(0, 5, (16,), generator=g), torch.randint(0, 5, (16,), generator=g)
    flip = torch.rand(16, generator=g) < 0.5
    out = random_flip(random_crop(x, dy, dx, pad=2), flip)
    for i in range(16):
        ref = reference_crop(x[i], int(dy[i]), int(dx[i]), 2)
        ref = ref.flip(2) if flip[i] else ref
        assert torch.equal(out[i], ref)
    centre = torch.full((16,), 2)
    assert torch.equal(random_crop(x, centre, centre, 2), x)  # the centre crop is the identity


def synthetic(n: int, name: str = "cifar10", seed: int = 0, same_image: bool = False) -> ImageData:
    info = DATASETS[name]
    g = torch.Generator().manual_seed(seed)
    shape = (1 if same_image else n, info.channels, info.image_size, info.image_size)
    x = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).expand(n, *shape[1:]).contiguous()
    return ImageData(x=x, y=torch.arange(n) % info.num_classes, info=info, classes=[], name=name,
                     split="train", source="synthetic")


@pytest.mark.parametrize("name, pad, flips", [("cifar10", 4, True), ("fashion-mnist", 2, True),
                                              ("digits", 1, False)])
def test_augmentation_drawn_per_image(name, pad, flips):
    ds = synthetic(64, name, same_image=True)  # 64 copies of one image
    info = ds.info
    (x, _), = make_batches(ds, 64, shuffle=False, augment=True, device="cpu",
                           generator=torch.Generator().manual_seed(0))
    mean, std = torch.tensor(info.mean).view(1, -1, 1, 1), torch.tensor(info.std).view(1, -1, 1, 1)
    pixels = torch.round((x * std + mean) * 255).to(torch.uint8)  # back to uint8
    distinct = {p.numpy().tobytes() for p in pixels}
    # each output is one of the (2p+1)^2 shifts (and their mirror images) of the input
    variants = set()
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            v = reference_crop(ds.x[0], dy, dx, pad)
            variants |= {v.numpy().tobytes()} | ({v.flip(2).numpy().tobytes()} if flips else set())
    assert len(variants) == (2 * pad + 1) ** 2 * (2 if flips else 1)
    assert distinct <= variants
    assert len(distinct) >= min(20, len(variants))  # identical inputs, different crops (digits: all 9)


def test_unaugmented_batches_are_normalised_pixels():
    ds = load_dataset("digits", "train")
    batches = make_batches(ds, 100, shuffle=False, augment=False, device="cpu")
    x = torch.cat([xb for xb, _ in batches])  # in order: the whole split
    y = torch.cat([yb for _, yb in batches])
    assert x.dtype == torch.float32 and x.shape == (len(ds), 1, 8, 8) and torch.equal(y, ds.y)
    assert torch.allclose(x * 0.38 + 0.3, ds.x.float() / 255, atol=1e-6)
    assert abs(float(x.mean())) < 0.05 and abs(float(x.std()) - 1) < 0.05  # registry stats fit digits


def test_batch_count_and_drop_last():
    ds = synthetic(10)
    for drop_last, sizes in ((False, [4, 4, 2]), (True, [4, 4])):
        b = make_batches(ds, 4, shuffle=True, augment=False, device="cpu", drop_last=drop_last)
        assert len(b) == len(sizes) and [len(x) for x, _ in b] == sizes
    with pytest.raises(DataError, match="batch_size=0"):
        make_batches(ds, 0, shuffle=False, augment=False, device="cpu")


def as_list(batches):
    return [(x.clone(), y.clone()) for x, y in batches]


def same(a, b):
    return len(a) == len(b) and all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1])
                                    for p, q in zip(a, b))


def test_batches_reproducible_and_resumable():
    ds = synthetic(50)

    def batches(seed):
        return make_batches(ds, 8, shuffle=True, augment=True, device="cpu",
                            generator=torch.Generator().manual_seed(seed))

    assert same(as_list(batches(0)), as_list(batches(0)))
    assert not same(as_list(batches(0)), as_list(batches(1)))
    # same generator state, same pass; the next pass differs
    b = batches(0)
    state = b.generator.get_state()
    first = as_list(b)
    b.generator.set_state(state)
    assert same(as_list(b), first)
    assert not same(as_list(b), first)
    # one draw per pass however many batches are consumed, and exact resumption
    b = batches(0)
    it = iter(b)
    next(it)
    seed, state = b.epoch_seed, b.generator.get_state()
    assert same(as_list(b.iterate(seed, start=3)), first[3:])
    full = batches(0)
    iter(full)
    assert torch.equal(full.generator.get_state(), state)


def test_evaluation_pass_leaves_generator_alone():
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    list(make_batches(synthetic(20), 8, shuffle=False, augment=False, device="cpu", generator=g))
    assert torch.equal(g.get_state(), state)


def test_labels_stay_aligned_after_shuffle_and_augmentation():
    n, info = 300, DATASETS["cifar10"]
    labels = torch.arange(n) % 10
    # every pixel of image i encodes its label: 20 * label + 7 (no pixel is 0 like the padding)
    x = (labels * 20 + 7).to(torch.uint8).view(n, 1, 1, 1).expand(n, 3, 32, 32).contiguous()
    ds = ImageData(x=x, y=labels, info=info, classes=[], name="cifar10", split="train",
                   source="synthetic")
    mean, std = torch.tensor(info.mean).view(1, 3, 1, 1), torch.tensor(info.std).view(1, 3, 1, 1)
    seen = []
    for xb, yb in make_batches(ds, 64, shuffle=True, augment=True, device="cpu",
                               generator=torch.Generator().manual_seed(0)):
        centre = torch.round((xb * std + mean) * 255)[:, :, 16, 16]  # (B, 3): never padding
        assert torch.equal(centre, (yb * 20 + 7).float()[:, None].expand(-1, 3))
        seen.append(yb)
    seen = torch.cat(seen)
    assert sorted(seen.tolist()) == sorted(labels.tolist()) and not torch.equal(seen, labels)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_batches_equal_cpu_batches():
    ds = synthetic(100)

    def run(device):
        return as_list(make_batches(ds, 32, shuffle=True, augment=True, device=device,
                                    generator=torch.Generator().manual_seed(0)))

    on_gpu, on_cpu = run("cuda"), run("cpu")
    assert on_gpu[0][0].is_cuda and on_gpu[0][1].is_cuda
    # the same images, crops and flips; the normalisation may round differently on the GPU
    # (CUDA divides by a scalar as a multiplication by its reciprocal): equal within 1 ulp
    assert len(on_gpu) == len(on_cpu)
    for (xg, yg), (xc, yc) in zip(on_gpu, on_cpu):
        assert torch.equal(yg.cpu(), yc)
        torch.testing.assert_close(xg.cpu(), xc, rtol=0, atol=1e-6)


def test_data_root_order_argument_then_env_then_repo(tmp_path, monkeypatch):
    from frost_nb.paths import data_root, repo_root

    monkeypatch.delenv("FROST_DATA", raising=False)
    assert data_root() == repo_root() / "data"
    monkeypatch.setenv("FROST_DATA", str(tmp_path / "env"))
    assert data_root() == tmp_path / "env"
    assert data_root(tmp_path / "arg") == tmp_path / "arg"
    # and load_dataset follows it: the set is found under $FROST_DATA, not in data/
    make_cifar100_pickles(tmp_path / "env" / "cifar-100-python")
    assert load_dataset("cifar100", "test", download=False).source.startswith(str(tmp_path / "env"))


# --- prepared once (frost_nb/data/prepare.py) -------------------------------------------------------

def _expected_parts(kind: str, src: Path) -> tuple[str, dict]:
    """Fabricate one source kind in `src`; (data set, part -> (x (N, C, H, W), y)) in the order the
    loader has always given them (the packed copies get their fixed shuffle)."""
    if kind == "idx":
        arrays = make_fashion(src, n_train=9, n_test=4)
        return "fashion-mnist", {p: (x[:, None], y.astype(np.int64)) for p, (x, y) in arrays.items()}
    if kind == "packed-png":
        arrays = make_packed_cifar100(src, per_class_train=2, per_class_test=1)
        return "cifar100", {p: (x.transpose(0, 3, 1, 2)[prep.fixed_order(len(y)).numpy()],
                                y[prep.fixed_order(len(y)).numpy()]) for p, (x, y) in arrays.items()}
    if kind == "pickles-cifar10":
        x, y, xt, yt = make_cifar10_pickles(src)
        return "cifar10", {"train": (x, y), "test": (xt, yt)}
    arrays = make_cifar100_pickles(src)
    return "cifar100", {p: (x, y) for p, (x, y) in arrays.items()}


def test_the_fixed_image_order_is_the_one_the_committed_runs_were_trained_on():
    """The packed copies and the prepared files keep the images in one seeded order, and every
    committed run's held-out split and batches follow from it: a change here (another seed,
    another generator) would silently move them. Pinned, as a parameter count is."""
    assert prep.fixed_order(10).tolist() == [4, 1, 7, 5, 3, 9, 0, 8, 6, 2]


@pytest.mark.parametrize("kind, where", [
    ("idx", "fashion-mnist"), ("idx", "FashionMNIST/raw"), ("packed-png", "cifar100"),
    ("pickles-cifar10", "cifar-10-batches-py"), ("pickles-cifar100", "cifar100/cifar-100-python")])
def test_prepare_converts_each_source_kind(kind, where, tmp_path, no_system_fashion):
    name, expected = _expected_parts(kind, tmp_path / where)
    folder = prepare(name, tmp_path, download=False)
    assert folder == tmp_path.resolve() / "prepared" / name
    assert sorted(p.name for p in folder.iterdir()) == ["test.npz", "train.npz"]  # no temporary file left
    for part, (x, y) in expected.items():
        got = read_prepared(name, tmp_path, part)
        assert got.x.dtype == np.uint8 and got.y.dtype == np.int64
        assert np.array_equal(got.x, x) and np.array_equal(got.y, y)  # exact pixels, labels and order
        assert got.source == str(tmp_path / where / (f"{part}.npz" if kind == "packed-png" else ""))
        if name == "cifar100":
            assert np.array_equal(got.coarse_y, y // 5) and got.coarse_classes[19] == "super19"
        else:
            assert got.coarse_y is None
        with np.load(folder / f"{part}.npz") as z:  # the format itself: no pickle needed
            assert int(z["format"]) == prep.FORMAT and z["x"].shape == x.shape


def test_prepare_packed_jpeg_copy(tmp_path):
    """The packed JPEG copy of CIFAR-10: decoded once, shuffled once, as the loader always did."""
    files = make_packed_cifar10(tmp_path / "cifar10")
    prepare("cifar10", tmp_path, download=False)
    got = read_prepared("cifar10", tmp_path, "test")
    images, labels = files["test"]
    order = prep.fixed_order(len(labels)).numpy()
    assert np.array_equal(got.y, labels[order]) and got.classes == tuple(CIFAR10_CLASSES)
    expected = flat_colour_images(labels[order]).transpose(0, 3, 1, 2).astype(int)
    assert np.abs(got.x.astype(int) - expected).max() <= 3  # JPEG error on flat colours


def test_prepare_from_a_named_source_folder(tmp_path):
    """``source=`` converts a copy kept anywhere (say a shared read-only folder), writing nothing there."""
    elsewhere = tmp_path / "shared" / "cifar100"
    make_packed_cifar100(elsewhere, per_class_train=1, per_class_test=1)
    before = sorted(elsewhere.iterdir())
    root = tmp_path / "root"
    assert prepare("cifar100", root, source=elsewhere, download=False) == root / "prepared" / "cifar100"
    assert sorted(elsewhere.iterdir()) == before
    assert origin(load_dataset("cifar100", "test", root)) == str(elsewhere / "test.npz")
    with pytest.raises(DataError) as err:  # a named folder without the set: its places, and the fix
        prepare("cifar10", root, source=tmp_path / "shared")
    msg = str(err.value)
    assert str(tmp_path / "shared" / "cifar-10-batches-py") in msg and "holds no complete copy" in msg
    assert DATASETS["cifar10"].how_to_get in msg


def test_prepared_files_never_go_through_a_linked_set_folder(tmp_path):
    """make data links ../shared/data/cifar10 as <root>/cifar10: the prepared copy lands beside it."""
    shared = tmp_path / "shared-cifar10"
    make_packed_cifar10(shared)
    before = sorted(shared.iterdir())
    root = tmp_path / "root"
    root.mkdir()
    (root / "cifar10").symlink_to(shared)
    assert len(load_dataset("cifar10", "test", root)) == 10
    assert sorted(shared.iterdir()) == before
    assert sorted(p.name for p in (root / "prepared" / "cifar10").iterdir()) == ["test.npz", "train.npz"]


def test_load_after_prepare_reads_only_the_prepared_files(tmp_path, no_system_fashion):
    arrays = make_fashion(tmp_path / "fashion-mnist", n_train=12, n_test=5)
    first = load_dataset("fashion-mnist", "val", tmp_path, val_fraction=0.25)
    shutil.rmtree(tmp_path / "fashion-mnist")  # the source is gone
    data.clear_cache()
    again = load_dataset("fashion-mnist", "val", tmp_path, val_fraction=0.25, download=False)
    assert torch.equal(again.x, first.x) and torch.equal(again.y, first.y)
    test = load_dataset("fashion-mnist", "test", tmp_path, download=False)
    assert torch.equal(test.x, torch.from_numpy(arrays["test"][0])[:, None])
    assert origin(test) == str(tmp_path / "fashion-mnist")  # what it was made from, kept in the file
    found = available_datasets(tmp_path)["fashion-mnist"]
    assert found == str(tmp_path.resolve() / "prepared" / "fashion-mnist")


def test_prepare_runs_once_unless_forced(tmp_path, monkeypatch):
    make_cifar10_pickles(tmp_path / "cifar-10-batches-py")
    prepare("cifar10", tmp_path)
    calls = []
    real = prep._CONVERTERS["pickles"]
    monkeypatch.setitem(prep._CONVERTERS, "pickles", lambda *a: calls.append(a[2]) or real(*a))
    prepare("cifar10", tmp_path)
    load_dataset("cifar10", "test", tmp_path)
    assert calls == []  # prepared already: nothing converted
    prepare("cifar10", tmp_path, force=True)
    assert calls == ["train", "test"]


def _damage(path: Path, how: str) -> None:
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "flipped byte":
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0x10  # inside x's pixels: only the zip's CRC-32 can tell
        path.write_bytes(bytes(raw))
    else:
        with np.load(path) as z:
            parts = dict(z)
        if how == "old format":
            parts["format"] = np.array(0)
        else:  # "wrong shape": a part of another set
            parts["x"] = parts["x"][:, :1]
        with open(path, "wb") as f:
            np.savez(f, **parts)


@pytest.mark.parametrize("how, says", [("truncated", "is truncated or corrupt"),
                                       ("flipped byte", "is truncated or corrupt .*CRC"),
                                       ("old format", "is not a prepared file of format 1 .format 0."),
                                       ("wrong shape", "arrays do not fit a prepared cifar10 part")])
def test_damaged_prepared_file_names_the_fix(how, says, tmp_path):
    make_cifar10_pickles(tmp_path / "cifar-10-batches-py")
    good = load_dataset("cifar10", "train", tmp_path, val_fraction=0.0)
    folder = tmp_path.resolve() / "prepared" / "cifar10"
    _damage(folder / "train.npz", how)
    data.clear_cache()
    with pytest.raises(DataError, match=says) as err:
        load_dataset("cifar10", "train", tmp_path, val_fraction=0.0)
    msg = str(err.value)
    assert str(folder / "train.npz") in msg and f"delete {folder} and load again" in msg
    assert "python -m frost_nb.data.prepare cifar10 --force" in msg
    shutil.rmtree(folder)  # the fix the message names
    data.clear_cache()
    again = load_dataset("cifar10", "train", tmp_path, val_fraction=0.0)
    assert torch.equal(again.x, good.x) and torch.equal(again.y, good.y)


class Interrupted(BaseException):
    """Stands in for Ctrl-C or a crash halfway through a write."""


def test_interrupted_prepare_leaves_no_prepared_file(tmp_path, monkeypatch):
    make_cifar100_pickles(tmp_path / "cifar-100-python")
    writes = []
    real_savez = np.savez

    def savez_then_stop(f, **arrays):
        writes.append(f.name)
        if len(writes) == 2:  # train.npz's temporary file is complete; test.npz's half written
            f.write(b"PK\x03\x04 half a zip")
            raise Interrupted
        real_savez(f, **arrays)

    monkeypatch.setattr(np, "savez", savez_then_stop)
    with pytest.raises(Interrupted):
        prepare("cifar100", tmp_path)
    folder = tmp_path / "prepared" / "cifar100"
    assert len(writes) == 2 and all(".tmp" in Path(w).name for w in writes)  # written under other names
    assert list(folder.iterdir()) == []  # no part renamed into place, no temporary file left
    monkeypatch.setattr(np, "savez", real_savez)
    data.clear_cache()
    assert len(load_dataset("cifar100", "test", tmp_path)) == 3  # the next load prepares it whole


def test_killed_prepare_leaves_no_prepared_file(tmp_path):
    """A process killed while writing (no clean-up runs) leaves at most a temporary file, never a
    part under its real name; the next load prepares the set again."""
    make_cifar10_pickles(tmp_path / "cifar-10-batches-py")
    script = ("import os, sys, numpy as np\n"
              "from frost_nb.data.prepare import prepare\n"
              "def savez(f, **arrays):\n"
              "    f.write(b'PK\\x03\\x04 half'); f.flush(); os._exit(9)\n"
              "np.savez = savez\n"
              "prepare('cifar10', sys.argv[1])\n")
    run = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 9, run.stderr[-2000:]
    folder = tmp_path / "prepared" / "cifar10"
    assert [p.name.startswith(".train.npz.tmp") for p in folder.iterdir()] == [True]
    assert not prep.is_prepared("cifar10", tmp_path)
    assert len(load_dataset("cifar10", "test", tmp_path)) == 4


def test_unwritable_prepared_folder_says_so_before_converting(tmp_path, monkeypatch):
    make_cifar10_pickles(tmp_path / "cifar-10-batches-py")
    (tmp_path / "prepared").write_text("a file where the folder belongs")
    monkeypatch.setitem(prep._CONVERTERS, "pickles", lambda *a: pytest.fail("converted before the check"))
    with pytest.raises(OSError, match="prepared copy of cifar10 .* is a file, not a folder.*FROST_DATA"):
        load_dataset("cifar10", "test", tmp_path)


def test_read_only_data_root_is_never_written(tmp_path):
    """Root ignores permission bits: a data root marked read-only, like ../shared/data, is refused
    by its mode before any conversion, and nothing lands in it."""
    source = tmp_path / "copy"
    make_cifar10_pickles(source / "cifar-10-batches-py")
    root = tmp_path / "read-only-root"
    root.mkdir()
    root.chmod(0o555)
    try:
        with pytest.raises(OSError, match=f"{root} is marked read-only .a shared copy.*FROST_DATA"):
            prepare("cifar10", root, source=source)
        assert list(root.iterdir()) == []
    finally:
        root.chmod(0o755)


def test_prepare_only_the_sets_that_have_sources():
    for name in ("digits", "imagenet100", "mnist"):
        with pytest.raises(DataError, match=f"name={name!r} is not prepared: expected one of 'fashion-mni"):
            prepare(name)


def test_missing_data_from_prepare_names_the_fix(tmp_path, no_system_fashion):
    with pytest.raises(DataError) as err:
        prepare("fashion-mnist", tmp_path / "nothing", download=False)
    msg = str(err.value)
    assert str(tmp_path / "nothing" / "fashion-mnist") in msg
    assert str(system_data_dir() / "fashion-mnist") in msg
    assert "download=False" in msg and "apt-get install dataset-fashion-mnist" in msg
    assert not (tmp_path / "nothing").exists()  # nothing made for a set that is not there


def test_command_line_prepares_and_reports(tmp_path, capsys, no_system_fashion):
    make_cifar10_pickles(tmp_path / "cifar10" / "cifar-10-batches-py")
    assert prep.main(["cifar10", "--root", str(tmp_path), "--no-download"]) == 0
    assert capsys.readouterr().out == f"cifar10: prepared in {tmp_path.resolve() / 'prepared' / 'cifar10'}\n"
    assert prep.main(["fashion-mnist", "cifar10", "--root", str(tmp_path), "--no-download"]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("cifar10: prepared in")
    assert err.startswith("fashion-mnist: data set 'fashion-mnist' not found")
    assert "To get it: apt-get install dataset-fashion-mnist" in err
