"""The fast trainer: keeping each step's numbers on the device and reading them once per epoch,
compiling the training forward, stopping at a deadline and resuming once per Trainer change
nothing that training records (against a per-step reference loop, the trainer as it was)."""

import math
import shutil
import time
from collections import defaultdict

import pandas as pd
import pytest
import torch
from datasketches import kll_floats_sketch

from frost_nb import training
from frost_nb.distributed import sum_over_ranks
from frost_nb.halting import HaltingCalibrator
from frost_nb.runs import identity_key
from frost_nb.training import (
    LOGGED_PARTS,
    evaluate,
    forward_loss,
    load_split,
    optimizer_step,
    running_medians,
    train,
    use_channels_last,
    use_compile,
)


def per_step_reference(trainer):
    """``trainer``'s run as the loop before the device-side history took it: each step's sums read
    at once (``sum_over_ranks``), alpha and H by ``.item()``, the KLL sketch fed and its median read
    after every step. Returns the step history and the last epoch's sketch."""
    cfg, model, rows = trainer.config, trainer.model, defaultdict(list)
    step = 0
    for epoch in range(cfg.train.epochs):
        model.train()
        sketch = HaltingCalibrator(cfg.halting.sketch_k)
        for x, y in trainer.batches:
            out, loss, parts = forward_loss(model, x, y, cfg, amp=False, channels_last=False)
            scores = torch.sigmoid(out.halt_logits.detach().float())  # (B, T)
            loss_sum, correct, seen, _, *part_sums = sum_over_ranks(
                [loss.detach() * len(y), (out.logits[:, -1].argmax(-1) == y).sum(), len(y),
                 (~torch.isfinite(scores)).sum(), *(parts[k] for k in LOGGED_PARTS)], trainer.device)
            optimizer_step(model, trainer.optimizer, loss, cfg.train.grad_clip)
            lr = trainer.scheduler.get_last_lr()[0]  # the step's own
            trainer.scheduler.step()
            step += 1
            sketch.update(scores)
            row = {"step": step, "epoch": epoch, "lr": lr,
                   "loss": loss_sum / seen, **dict(zip(LOGGED_PARTS, part_sums)), "accuracy": correct / seen,
                   "alpha": model.alpha().item(), "hurst": model.hurst().item(),
                   "threshold_median": sketch.threshold(0.5)}
            for key, v in row.items():
                rows[key].append(int(v) if key in ("step", "epoch") else float(v))
    return dict(rows), sketch


def test_history_and_weights_match_the_per_step_loop(tiny_config, make_trainer):
    cfg = tiny_config  # 10 epochs: far enough from chance for the accuracy to say something
    fast = make_trainer(cfg).fit()
    reference = make_trainer(cfg)  # the same seed: the same model, batches and optimiser
    steps, sketch = per_step_reference(reference)
    assert len(steps["step"]) == 10 * 20 and sorted(steps) == sorted(fast.history["steps"])
    # everything but the median is the same to the bit; the medians differ by KLL's coin flips only
    ours = dict(fast.history["steps"])
    assert ours.pop("threshold_median") == pytest.approx(steps.pop("threshold_median"), abs=0.02)
    assert ours == steps
    for (name, a), b in zip(fast.model.state_dict().items(), reference.model.state_dict().values()):
        assert torch.equal(a, b), name
    test = evaluate(reference.model, load_split(cfg, "test"))
    assert fast.metrics["test_accuracy"] == test.accuracy > 0.5
    # the run's sketch ("run" window) of every epoch's training scores and held-out pass ("last_epoch+val")
    assert (cfg.halting.sketch_window, cfg.halting.calibrate_on) == ("run", "last_epoch+val")
    assert fast.calibrator.n == 10 * (sketch.n + len(reference.val_set) * cfg.model.steps)


def test_sketch_fed_once_per_epoch_matches_per_step_feeding():
    g = torch.Generator().manual_seed(0)
    # 40 steps of (B, T) = (64, 8) scores whose distribution drifts, as training moves them
    steps = [torch.rand(64, 8, generator=g) ** (0.5 + i / 20) for i in range(40)]
    per_step, medians_per_step = HaltingCalibrator(200), []
    for scores in steps:
        medians_per_step.append(per_step.update(scores).threshold(0.5))
    buffered = HaltingCalibrator(200)
    medians = running_medians(buffered, steps)
    once = HaltingCalibrator(200).update(torch.stack(steps))  # the whole epoch in one update
    eps = kll_floats_sketch.get_normalized_rank_error(per_step.k, False)  # about 0.013 at k = 200
    assert per_step.n == buffered.n == once.n == 40 * 64 * 8 and len(medians) == 40
    # each running median is the median of the scores so far within KLL's rank error, fed either way
    for i, (a, b) in enumerate(zip(medians, medians_per_step)):
        seen = torch.cat(steps[: i + 1]).flatten()
        for m in (a, b):
            assert abs((seen <= m).double().mean().item() - 0.5) <= 2 * eps, (i, m)
    everything = torch.stack(steps).flatten()
    for q in (0.1, 0.25, 0.5, 0.75, 0.9):
        for sketch in (per_step, buffered, once):
            assert abs((everything <= sketch.threshold(q)).double().mean().item() - q) <= 2 * eps, q


def test_fit_stops_before_a_deadline_and_reads_its_checkpoint_once(tiny_config, make_trainer, tmp_path,
                                                                   monkeypatch):
    cfg = tiny_config.replace(**{"train.epochs": 3})
    path = tmp_path / "split.pt"
    trainer = make_trainer(cfg, checkpoint=path)
    assert trainer.fit(deadline=time.monotonic() - 1).metrics == {}  # passed already: no epoch starts
    assert trainer.epoch == 0 and not path.exists()
    trainer.fit(until_epoch=1)
    assert trainer.epoch == 1 and trainer.epoch_seconds > 0
    loads = []
    real = training.load_checkpoint
    monkeypatch.setattr(training, "load_checkpoint", lambda *a, **k: loads.append(a) or real(*a, **k))
    # the latest epoch took epoch_seconds: one more would end after a deadline half that far away
    assert trainer.fit(deadline=time.monotonic() + trainer.epoch_seconds / 2).metrics == {}
    assert trainer.epoch == 1
    trainer.fit(until_epoch=2)
    result = trainer.fit(deadline=time.monotonic() + 3600)
    assert trainer.epoch == 3 and result.metrics["epochs"] == 3 and loads == []  # never read again
    whole = train(cfg)
    for (name, a), b in zip(whole.model.state_dict().items(), result.model.state_dict().values()):
        assert torch.equal(a, b), name
    a, b = dict(whole.history["steps"]), dict(result.history["steps"])
    assert a.pop("threshold_median") == pytest.approx(b.pop("threshold_median"), abs=0.02)
    assert a == b
    # a new Trainer on that checkpoint reads it, once
    make_trainer(cfg, checkpoint=path).fit()
    assert len(loads) == 1


def test_speed_settings_stay_out_of_a_runs_identity(tiny_config):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    for value in ("on", "off"):
        other = tiny_config.replace(**{"train.compile": value})
        assert other.identity() == tiny_config.identity() and identity_key(other) == identity_key(tiny_config)
    assert "compile" not in tiny_config.identity()["train"]
    # auto: compiled on CUDA in one process only; channels_last only when asked for
    assert not use_compile(tiny_config, cpu) and use_compile(tiny_config, cuda)
    assert not use_compile(tiny_config, cuda, world_size=2)
    assert use_compile(tiny_config.replace(**{"train.compile": "on"}), cpu)
    assert not use_compile(tiny_config.replace(**{"train.compile": "off"}), cuda)
    assert not use_channels_last(tiny_config, cuda)
    assert use_channels_last(tiny_config.replace(**{"train.channels_last": "on"}), cpu)
    assert not use_channels_last(tiny_config.replace(**{"train.channels_last": "on",
                                                        "model.backbone": "vit"}), cuda)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="torch.compile's CPU backend (inductor) needs a C compiler")
def test_compiled_training_agrees_with_eager(tiny_config, make_trainer):
    """torch.compile (inductor, here on the CPU) fuses kernels, so sums round in another order: over
    2 smoke epochs the per-step losses agree within 1e-3 (relative; seen: 2e-5) and the weights within
    1e-2 (seen: 3e-4 against weights up to 1), not to the bit. The first run compiles for a minute or
    more on two cores; torch's compile cache makes later runs fast."""
    cfg = tiny_config.replace(**{"train.epochs": 2})
    eager = make_trainer(cfg.replace(**{"train.compile": "off"}))
    compiled = make_trainer(cfg.replace(**{"train.compile": "on"}))
    assert not eager.compiled and compiled.compiled and compiled.forward is not training.train_forward
    a, b = eager.fit(), compiled.fit()
    sa, sb = a.history["steps"], b.history["steps"]
    for key in ("step", "epoch", "lr"):
        assert sa[key] == sb[key]
    for key in ("loss", "task", "alpha"):
        assert sb[key] == pytest.approx(sa[key], rel=1e-3), key
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.allclose(p, q, rtol=0, atol=1e-2), name
    assert b.history["epochs"]["train_loss"] == pytest.approx(a.history["epochs"]["train_loss"], rel=1e-3)
    assert abs(b.metrics["test_accuracy"] - a.metrics["test_accuracy"]) <= 0.01


def test_throughput_benchmark_measures_eager_compiled_and_both_layouts(tmp_path, monkeypatch, capsys):
    """benchmarks/train_throughput.py at smoke size on the CPU: a row per variant, each trained by
    the trainer itself (timings are not checked: noise; only how the columns relate)."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "train_throughput.py"
    spec = importlib.util.spec_from_file_location("train_throughput", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setenv("FROST_OUTPUTS", str(tmp_path))
    common = ["--size", "smoke", "--device", "cpu", "--steps", "2"]
    assert bench.main([*common, "--compile", "off", "on", "--channels-last", "off", "--amp", "bf16",
                       "--threads", "1", "--metrics"]) == 0
    assert "| size | model | backbone | amp_bf16 | compile | channels_last | images_per_s |" in capsys.readouterr().out
    d = json.loads((tmp_path / "metrics" / "bench_train_throughput.json").read_text())
    assert d["benchmark"] == "train_throughput" and d["compile"] == ["off", "on"] and d["threads"] == 1
    assert [(r["amp_bf16"], r["compile"], r["channels_last"]) for r in d["rows"]] == [(True, False, False),
                                                                                      (True, True, False)]
    assert all(r["threads"] == 1 and r["mflop_per_image"] > 0 for r in d["rows"])
    table = tmp_path / "layout.csv"
    assert bench.main([*common, "--compile", "off", "--channels-last", "on", "--amp", "off",
                       "--csv", str(table)]) == 0
    rows = [*d["rows"], *pd.read_csv(table).to_dict(orient="records")]
    assert [(r["amp_bf16"], r["compile"], r["channels_last"]) for r in rows[2:]] == [(False, False, True)]
    for r in rows:
        assert (r["model"], r["batch_size"], r["timed_steps"], r["device"]) == ("frost", 64, 2, "cpu")
        assert r["images_per_s"] > 0 and r["ms_per_step"] * r["images_per_s"] == pytest.approx(1000 * 64)
        assert 0 < r["kll_share"] < 1 and r["warmup_s"] > 0
        assert r["peak_mem_gib"] is None or math.isnan(r["peak_mem_gib"])  # CUDA only (JSON: null)
    with pytest.raises(SystemExit):
        bench.main([*common, "--steps", "0"])


def test_allocator_benchmark_runs_both_settings_side_by_side_on_a_student(tmp_path, monkeypatch, capsys):
    """benchmarks/cpu_allocator.py, one round: train_throughput.py twice at once, glibc's default
    allocator and ALLOCATOR_ENV, here on a block-recurrent student of the committed demo teacher
    (train_throughput's --set and its teacher); timings are not checked, only what each row is."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cpu_allocator.py"
    spec = importlib.util.spec_from_file_location("cpu_allocator", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setenv("FROST_OUTPUTS", str(tmp_path))
    student = ["--size", "demo", "--dataset", "cifar100", "--models", "vanilla", "--compile", "off",
               "--channels-last", "off", "--steps", "1", "--set", "model.update=canonical",
               "--set", "model.halt_norm=false", "--set", "model.branch_steps=6,10",
               "--set", "loss.teacher=cifar100-demo-families/vanilla-seed0"]
    assert bench.main(["--rounds", "1", "--metrics", "alloc", "--", *student]) == 0
    assert "keep freed memory over default" in capsys.readouterr().out
    d = json.loads((tmp_path / "metrics" / "bench_alloc.json").read_text())
    assert d["allocator_env"] == bench.ALLOCATOR_ENV and d["arguments"] == student
    assert sorted(r["setting"] for r in d["rows"]) == ["default", "keep freed memory"]
    for r in d["rows"]:
        assert r["model"] == "vanilla" and r["images_per_s"] > 0 and 0 <= r["system_share"] < 1
    assert d["ratios"][0]["ratio"] > 0
    with pytest.raises(SystemExit, match="train_throughput.py"):  # a failing child says which and why
        bench.main(["--", "--size", "demo", "--models", "vanilla", "--set", "loss.teacher=no-such/run"])
