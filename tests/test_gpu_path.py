"""scripts/gpu.py: the offline-GPU-host path of docs/scaling.md, on the CPU at smoke size. The
rehearsal runs every printed command against a stand-in host (a temporary folder with the host's
limits); no GPU is needed or simulated, and nothing here is a GPU result."""

import hashlib
import importlib.util
import json
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from frost_nb.checkpoint import load_checkpoint, load_model
from frost_nb.config import make_config
from frost_nb.paths import repo_root
from frost_nb.runs import identity_key
from frost_nb.training import evaluate, load_split

spec = importlib.util.spec_from_file_location("gpu", repo_root() / "scripts" / "gpu.py")
gpu = sys.modules["gpu"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(gpu)
MIB = 1 << 20


def test_rehearsal_kills_mid_training_and_resumes_on_a_bare_host(tmp_path, monkeypatch):
    """The printed commands, run as printed: the training split in 3 uploads under a limit that
    allows no fewer, a kill once the first epoch's checkpoint is in the return folder, a fresh
    folder for the next allocation that resumes from outputs/partial/, and the test split
    evaluated here at the end."""
    monkeypatch.delenv("OUT", raising=False)
    lines = []
    result = gpu.rehearse(tmp_path, say=lines.append)
    assert "a stand-in in CIFAR-100's packed format" in lines[0]  # the tests hide the real data sets
    assert result["uploads"] == 3
    log = result["log"]
    assert [e["allocation"] for e in log] == [1, 1, 1, 2, 2, 2]
    assert all(e["sent_bytes"] <= result["upload_limit"] for e in log)
    assert [e["killed"] for e in log] == [False, False, True, False, False, False]
    first, second = result["allocations"]
    [kept] = first["fetched"]
    assert (kept["epoch"], kept["finished"]) == (1, False)  # the killed command returned its last epoch
    [done] = second["fetched"]
    assert (done["epoch"], done["finished"]) == (2, True)
    name = gpu.REHEARSAL.name()
    here = tmp_path / "checkout"
    assert not (here / gpu.PARTIAL / name).exists()  # removed once finished
    state = load_checkpoint(tmp_path / "cache" / name / "model.pt")
    assert state["history"]["epochs"]["epoch"] == [1, 2]  # resumed after epoch 1, not restarted
    calls = json.loads((tmp_path / "cache" / name / "gpu_calls.json").read_text())
    assert [(c["resumed_from_epoch"], c["epochs_after"]) for c in calls] == [(0, 1), (1, 2)]
    # the bare second host decoded exactly the pixels prepared here
    host_x = np.load(tmp_path / "host" / "host2" / gpu.DATA / "prepared" / "cifar100" / "train.npz")["x"]
    here_x = np.load(tmp_path / "data" / "prepared" / "cifar100" / "train.npz")["x"]
    assert np.array_equal(host_x, here_x)
    # the test split never travelled: the host's test part is empty; here it was evaluated
    host_test = tmp_path / "host" / "host2" / gpu.DATA / "prepared" / "cifar100" / "test.npz"
    assert len(np.load(host_test)["y"]) == 0
    config = gpu.REHEARSAL.config()
    monkeypatch.setenv("FROST_DATA", str(tmp_path / "data"))
    model, _ = load_model(tmp_path / "cache" / name / "model.pt", expect=config)
    again = evaluate(model, load_split(config, "test"))
    metrics = json.loads((tmp_path / "cache" / name / "metrics.json").read_text())
    assert metrics["test_accuracy"] == again.accuracy == done["test_accuracy"]
    assert metrics["test_evaluated_on"] == "cpu"
    lean = load_checkpoint(tmp_path / "runs" / name / "model.pt")
    assert lean["lean"] and lean["weights"] == "bfloat16" and (tmp_path / "runs" / "index.csv").is_file()


def _cifar_plan(travelling=20 * MIB, speed=gpu.Speed(), host=gpu.Host(), data=80 * MIB):
    config = make_config("cifar", "cifar100")
    return gpu.make_plan(gpu.RunSpec(), host, speed, data_bytes=data, travelling=travelling,
                         needed=2 * MIB, wheel_bytes=gpu.wheel_bytes(), checkpoint_bytes=13 * MIB,
                         epochs=config.train.epochs, train_images=45_000, val_images=5_000)


def test_plan_for_the_cifar_run_fits_each_allocation():
    """At the issue's estimate (3,500 images/s) 60 epochs take two allocations of at most 15
    minutes, each with 3 uploads; at the 4-minute target one allocation suffices."""
    plan = _cifar_plan()
    assert len(plan.uploads) == 3 and all(u.data_bytes <= 28 * MIB for u in plan.uploads)
    assert [a.epochs for a in plan.allocations] == [(1, 30), (31, 60)]
    assert all(a.total_s <= 15 * 60 for a in plan.allocations)
    assert plan.uploads[-1].command.startswith("python3 -u scripts/gpu.py train --size cifar")
    assert plan.uploads[-1].command.endswith("--limit-s 600 --stop-s 75")
    assert [u.command for u in plan.uploads[:-1]] == ["python3 scripts/gpu.py receive"] * 2
    fast = _cifar_plan(speed=gpu.Speed(images_per_s=45_000 * 60 / 240, measured=True))
    assert [a.epochs for a in fast.allocations] == [(1, 60)]
    text = gpu.describe(plan, gpu.RunSpec())
    assert "an estimate from the code, not measured" in text and "allocation 2 of 2" in text


def test_plan_refuses_what_the_host_cannot_take():
    with pytest.raises(gpu.GpuError, match="needs 4 uploads"):
        _cifar_plan(travelling=23 * MIB)
    with pytest.raises(gpu.GpuError, match="no epoch fits an allocation"):
        _cifar_plan(host=replace(gpu.Host(), gpu_s=6 * 60))
    with pytest.raises(gpu.GpuError, match="over what one returned file may hold"):
        _cifar_plan(host=replace(gpu.Host(), return_file_bytes=8 * MIB))


def test_webp_sheets_give_back_the_exact_pixels(tmp_path):
    """Random pixels (the hardest case) and a grey set: decoded byte for byte, labels kept."""
    from frost_nb.data.prepare import Part

    rng = np.random.default_rng(1)
    for channels, n in ((3, 1234), (1, 50)):
        x = rng.integers(0, 256, (n, channels, 32, 32), dtype=np.uint8)
        part = Part(x, np.arange(n) % 7, tuple("abcdefg"), "here", None, None)
        path = gpu.encode_split(part, tmp_path / f"c{channels}.npz")
        got = gpu.decode_split(path)
        assert np.array_equal(got["x"], x) and np.array_equal(got["y"], part.y)
    with np.load(path) as z:
        arrays = dict(z)
    arrays["sha256"] = np.array("0" * 64)  # a file whose pixels are not the recorded ones
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(gpu.GpuError, match="does not match its SHA-256"):
        gpu.decode_split(tmp_path / "bad.npz")


def test_speed_settings_stay_out_of_a_runs_identity():
    config = make_config("cifar", "cifar100")
    for key, value in (("train.compile", "off"), ("train.device", "cpu"), ("train.num_workers", 2)):
        assert identity_key(config.replace(**{key: value})) == identity_key(config)


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
    assert gpu.room_for_another(now=300, last_epoch=100, deadline=420, final=False)  # 410 <= 420
    assert not gpu.room_for_another(now=330, last_epoch=100, deadline=420, final=False)
    assert not gpu.room_for_another(now=300, last_epoch=100, deadline=420, final=True)  # 450


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
    """On the host a missing module's pinned wheel is installed into the site folder with pip,
    no index and no dependencies; a wheel whose SHA-256 is not the pinned one is refused."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / ".whl").mkdir()
    path = _wheel(tmp_path / ".whl")
    pinned = gpu.Wheel("frost_demo_pkg==1.0", "frost_demo_pkg", path.name, path.stat().st_size,
                       hashlib.sha256(path.read_bytes()).hexdigest())
    wrong = gpu.Wheel(pinned.requirement, pinned.module, pinned.file, pinned.bytes, "0" * 64)
    with pytest.raises(gpu.GpuError, match="not the pinned frost_demo_pkg==1.0"):
        gpu.ensure_packages(tmp_path, tmp_path / "site", wheels=(wrong,))
    with pytest.raises(gpu.GpuError, match="run python scripts/gpu.py wheels here"):
        gpu.ensure_packages(tmp_path / "none", tmp_path / "site", wheels=(pinned,))
    assert gpu.ensure_packages(tmp_path, tmp_path / "site", wheels=(pinned,)) == ["frost_demo_pkg==1.0"]
    import frost_demo_pkg

    assert frost_demo_pkg.VALUE == 42 and str(tmp_path / "site") in frost_demo_pkg.__file__
    assert gpu.ensure_packages(tmp_path, tmp_path / "site", wheels=(pinned,)) == []  # there now
    sys.modules.pop("frost_demo_pkg")


def test_lean_bf16_export_stores_the_metrics_of_its_own_weights(tmp_path):
    from frost_nb.training import train

    config = make_config("smoke", **{"train.epochs": 1, "data.limit": 300})
    result = train(config, checkpoint=tmp_path / "full.pt")
    state = load_checkpoint(tmp_path / "full.pt")
    metrics = gpu.lean_export(state, config, torch.device("cpu"), tmp_path / "lean.pt")
    model, _ = load_model(tmp_path / "lean.pt", expect=config)
    again = evaluate(model, load_split(config, "test"))
    assert metrics["test_accuracy"] == again.accuracy
    assert metrics["test_accuracy_float32_weights"] == result.metrics["test_accuracy"]
