"""scripts/gpu.py: the device path of docs/scaling.md, every step on the CPU at smoke size, with a
temporary folder standing in for the device machine (no GPU is needed or simulated: the "device"
trains on the CPU, and nothing here is a GPU result).

The stand-in does what the device tool does (/work/.library/device/README.md): each call copies
the files that travel (tracked and untracked-not-ignored) and replaces the carried paths there
(removing those missing here), refuses more than 64 MiB, empties $OUT before the command, and
brings back only what fits 8 files of 16 MiB, two folders deep.
"""

import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from frost_nb.checkpoint import CheckpointError, load_checkpoint, load_model
from frost_nb.config import make_config
from frost_nb.paths import repo_root
from frost_nb.training import evaluate, load_split, train

spec = importlib.util.spec_from_file_location("gpu", repo_root() / "scripts" / "gpu.py")
gpu = sys.modules["gpu"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(gpu)
MIB = 1 << 20


def write_packed_cifar100(folder: Path, per_class_train=5, per_class_test=1, seed=0) -> None:
    """CIFAR-100's packed PNG copy (../shared/data/cifar100/README.md) with random pixels."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True)
    for part, per_class in (("train", per_class_train), ("test", per_class_test)):
        labels = np.repeat(np.arange(100), per_class)
        blobs = []
        for image in rng.integers(0, 256, (len(labels), 32, 32, 3), dtype=np.uint8):
            buf = io.BytesIO()
            Image.fromarray(image).save(buf, format="PNG")
            blobs.append(np.frombuffer(buf.getvalue(), dtype=np.uint8))
        offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.int64)
        np.savez(folder / f"{part}.npz", jpeg=np.concatenate(blobs), offsets=offsets, labels=labels,
                 classes=np.array([f"class{i:02d}" for i in range(100)]), coarse_labels=labels // 5,
                 coarse_classes=np.array([f"super{i}" for i in range(20)]), format=np.array("png"))


class StandIn:
    """The device machine, as a folder: what each call sends, runs and brings back."""

    def __init__(self, here: Path, device: Path, out: Path, travelling: list[str]):
        self.here, self.device, self.out, self.calls = here, device, out, 0
        for name in travelling:  # the repository as it travels (sent with every call; unchanged here)
            source = repo_root() / name
            if source.is_file():
                (device / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, device / name)
        self.tree_bytes = sum((repo_root() / n).stat().st_size for n in travelling
                              if (repo_root() / n).is_file())

    def run(self, command: str, carry: list[str]) -> Path:
        assert len(carry) <= 8
        sent = self.tree_bytes
        for path in carry:  # replaced there; one missing here is removed there
            there = self.device / path
            shutil.rmtree(there, ignore_errors=True) if there.is_dir() else there.unlink(missing_ok=True)
            if (self.here / path).exists():
                shutil.copytree(self.here / path, there)
                sent += gpu.folder_bytes(there)
        assert sent <= gpu.SEND_LIMIT, f"call {self.calls + 1} would send {sent / MIB:.1f} MiB"
        self.calls += 1
        out = self.out / f"call{self.calls}"
        out.mkdir(parents=True)
        env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(self.device),
               "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # python3: this venv's
        done = subprocess.run(["bash", "-c", command], cwd=self.device, env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        self.last_output = done.stdout
        gpu.check_out(out)  # what comes back, whole
        files_at = self.out / f"files_at{self.calls}"
        shutil.copytree(out, files_at)
        return files_at


def _travelling() -> list[str]:
    try:
        return gpu._git_files(repo_root(), "--cached", "--others", "--exclude-standard")
    except gpu.GpuError as err:
        pytest.skip(f"not a git checkout: {err}")


def test_device_path_end_to_end_on_the_cpu(tmp_path, monkeypatch):
    """Plan, pack, send the parts over several calls, join and prepare there, train in two calls
    (the second resumes from the checkpoint the first sent back, split into parts to come back),
    fetch each, commit the lean export; train_or_load then finds the run here."""
    here, source = tmp_path / "here", tmp_path / "source" / "cifar100"
    write_packed_cifar100(source)
    files = {n: (source / n).stat().st_size for n in ("train.npz", "test.npz")}
    device = StandIn(here, tmp_path / "device", tmp_path / "out", _travelling())
    # small enough for a loaded CPU: 16x16 states, 400 training images, one held out per class
    run = gpu.RunSpec(size="smoke", dataset="cifar100", seed=0, epochs=2,
                      sets=("model.stem_stride=2", "data.val_fraction=0.2"))
    name = run.name()
    assert name == "cifar100-smoke-single/frost-resnet-seed0"
    margin, wheels = 2 * MIB, gpu.wheel_bytes()
    limit = device.tree_bytes + margin + wheels + 8 * 1024 * 3 + 700 * 1024  # room for 700 KiB of parts
    plan = gpu.make_plan(files, run, travelling=device.tree_bytes, wheel_bytes=wheels,
                         checkpoint_bytes=200_000, limit=limit, margin=margin, minutes=8,
                         benchmark=False)  # call 1's benchmark needs CUDA
    data_calls = [c for c in plan.calls if c.parts]
    assert plan.part_bytes == 700 * 1024 and len(data_calls) >= 3
    assert sum(len(p) for p in plan.files.values()) == sum(len(c.parts) for c in data_calls)
    gpu.pack({n: source / n for n in files}, "cifar100", plan.part_bytes, [c.parts for c in data_calls],
             repo=here)

    for call in data_calls[:-1]:  # parts arrive over several calls and are kept aside there
        assert call.command == "python3 scripts/gpu.py receive"
        device.run(call.command, call.carry)
        status = json.loads(device.last_output)
        assert status["missing"] and not status["prepared"] and not status["damaged"]
    last = data_calls[-1]
    assert last.command.startswith("python3 scripts/gpu.py receive && python3 scripts/gpu.py train "
                                   "--size smoke")
    # the test's own bounds: 1 epoch in this call, on the CPU, the checkpoint back in parts
    back = first_back = device.run(last.command + " --max-epochs 1 --device cpu --split-above-mib 0.05",
                                   last.carry)
    assert json.loads(device.last_output.splitlines()[0])["prepared"]
    for n in files:  # joined there byte for byte
        assert (tmp_path / "device" / gpu.DATA / "cifar100" / n).read_bytes() == (source / n).read_bytes()
    first = json.loads(device.last_output.splitlines()[-1])
    assert (first["resumed_from_epoch"], first["epochs_after"], first["finished"]) == (0, 1, False)
    assert first["checkpoint_parts"] >= 2 and "lean.pt" not in os.listdir(back / name)
    cache = here / "outputs" / "cache"
    [entry] = gpu.fetch(back, cache=cache, repo=here)
    assert (entry["epoch"], entry["finished"]) == (1, False)
    assert not (cache / name / "metrics.json").exists()
    after_one = load_checkpoint(cache / name / "model.pt")

    [train_call] = [c for c in plan.calls if not c.parts]
    assert train_call.carry == [gpu.WHEEL_DIR, f"outputs/cache/{name}"]
    back = device.run(train_call.command + " --device cpu", train_call.carry)
    second = json.loads(device.last_output.splitlines()[-1])
    assert (second["resumed_from_epoch"], second["epochs_this_call"], second["finished"]) == (1, 1, True)
    runs = tmp_path / "runs"
    [entry] = gpu.fetch(back, cache=cache, runs_root=runs, commit=True, repo=here)
    with pytest.raises(gpu.GpuError, match="at epoch 2, the fetched checkpoint at 1"):
        gpu.fetch(first_back, cache=cache, repo=here)  # never back to an older checkpoint
    assert entry["finished"] and (runs / "index.csv").is_file()
    final = load_checkpoint(cache / name / "model.pt")
    assert final["history"]["epochs"]["epoch"] == [1, 2]  # resumed, not restarted
    for key in ("train_loss", "val_accuracy"):
        assert final["history"]["epochs"][key][:1] == after_one["history"]["epochs"][key]
    n = len(after_one["history"]["steps"]["step"])
    assert final["history"]["steps"]["step"] == list(range(1, 2 * n + 1))  # the step count runs on
    assert [c["epochs_after"] for c in json.loads((cache / name / "gpu_calls.json").read_text())] == [1, 2]

    # here: train_or_load finds the fetched run; the committed lean one re-evaluates to its metrics
    from frost_nb.runs import train_or_load

    monkeypatch.setenv("FROST_CACHE", str(cache))
    monkeypatch.setenv("FROST_DATA", str(tmp_path / "device" / gpu.DATA))
    config = run.config()
    result = train_or_load(config)
    assert result.from_cache and result.checkpoint == cache / name / "model.pt"
    assert result.metrics["test_accuracy"] == final["metrics"]["test_accuracy"]
    lean = load_checkpoint(runs / name / "model.pt")
    assert lean["lean"] and lean["weights"] == "bfloat16"
    assert all(v.dtype == torch.bfloat16 for v in lean["model"].values() if v.is_floating_point())
    model, _ = load_model(runs / name / "model.pt", expect=config)
    again = evaluate(model, load_split(config, "test"))
    stored = json.loads((runs / name / "metrics.json").read_text())
    assert stored["test_accuracy"] == again.accuracy and stored["weights"] == "bfloat16"
    assert stored["test_accuracy_per_step"] == again.accuracy_per_step()
    assert stored["hardware"].startswith("cpu")


def test_lean_bf16_export_stores_the_metrics_of_its_own_weights(tmp_path):
    """The lean export with bf16 weights: half the weight bytes, loads with load_model, cannot be
    resumed, and its stored metrics are a re-evaluation of the rounded weights."""
    config = make_config("smoke", **{"train.epochs": 1, "data.limit": 300})
    result = train(config, checkpoint=tmp_path / "full.pt")
    state = load_checkpoint(tmp_path / "full.pt")
    metrics = gpu.lean_export(state, config, torch.device("cpu"), tmp_path / "lean.pt")
    model, calibrator = load_model(tmp_path / "lean.pt", expect=config)
    again = evaluate(model, load_split(config, "test"))
    assert metrics["test_accuracy"] == again.accuracy
    assert metrics["test_accuracy_per_step"] == again.accuracy_per_step()
    assert metrics["test_accuracy_float32_weights"] == result.metrics["test_accuracy"]
    assert metrics["evaluated_with"] == {"device": "cpu", "amp": "off"}
    assert calibrator.n == result.calibrator.n  # the calibrator is the trained one, as it was
    for k, v in load_checkpoint(tmp_path / "lean.pt")["model"].items():
        if v.is_floating_point():  # exactly the float32 weights rounded to bf16
            assert torch.equal(v, state["model"][k].to(torch.bfloat16))
    from frost_nb.checkpoint import lean_state

    with pytest.raises(CheckpointError, match="weights='float16'"):
        lean_state(state, "float16")
    with pytest.raises(CheckpointError, match="lean export"):  # loads and evaluates, never resumes
        train(config, checkpoint=tmp_path / "lean.pt")


def test_cifar_size_checkpoints_fit_what_comes_back():
    """The `cifar` size (1.48 M parameters, SGD with momentum, 60 epochs of 175 steps of history):
    the resumable checkpoint comes back whole (under 15 MiB) and its lean bf16 export, xz-compressed
    as every lean export is, is under 3.1 MiB (weights 2.96 MB before compression; these random
    weights compress to about 2 MiB). Sizes of files of the right shapes, not of a trained run."""
    full, lean = gpu.checkpoint_estimate(make_config("cifar", "cifar100"))
    assert 11 * MIB < full < gpu.CHECKPOINT_PART_BYTES
    assert 1.5 * MIB < lean < 3.1 * MIB


def test_plan_for_the_cifar_run_fits_every_call():
    """The real sizes: CIFAR-100's packed files beside 38 MiB of tracked files."""
    files = {"train.npz": 112_304_936, "test.npz": 22_523_116}
    run = gpu.RunSpec()
    plan = gpu.make_plan(files, run, travelling=38 * MIB, wheel_bytes=gpu.wheel_bytes(),
                         checkpoint_bytes=13_146_079, minutes=8)
    assert plan.part_bytes == 23 * MIB
    assert {n: len(p) for n, p in plan.files.items()} == {"train.npz": 5, "test.npz": 1}
    data = [c for c in plan.calls if c.parts]
    assert len(data) == 6 and all(38 * MIB + c.carried_bytes <= gpu.SEND_LIMIT for c in plan.calls)
    assert "benchmarks/train_throughput.py --size cifar" in data[0].command
    assert ("receive && python3 scripts/gpu.py train --size cifar --dataset cifar100 --model frost"
            in data[-1].command)
    assert plan.calls[-1].carry == [".whl", "outputs/cache/cifar100-cifar-single/frost-resnet-seed0"]
    # with a measured rate the training calls are counted: 60 epochs at 4,000 images/s, 8-minute calls
    timed = gpu.make_plan(files, run, travelling=38 * MIB, wheel_bytes=gpu.wheel_bytes(),
                          checkpoint_bytes=13_146_079, minutes=8, images_per_s=4000)
    assert round(timed.train_minutes) == 12 and len(timed.calls) == 6 + 1
    with pytest.raises(gpu.GpuError, match="no room for data beside the repository"):
        gpu.make_plan(files, run, travelling=63 * MIB, wheel_bytes=gpu.wheel_bytes(), checkpoint_bytes=0)


def test_receive_names_a_damaged_part_and_waits_for_it(tmp_path):
    here, device = tmp_path / "here", tmp_path / "device"
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.npz").write_bytes(os.urandom(5000))
    (source / "test.npz").write_bytes(os.urandom(1000))
    gpu.pack({n: source / n for n in ("train.npz", "test.npz")}, "blobs", 2048,
             [["train.npz.part00", "train.npz.part01"], ["train.npz.part02", "test.npz.part00"]], repo=here)
    shutil.copytree(here / gpu.MANIFESTS, device / gpu.MANIFESTS)
    shutil.copytree(here / gpu.PARTS / "call02", device / gpu.PARTS / "call02")
    damaged = device / gpu.PARTS / "call02" / "train.npz.part02"
    damaged.write_bytes(b"x" + damaged.read_bytes()[1:])
    status = gpu.receive(device)
    assert status["damaged"] == ["train.npz.part02"] and status["joined"] == ["test.npz"]
    assert status["missing"] == {"train.npz": ["train.npz.part00", "train.npz.part01", "train.npz.part02"]}
    shutil.copytree(here / gpu.PARTS / "call01", device / gpu.PARTS / "call01")
    shutil.copyfile(here / gpu.PARTS / "call02" / "train.npz.part02", damaged)  # sent again
    with pytest.raises(Exception, match="blobs"):  # whole now, then prepare: not a data set it knows
        gpu.receive(device)
    for n in ("train.npz", "test.npz"):
        assert (device / gpu.DATA / "blobs" / n).read_bytes() == (source / n).read_bytes()
    assert not any((device / gpu.STORE).glob("*.part*"))  # parts dropped once joined


def test_check_out_refuses_what_would_not_come_back(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for i in range(8):
        (tmp_path / "a" / "b" / f"f{i}").write_bytes(b"x")
    assert len(gpu.check_out(tmp_path)) == 8
    (tmp_path / "a" / "b" / "c").mkdir()
    (tmp_path / "a" / "b" / "c" / "deep").write_bytes(b"x")
    with open(tmp_path / "big", "wb") as f:
        f.truncate(16 * MIB + 1)
    (tmp_path / "a" / "b" / "bad name").write_bytes(b"x")
    with pytest.raises(gpu.GpuError) as err:
        gpu.check_out(tmp_path)
    text = str(err.value)
    assert "deeper than 2 folders" in text and "big: 16.0 MiB, over 16.0 MiB" in text
    assert "11 files, over 8" in text and "bad name: a name with characters" in text


def test_room_for_another_epoch():
    assert gpu.room_for_another(elapsed=300, last_epoch=100, budget=480, final=False)  # 420 <= 480
    assert not gpu.room_for_another(elapsed=400, last_epoch=100, budget=480, final=False)
    assert gpu.room_for_another(elapsed=350, last_epoch=100, budget=480, final=False)  # 470
    assert not gpu.room_for_another(elapsed=350, last_epoch=100, budget=480, final=True)  # 500: the test pass


def _wheel(folder: Path, name="frost_demo_pkg", version="1.0") -> Path:
    """A minimal pure-Python wheel, as pip builds one."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": b"VALUE = 42\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n"}
    record = "".join(f"{k},,\n" for k in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{info}/RECORD", record)
    return path


def test_a_carried_wheel_is_checked_and_installed(tmp_path, monkeypatch):
    """On the device a missing module's pinned wheel is installed into the site folder, with pip
    and no index; a wheel whose SHA-256 is not the pinned one is refused."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "whl").mkdir()
    path = _wheel(tmp_path / "whl")
    pinned = gpu.Wheel("frost_demo_pkg==1.0", "frost_demo_pkg", path.name, path.stat().st_size,
                       hashlib.sha256(path.read_bytes()).hexdigest())
    wrong = gpu.Wheel(pinned.requirement, pinned.module, pinned.file, pinned.bytes, "0" * 64)
    with pytest.raises(gpu.GpuError, match="not the pinned frost_demo_pkg==1.0"):
        gpu.ensure_packages(tmp_path / "whl", str(tmp_path / "site"), wheels=(wrong,))
    with pytest.raises(gpu.GpuError, match="run python scripts/gpu.py wheels here"):
        gpu.ensure_packages(tmp_path / "none", str(tmp_path / "site"), wheels=(pinned,))
    installed = gpu.ensure_packages(tmp_path / "whl", str(tmp_path / "site"), wheels=(pinned,))
    assert installed == ["frost_demo_pkg==1.0"]
    import frost_demo_pkg

    assert frost_demo_pkg.VALUE == 42 and str(tmp_path / "site") in frost_demo_pkg.__file__
    assert gpu.ensure_packages(tmp_path / "whl", str(tmp_path / "site"), wheels=(pinned,)) == []  # there now
    sys.modules.pop("frost_demo_pkg")
