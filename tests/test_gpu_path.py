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
    """The printed commands, run as printed from the staged checkout: the training split in 3
    uploads under a limit that allows no fewer, the checkpoint back in two returned files (as the
    ladder256 run's), a kill once the first epoch is back, a fresh folder for the next allocation
    that resumes from outputs/partial/, and the test split evaluated here at the end."""
    monkeypatch.delenv("OUT", raising=False)
    lines = []
    result = gpu.rehearse(tmp_path, say=lines.append)
    assert "a stand-in for CIFAR-100" in lines[0]  # the tests hide the real data sets
    assert result["uploads"] == 3
    log = result["log"]
    assert [e["allocation"] for e in log] == [1, 1, 1, 2, 2, 2]
    assert all(e["sent_bytes"] <= result["upload_limit"] for e in log)
    assert [e["killed"] for e in log] == [False, False, True, False, False, False]
    name = gpu.REHEARSAL.name()
    # what travels: the library and the two scripts, the unfinished checkpoint once there is one
    for e in log:
        assert {f.split("/")[0] for f in e["sent_files"]} <= {"frost_nb", "scripts", "outputs", ".gitignore"}
        scripts = {f for f in e["sent_files"] if f.startswith("scripts/")}
        assert scripts == {"scripts/gpu.py", "scripts/parts.py"}
        kept = {f for f in e["sent_files"] if f.startswith("outputs/")}
        assert kept == (set() if e["allocation"] == 1 else {f"{gpu.PARTIAL}/{name}/{n}" for n in
                                                            ("model.pt", "config.json", "gpu_calls.json")})
    first, second = result["allocations"]
    [kept] = first["fetched"]
    assert (kept["epoch"], kept["finished"], kept["parts"]) == (1, False, 2)  # the killed command's last
    [done] = second["fetched"]
    assert (done["epoch"], done["finished"], done["parts"]) == (2, True, 2)
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
    lean = load_checkpoint(tmp_path / "runs" / name / "model.pt")  # runs.export_run's, bf16
    assert lean["lean"] and lean["weights"] == "bfloat16" and (tmp_path / "runs" / "index.csv").is_file()
    bf16, _ = load_model(tmp_path / "runs" / name / "model.pt", expect=config)
    assert json.loads((tmp_path / "runs" / name / "metrics.json").read_text())["test_accuracy"] == \
        evaluate(bf16, load_split(config, "test")).accuracy


def _cifar_plan(travelling=2 * MIB, speed=gpu.Speed(), host=gpu.Host(), data=80 * MIB, size="cifar",
                checkpoint=13 * MIB):
    config = make_config(size, "cifar100")
    return gpu.make_plan(gpu.RunSpec(size=size), host, speed, data_bytes=data, travelling=travelling,
                         wheel_bytes=gpu.wheel_bytes(), checkpoint_bytes=checkpoint,
                         epochs=config.train.epochs, train_images=45_000, val_images=5_000)


def test_plan_for_the_cifar_run_fits_each_allocation():
    """At the issue's estimate (3,500 images/s) 60 epochs take two allocations of at most 15
    minutes, each with 3 uploads; at the 4-minute target one allocation suffices."""
    plan = _cifar_plan(travelling=20 * MIB)
    assert len(plan.uploads) == 3 and all(u.data_bytes <= 28 * MIB for u in plan.uploads)
    assert [a.epochs for a in plan.allocations] == [(1, 30), (31, 60)]
    assert all(a.total_s <= 15 * 60 for a in plan.allocations)
    assert plan.uploads[-1].command.startswith("python3 -u scripts/gpu.py train --size cifar")
    assert plan.uploads[-1].command.endswith("--limit-s 600 --stop-s 75 --return-bytes 16777216")
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
    with pytest.raises(gpu.GpuError, match="comes back in 2 files .* 8 files, over the 7"):
        _cifar_plan(host=replace(gpu.Host(), return_file_bytes=8 * MIB, return_files=7))
    # a checkpoint over outputs/partial/'s budget cannot wait between allocations: one, or none
    with pytest.raises(gpu.GpuError, match="takes 2 allocations, .* over the 16.0 MiB"):
        _cifar_plan(checkpoint=gpu.PARTIAL_BUDGET + 1)
    assert len(_cifar_plan(checkpoint=gpu.PARTIAL_BUDGET + 1, size="ladder256").allocations) == 1


def test_the_plan_fits_with_every_committed_run_in_place(tmp_path):
    """What travels is the staged checkout, whatever outputs/ holds: this repository as it is, with
    the ladder's runs (12 MiB) and the paper-size runs' whole budget (32 MiB) committed beside, stages
    to the same files; on it the cifar and ladder256 runs plan within the host's real limits."""
    here = tmp_path / "checkout"
    for rel in gpu.travelling_files(repo_root()):
        (here / rel).parent.mkdir(parents=True, exist_ok=True)
        (here / rel).write_bytes((repo_root() / rel).read_bytes())
    staged = gpu.travelling_files(gpu.stage(None, here))
    assert staged and all(f.startswith(("frost_nb/", "scripts/", ".gitignore")) for f in staged)
    travelling = gpu.travelling_bytes(here / gpu.STAGE)
    for rel, mib in (("outputs/runs/cifar100-ladder128-ladder/frost-seed0/model.pt", 12),
                     ("outputs/runs/cifar100-cifar-families/frost-seed0/model.pt", 32)):
        (here / rel).parent.mkdir(parents=True, exist_ok=True)
        with open(here / rel, "wb") as f:
            f.truncate(mib * MIB)
    assert gpu.travelling_files(gpu.stage(None, here)) == staged
    assert gpu.travelling_bytes(here / gpu.STAGE) == travelling < 4 * MIB
    for size, allocations, pieces in (("cifar", 2, 1), ("ladder256", 1, 2)):
        config = make_config(size, "cifar100")
        checkpoint = gpu.checkpoint_estimate(config, 40_500)
        plan = _cifar_plan(travelling=travelling, size=size, checkpoint=checkpoint)
        assert (len(plan.allocations), plan.pieces) == (allocations, pieces), size
        assert f"train --size {size} " in plan.uploads[-1].command


def test_checkpoint_estimate_is_the_trainers_own_state(tmp_path):
    """The estimate writes ``Trainer.state``: a real checkpoint of the same run after one epoch is
    no larger than the estimate for all its epochs, and not much smaller for one."""
    from frost_nb.training import train

    config = make_config("smoke", **{"train.epochs": 1, "data.limit": 300})
    train(config, checkpoint=tmp_path / "full.pt")
    real = (tmp_path / "full.pt").stat().st_size
    assert 0.8 * gpu.checkpoint_estimate(config, 240) <= real <= gpu.checkpoint_estimate(config, 240) * 1.05


def test_webp_sheets_give_back_the_exact_pixels(tmp_path):
    """Random pixels (the hardest case) and a grey set: decoded byte for byte, labels kept."""
    from frost_nb.data.prepare import Part

    rng = np.random.default_rng(1)
    for channels, n in ((3, 1234), (1, 50)):
        x = rng.integers(0, 256, (n, channels, 32, 32), dtype=np.uint8)
        part = Part(x, np.arange(n) % 7, tuple("abcdefg"), "here", None, None)
        path = gpu.encode_split(part, tmp_path / f"c{channels}.npz")
        got = gpu.decode_split(path)
        assert np.array_equal(got.x, x) and np.array_equal(got.y, part.y) and got.classes == part.classes
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


def test_a_checkpoint_comes_back_whole_or_not_at_all(tmp_path):
    """In parts of at most one returned file, the epoch before removed once the new manifest is
    written; a return folder cut off mid-epoch (a part of the newer epoch damaged) gives the epoch
    before, and one without a whole epoch says so."""
    local, out = tmp_path / "run" / "model.pt", tmp_path / "out"
    local.parent.mkdir()
    out.mkdir()
    for epoch, data in ((1, b"a" * 2500), (2, b"b" * 2600)):
        local.write_bytes(data)
        gpu.send_back(local, out, epoch, piece_bytes=1000)
    assert sorted(p.name for p in out.iterdir()) == ["e002.model.pt.manifest.json"] + \
        [f"e002.model.pt.part0{i}" for i in range(3)]
    path, pieces = gpu.returned_checkpoint(out, tmp_path / "joined")
    assert path.read_bytes() == b"b" * 2600 and pieces == 3
    local.write_bytes(b"c" * 1500)
    parts = gpu.parts.split(local.rename(local.with_name("e003.model.pt")), out, 1000 / MIB)
    (out / "e003.model.pt.part01").write_bytes(b"x")  # the kill came before this part was whole
    assert gpu.returned_checkpoint(out, tmp_path / "again")[0].read_bytes() == b"b" * 2600
    for p in out.glob("e002*"):
        p.unlink()
    with pytest.raises(gpu.GpuError, match="holds no whole checkpoint"):
        gpu.returned_checkpoint(out, tmp_path / "none")
    assert parts.name == "e003.model.pt.manifest.json"


def test_commands_fail_with_one_line(tmp_path, capsys):
    """A damaged returned file, a missing packed split: one line on stderr, exit status 2."""
    came = tmp_path / "back" / "grid" / "label"
    came.mkdir(parents=True)
    (came / "config.json").write_text("{")
    assert gpu.main(["fetch", "--from", str(tmp_path / "back")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "config.json" in err
    assert "Traceback" not in err
    with pytest.raises(SystemExit) as stop:
        gpu.main(["plan", "--size", "huge"])
    assert stop.value.code == 2 and "invalid choice: 'huge'" in capsys.readouterr().err
    for size in ("ladder32", "ladder256"):
        assert gpu._commands().parse_args(["train", "--size", size]).size == size


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


def test_bf16_export_stores_the_metrics_of_its_own_weights(tmp_path, monkeypatch):
    """``runs.export_run(weights="bfloat16")``, what ``fetch --commit`` calls: a model trained far
    enough that rounding its weights to bf16 changes answers (checked first, so that the test can
    fail), whose export then holds the accuracies of the rounded weights, the float32 accuracy
    beside them, and logits other than the float32 model's."""
    from frost_nb.runs import export_run, train_or_load

    monkeypatch.setenv("FROST_CACHE", str(tmp_path / "cache"))
    config = make_config("smoke", **{"train.epochs": 4})
    result = train_or_load(config, name="bf16/frost-seed0")
    folder = export_run(result.checkpoint.parent, tmp_path / "runs", weights="bfloat16")
    test = load_split(config, "test")
    rounded, _ = load_model(folder / "model.pt", expect=config)
    ours, theirs = evaluate(rounded, test), evaluate(result.model, test)
    assert ours.accuracy_per_step() != theirs.accuracy_per_step()  # bf16 weights answer otherwise
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["test_accuracy_per_step"] == ours.accuracy_per_step()
    assert metrics["test_accuracy"] == ours.accuracy and metrics["weights"] == "bfloat16"
    assert metrics["test_accuracy_float32_weights"] == result.metrics["test_accuracy"] == theirs.accuracy
    assert load_checkpoint(folder / "model.pt")["metrics"]["test_accuracy"] == ours.accuracy
    assert not torch.equal(ours.logits, theirs.logits)
