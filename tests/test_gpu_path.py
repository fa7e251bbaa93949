"""scripts/gpu.py: the offline-GPU-host path of docs/scaling.md, on the CPU at smoke size. The
rehearsal (``python scripts/gpu.py rehearse`` runs it) runs every printed command against a stand-in
host (``StandIn``: a temporary folder with the host's limits); no GPU is needed or simulated, and
nothing here is a GPU result."""

import hashlib
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from frost_nb import training
from frost_nb.checkpoint import load_checkpoint, load_model
from frost_nb.config import make_config
from frost_nb.cost import checkpoint_bytes
from frost_nb.paths import PARTIAL, repo_root
from frost_nb.runs import identity_key
from frost_nb.training import evaluate, load_split

spec = importlib.util.spec_from_file_location("gpu", repo_root() / "scripts" / "gpu.py")
gpu = sys.modules["gpu"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(gpu)
MIB = 1 << 20
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
# the rehearsed run: train's options, its config and name
REHEARSAL = gpu.run_of(gpu._commands().parse_args(["train", "--size", "smoke", "--epochs", "2", "--set",
                                                   "model.stem_stride=2", "--set", "data.val_fraction=0.2",
                                                   "--set", "data.limit=500"]))


def check_out(out: Path, host: gpu.Host = gpu.Host()) -> list[Path]:
    """The files under ``out`` if every one comes back from ``host`` (its return limits, plain
    names), else GpuError: what the stand-in host lets come back."""
    files, problems = [], []
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if any(not OUT_NAME.match(p) for p in rel.parts):
            problems.append(f"{rel}: a name with characters other than letters, digits, '.', '_', '-'")
        if path.is_symlink() or not (path.is_dir() or path.is_file()):
            problems.append(f"{rel}: not a plain file")
        elif path.is_file():
            files.append(path)
            if len(rel.parts) > host.return_depth + 1:
                problems.append(f"{rel}: deeper than {host.return_depth} folders")
            if path.stat().st_size > host.return_file_bytes:
                problems.append(f"{rel}: {path.stat().st_size / MIB:.1f} MiB, over "
                                f"{host.return_file_bytes / MIB:.1f} MiB")
    if len(files) > host.return_files:
        problems.append(f"{len(files)} files, over {host.return_files}")
    if problems:
        raise gpu.GpuError(f"{out} would not come back whole: " + "; ".join(problems))
    return files


class StandIn:
    """A stand-in host: a temporary folder that receives a copy of a checkout's travelling files
    and the named paths (refusing more than the upload limit), empties the return folder before
    each command, kills a command at its time limit (or when ``kill_when`` holds), lets only what
    ``check_out`` allows come back, and is bare again when a new allocation starts."""

    def __init__(self, root: Path, host: gpu.Host):
        self.root, self.host, self.allocation, self.log = Path(root), host, 0, []
        self.bin = self.root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        shim = self.bin / "python3"  # the host's python3: this interpreter, its environment kept
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        shim.chmod(0o755)

    def start(self) -> Path:
        """A new allocation: a bare folder."""
        self.allocation += 1
        self.tree, self.out = self.root / f"host{self.allocation}", self.root / "out"
        return self.tree

    def run(self, here: Path, command: str, send: list[str], *, kill_when=None) -> tuple[Path, str, bool]:
        files = gpu.travelling_files(here)
        sent = sum((here / n).lstat().st_size for n in files)
        for name in files:
            (self.tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(here / name, self.tree / name)
        for path in send:  # replaced there; one missing here is removed there
            there = self.tree / path
            shutil.rmtree(there, ignore_errors=True) if there.is_dir() else there.unlink(missing_ok=True)
            if (here / path).exists():
                shutil.copytree(here / path, there)
                sent += sum(p.stat().st_size for p in there.rglob("*") if p.is_file())
        if sent > self.host.upload_bytes:
            raise gpu.GpuError(f"the stand-in host refuses an upload of {sent} bytes, over "
                               f"{self.host.upload_bytes}")
        shutil.rmtree(self.out, ignore_errors=True)
        self.out.mkdir(parents=True)
        env = {**os.environ, "OUT": str(self.out), "PATH": f"{self.bin}:{os.environ['PATH']}",
               "PYTHONPATH": "", "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(["bash", "-c", command], cwd=self.tree, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        killed, t0 = False, time.monotonic()
        while proc.poll() is None:
            if time.monotonic() - t0 > self.host.command_s or (kill_when is not None and kill_when(self.out)):
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
            time.sleep(0.05)
        output = proc.communicate()[0]
        self.log.append({"allocation": self.allocation, "command": command, "sent_bytes": sent,
                         "sent_files": files, "killed": killed, "rc": proc.returncode,
                         "seconds": round(time.monotonic() - t0, 1)})
        if proc.returncode != 0 and not killed:
            raise gpu.GpuError(f"the command failed on the stand-in host:\n{command}\n{output[-4000:]}")
        check_out(self.out, self.host)
        back = self.root / f"back{len(self.log)}"
        shutil.copytree(self.out, back)
        return back, output, killed


def standin_cifar100(root: Path, per_class: tuple[int, int] = (5, 1), seed: int = 0) -> None:
    """A small stand-in for CIFAR-100, prepared under ``root``: random pixels, its 100 classes and
    20 superclasses."""
    from frost_nb.data.prepare import Part, prepared_dir, write_prepared

    rng, classes = np.random.default_rng(seed), tuple(f"class{i:02d}" for i in range(100))
    sets = {}
    for name, n in zip(("train", "test"), per_class):
        y = np.repeat(np.arange(100, dtype=np.int64), n)
        x = rng.integers(0, 256, (len(y), 3, 32, 32), dtype=np.uint8)  # (N, C, H, W)
        sets[name] = Part(x, y, classes, "a stand-in", y // 5, tuple(f"super{i}" for i in range(20)))
    write_prepared(prepared_dir("cifar100", root), sets)


def clone(repo: Path, here: Path, but: str = "//") -> Path:
    """What a clone of ``repo`` holds (its travelling files but those under ``but``), in ``here``,
    a git repository of its own (git lists what travels)."""
    for rel in gpu.travelling_files(repo):
        if not rel.startswith(but):
            (here / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, here / rel)
    subprocess.run(["git", "init", "-q", str(here)], check=True)
    return here


def rehearse(work: Path, *, run=REHEARSAL, speed=gpu.Speed(), host=gpu.Host(), repo: Path = repo_root(),
             say=print) -> dict:
    """Every printed command of ``run``'s plan against a stand-in host in ``work``, from a clone of
    ``repo`` staged as for the host, on a small stand-in for CIFAR-100 (the tests hide the real data
    sets). The limits are scaled to the smoke run: the upload so that the training split needs
    ``host.max_uploads`` uploads, a returned file so that the checkpoint comes back in two (as the
    ``ladder256`` run's does). Allocation 1 is killed once its first epoch is back; allocation 2
    starts bare, resumes from the fetched checkpoint and finishes; the test split is evaluated
    here. Returns what happened."""
    (options, config, name), work = run, Path(work)
    here = clone(repo, work / "checkout", but=f"{PARTIAL}/{name}/")
    standin_cifar100(root := work / "data")
    packed = gpu.pack(config.data.name, host.max_uploads, repo=here, data_root=root)
    mine = config.replace(**{"data.root": str(root)})
    train_images, val_images = len(load_split(mine, "train")), len(load_split(mine, "val"))
    checkpoint = checkpoint_bytes(config, train_images)
    staged = gpu.stage(None, here)
    travelling, wheels = gpu.travelling_bytes(staged), sum(w.bytes for w in gpu.WHEELS)
    host = replace(host, upload_bytes=travelling + checkpoint + wheels + 8192 + MIB
                   + math.ceil(packed.stat().st_size / host.max_uploads) + 4096,
                   return_file_bytes=math.ceil(checkpoint * 0.6))
    plan = gpu.make_plan(options, host, speed, data_bytes=packed.stat().st_size, travelling=travelling,
                         wheel_bytes=wheels, checkpoint_bytes=checkpoint, epochs=config.train.epochs,
                         train_images=train_images, val_images=val_images)
    say(gpu.describe(plan, name))
    stand = StandIn(work / "host", host)
    result = {"uploads": len(plan.uploads), "upload_limit": host.upload_bytes, "allocations": []}
    epoch_back = lambda out: (out / name / gpu.CALLS).is_file()  # written after the checkpoint's parts
    for k in (1, 2):
        stand.start()
        for i, upload in enumerate(plan.uploads, 1):
            kill = epoch_back if k == 1 and i == len(plan.uploads) else None  # once its first epoch is back
            back, output, killed = stand.run(staged, upload.command, upload.send, kill_when=kill)
            say(f"allocation {k}, upload {i}: {upload.command}" + (" (killed)" if killed else "")
                + f"\n{output[-1500:]}")
        before, os.environ["FROST_DATA"] = os.environ.get("FROST_DATA"), str(root)  # here: the test split
        try:
            entries = gpu.fetch(back, repo=here, cache=work / "cache", runs_root=work / "runs", commit=k == 2)
        finally:
            os.environ.pop("FROST_DATA") if before is None else os.environ.update(FROST_DATA=before)
        result["allocations"].append({"killed": killed, "fetched": entries})
        say(json.dumps(entries))
    result |= {"log": stand.log, "back": back}
    return result


def test_rehearsal_kills_mid_training_and_resumes_on_a_bare_host(tmp_path, monkeypatch):
    """The printed commands, run as printed from the staged checkout: the training split in 3
    uploads under a limit that allows no fewer, the checkpoint back in two returned files (as the
    ladder256 run's), a kill once the first epoch is back, a fresh folder for the next allocation
    that resumes from outputs/partial/, and the test split evaluated here at the end, once: fetch
    --commit stores and exports the bf16 weights (fetch alone stores the float32 ones, evaluated)."""
    monkeypatch.delenv("OUT", raising=False)
    passes = []  # the test split's evaluations here (the host's commands run in other processes)
    monkeypatch.setattr(training, "evaluate", lambda *a, **k: passes.append(1) or evaluate(*a, **k))
    result = rehearse(tmp_path, say=lambda line: None)
    assert len(passes) == 1  # fetch --commit: the bf16 weights only (it evaluated the float32 ones too)
    assert result["uploads"] == 3
    log = result["log"]
    assert [e["allocation"] for e in log] == [1, 1, 1, 2, 2, 2]
    assert all(e["sent_bytes"] <= result["upload_limit"] for e in log)
    assert [e["killed"] for e in log] == [False, False, True, False, False, False]
    _, config, name = REHEARSAL
    # what travels: the library and the two scripts, the unfinished checkpoint once there is one
    for e in log:
        assert {f.split("/")[0] for f in e["sent_files"]} <= {"frost_nb", "scripts", "outputs", ".gitignore"}
        scripts = {f for f in e["sent_files"] if f.startswith("scripts/")}
        assert scripts == {"scripts/gpu.py", "scripts/parts.py"}
        kept = {f for f in e["sent_files"] if f.startswith("outputs/")}
        assert kept == (set() if e["allocation"] == 1 else {f"{PARTIAL}/{name}/{n}" for n in
                                                            ("model.pt", "config.json", "gpu_calls.json")})
    first, second = result["allocations"]
    [kept] = first["fetched"]
    assert (kept["epoch"], kept["finished"], kept["parts"]) == (1, False, 2)  # the killed command's last
    [done] = second["fetched"]
    assert (done["epoch"], done["finished"], done["parts"]) == (2, True, 2)
    here = tmp_path / "checkout"
    assert not (here / PARTIAL / name).exists()  # removed once finished
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
    monkeypatch.setenv("FROST_DATA", str(tmp_path / "data"))
    for store in ("cache", "runs"):  # the run cache and the committed runs hold the same bf16 weights
        lean = load_checkpoint(tmp_path / store / name / "model.pt")
        assert lean["lean"] and lean["weights"] == "bfloat16"
        model, _ = load_model(tmp_path / store / name / "model.pt", expect=config)
        metrics = json.loads((tmp_path / store / name / "metrics.json").read_text())
        assert metrics["test_accuracy"] == evaluate(model, load_split(config, "test")).accuracy == \
            done["test_accuracy"] == lean["metrics"]["test_accuracy"]
        assert metrics["test_evaluated_on"] == "cpu" and metrics["weights"] == "bfloat16"
        assert metrics["hardware"] == calls[-1]["hardware"]
    assert (tmp_path / "runs" / "index.csv").is_file()
    [plain] = gpu.fetch(result["back"], repo=here, cache=tmp_path / "float32")  # without --commit
    full = load_checkpoint(tmp_path / "float32" / name / "model.pt")
    assert not full.get("lean") and "optimizer" in full and len(passes) == 2
    model, _ = load_model(tmp_path / "float32" / name / "model.pt", expect=config)
    metrics = json.loads((tmp_path / "float32" / name / "metrics.json").read_text())
    assert metrics["test_accuracy"] == evaluate(model, load_split(config, "test")).accuracy == \
        plain["test_accuracy"] == full["metrics"]["test_accuracy"]
    assert "weights" not in metrics and metrics["test_evaluated_on"] == "cpu"


def _cifar_plan(travelling=2 * MIB, speed=gpu.Speed(), host=gpu.Host(), data=80 * MIB, size="cifar",
                checkpoint=13 * MIB):
    config = make_config(size, "cifar100")
    return gpu.make_plan(f"--size {size}", host, speed, data_bytes=data, travelling=travelling,
                         wheel_bytes=sum(w.bytes for w in gpu.WHEELS), checkpoint_bytes=checkpoint,
                         epochs=config.train.epochs, train_images=45_000, val_images=5_000)


def test_plan_for_the_cifar_run_fits_each_allocation():
    """At the issue's estimate (3,500 images/s) 60 epochs take two allocations of at most 15
    minutes, each with 3 uploads; at the 4-minute target one allocation suffices."""
    plan = _cifar_plan(travelling=20 * MIB)
    assert len(plan.uploads) == 3 and all(u.data_bytes <= 28 * MIB for u in plan.uploads)
    assert [a.epochs for a in plan.allocations] == [(1, 30), (31, 60)]
    assert all(sum(a.seconds.values()) <= 15 * 60 for a in plan.allocations)
    assert plan.uploads[-1].command.startswith("python3 -u scripts/gpu.py train --size cifar")
    assert plan.uploads[-1].command.endswith("--limit-s 600 --stop-s 75 --return-bytes 16777216")
    assert [u.command for u in plan.uploads[:-1]] == ["python3 scripts/gpu.py receive"] * 2
    fast = _cifar_plan(speed=gpu.Speed(images_per_s=45_000 * 60 / 240, measured=True))
    assert [a.epochs for a in fast.allocations] == [(1, 60)]
    text = gpu.describe(plan, "cifar100-cifar-single/frost-resnet-seed0")
    assert "an estimate from the code, not measured" in text and "allocation 2 of 2" in text


def test_the_train_command_names_the_run_it_was_planned_for():
    """The options the plan prints for ``train`` parse back, on the host, into the same run."""
    options, config, name = gpu.run_of(gpu._commands().parse_args(["plan", "--set", "train.lr=0.1"]))
    assert options == ("--size cifar --dataset cifar100 --model frost --backbone resnet --seed 0 "
                       "--set train.lr=0.1")
    again = gpu.run_of(gpu._commands().parse_args(["train", *options.split()]))
    assert (again[0], identity_key(again[1]), again[2]) == (options, identity_key(config), name)
    assert name == "cifar100-cifar-single/frost-resnet-seed0" and config.train.lr == 0.1


def test_the_plan_command_gives_each_limit_to_its_field(tmp_path, monkeypatch, capsys):
    """``plan``'s options, each to the ``Host`` or ``Speed`` field it names (by keyword), in the plan
    it prints: here for digits at smoke size, a packed split of 5 MiB and a staged checkout."""
    (tmp_path / gpu.SEND / "digits").mkdir(parents=True)
    with open(tmp_path / gpu.SEND / "digits" / gpu.PACKED, "wb") as f:
        f.truncate(5 * MIB)
    (tmp_path / gpu.STAGE / "frost_nb").mkdir(parents=True)
    (tmp_path / gpu.STAGE / "frost_nb" / "x.py").write_bytes(b"x" * MIB)
    subprocess.run(["git", "init", "-q", str(tmp_path / gpu.STAGE)], check=True)
    monkeypatch.setattr(gpu, "REPO", tmp_path)
    assert gpu.main(["plan", "--size", "smoke", "--dataset", "digits", "--gpu-min", "20", "--startup-min", "2",
                     "--command-min", "9", "--upload-mib", "6.5", "--upload-s", "11", "--return-files", "7",
                     "--return-mib", "3", "--idle-s", "13", "--max-uploads", "2", "--warmup-s", "17",
                     "--stop-s", "19", "--images-per-s", "500"]) == 0
    text = capsys.readouterr().out
    assert "host: 20 min of GPU time per allocation (start-up 2 counted), 9 min per command, 6.5 MiB per " \
           "upload, 7 files of 3.0 MiB back, bare after 13 s idle" in text
    assert "in 2 uploads" in text and "training at 500 images/s (measured)" in text
    assert "(start-up 2.0, uploads 0.4, prepare 0.5, compile warm-up 0.3, training " in text
    assert "--limit-s 540 --stop-s 19 --return-bytes 3145728" in text


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
    here = clone(repo_root(), tmp_path / "checkout")
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
        checkpoint = checkpoint_bytes(config, 40_500)
        plan = _cifar_plan(travelling=travelling, size=size, checkpoint=checkpoint)
        assert (len(plan.allocations), plan.pieces) == (allocations, pieces), size
        assert f"train --size {size} " in plan.uploads[-1].command


def test_checkpoint_bytes_is_the_trainers_own_state(tmp_path):
    """``cost.checkpoint_bytes`` writes ``Trainer.state``: a real checkpoint of the same run after one
    epoch is no larger than the estimate for all its epochs, and not much smaller for one."""
    from frost_nb.training import train

    config = make_config("smoke", **{"train.epochs": 1, "data.limit": 300})
    train(config, checkpoint=tmp_path / "full.pt")
    real = (tmp_path / "full.pt").stat().st_size
    assert 0.8 * checkpoint_bytes(config, 240) <= real <= checkpoint_bytes(config, 240) * 1.05


def test_webp_sheets_give_back_the_exact_pixels(tmp_path):
    """``data.prepare.write_sheets``, the training split as it travels: random pixels (the hardest
    case) over two sheets, the last row and sheet part-filled, and a grey set, decoded byte for byte
    with their labels, superclasses and SHA-256 (that of the (N, C, H, W) pixels, as files packed
    before it moved into the library record it); image j at row j // 100, column j % 100 of its sheet."""
    import io

    from PIL import Image

    from frost_nb.data.datasets import DataError
    from frost_nb.data.prepare import Part, read_sheets, write_sheets

    rng = np.random.default_rng(1)
    for channels, n in ((3, 1234), (1, 50)):
        x = rng.integers(0, 256, (n, channels, 32, 32), dtype=np.uint8)
        coarse = (np.arange(n) % 2, ("even", "odd")) if channels == 3 else (None, None)
        part = Part(x, np.arange(n) % 7, tuple("abcdefg"), "here", *coarse)
        got = read_sheets(path := write_sheets(part, tmp_path / f"c{channels}.npz"))
        assert np.array_equal(got.x, x) and np.array_equal(got.y, part.y) and got.classes == part.classes
        assert (got.source, got.coarse_classes, got.coarse_y is None) == ("here", coarse[1], channels == 1)
        with np.load(path) as z:
            arrays = dict(z)
        assert arrays["sha256"].item() == hashlib.sha256(x.tobytes()).hexdigest()
        r, c = divmod(j := 107 if n > 107 else 49, 100)  # image j: in the first sheet at row r, column c
        with Image.open(io.BytesIO(arrays["webp"][:arrays["offsets"][1]].tobytes())) as sheet:
            pixels = np.asarray(sheet.convert("L" if channels == 1 else "RGB"))
        tile = pixels[r * 32:(r + 1) * 32, c * 32:(c + 1) * 32]
        assert np.array_equal(tile.reshape(32, 32, channels).transpose(2, 0, 1), x[j])
    arrays["sha256"] = np.array("0" * 64)  # a file whose pixels are not the recorded ones
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match="do not match their SHA-256"):
        read_sheets(tmp_path / "bad.npz")


def test_speed_settings_stay_out_of_a_runs_identity():
    config = make_config("cifar", "cifar100")
    for key, value in (("train.compile", "off"), ("train.device", "cpu"), ("train.num_workers", 2)):
        assert identity_key(config.replace(**{key: value})) == identity_key(config)


def test_check_out_refuses_what_would_not_come_back(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for i in range(8):
        (tmp_path / "a" / "b" / f"f{i}").write_bytes(b"x")
    assert len(check_out(tmp_path)) == 8
    (tmp_path / "a" / "b" / "c").mkdir()
    (tmp_path / "a" / "b" / "c" / "deep").write_bytes(b"x")
    with open(tmp_path / "big", "wb") as f:
        f.truncate(16 * MIB + 1)
    (tmp_path / "a" / "b" / "bad name").write_bytes(b"x")
    with pytest.raises(gpu.GpuError) as err:
        check_out(tmp_path)
    text = str(err.value)
    assert "deeper than 2 folders" in text and "big: 16.0 MiB, over 16.0 MiB" in text
    assert "11 files, over 8" in text and "bad name: a name with characters" in text


def test_a_training_command_goes_on_from_its_checkpoint_after_every_epoch(tmp_path, monkeypatch):
    """``Trainer.fit(on_epoch=)``, what the host's ``train`` sends the checkpoint back with: called
    after every epoch trained, once that epoch's checkpoint is written (the last: the finished run's),
    and not again for a run already finished."""
    from frost_nb.checkpoint import progress_of
    from frost_nb.training import build_trainer

    config = make_config("smoke", **{"train.epochs": 3, "data.limit": 200})
    seen = []
    record = lambda t: seen.append((t.epoch, progress_of(load_checkpoint(tmp_path / "run.pt"))))
    build_trainer(config, tmp_path / "run.pt").fit(until_epoch=1, on_epoch=record)
    build_trainer(config, tmp_path / "run.pt").fit(on_epoch=record)
    build_trainer(config, tmp_path / "run.pt").fit(on_epoch=record)  # finished: nothing trained
    assert [(e, p.epoch, p.complete) for e, p in seen] == [(1, 1, False), (2, 2, False), (3, 3, True)]


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


def test_bf16_export_stores_the_metrics_of_its_own_weights(tmp_path, monkeypatch, request):
    """``runs.export_run(weights="bfloat16")``, what ``fetch --commit`` calls: a model trained far
    enough that rounding its weights to bf16 changes answers (checked first, so that the test can
    fail), whose export then holds the accuracies of the rounded weights, the float32 accuracy
    beside them, and logits other than the float32 model's."""
    from frost_nb.runs import export_run, train_or_load

    monkeypatch.setenv("FROST_CACHE", str(tmp_path / "cache"))
    request.addfinalizer(lambda before=torch.get_num_threads(): torch.set_num_threads(before))
    torch.set_num_threads(1)  # as runs train: at 2 threads this model's answers happen to survive the rounding
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
