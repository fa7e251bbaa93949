"""Tests of frost_nb.analysis.complexity: the FLOPs of the step-wise API and the ideal speed-up."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from frost_nb.analysis.complexity import flops_per_image, ideal_speedup
from frost_nb.config import make_config
from frost_nb.models import create_model


def _model(name="frost", backbone="resnet", **overrides):
    torch.manual_seed(0)
    cfg = make_config("smoke", "digits", name, backbone, **overrides).model
    return create_model(cfg).eval(), cfg


FAMILIES = [(m, b, {}) for m in ("vanilla", "recurrent", "basic_ssm", "frost")
            for b in ("resnet", "vit")]
FAMILIES += [("frost", "resnet", {"model.update": "gated", "model.bcd_kernel": 3}),
             ("frost", "resnet", {"model.bcd_hidden": 8})]  # C, D not pooled first


@pytest.mark.parametrize("name,backbone,overrides", FAMILIES)
def test_fixed_plus_steps_equals_the_forward(name, backbone, overrides):
    model, cfg = _model(name, backbone, **overrides)
    shape = (cfg.in_channels, cfg.image_size, cfg.image_size)
    fixed, per_step = flops_per_image(model, shape)
    assert fixed > 0 and per_step > 0

    def count_flops(n):  # of the whole forward pass over n images
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(torch.zeros(n, *shape))
        return counter.get_total_flops()

    full = count_flops(1)
    assert fixed + cfg.steps * per_step == full  # C(T) = C_fixed + T C_step, exactly
    assert count_flops(4) == 4 * full  # and linear in the batch


def test_resnet_step_flops_known_answer():
    """The bottleneck branch, the gate and the heads of the frost ResNet, counted by hand."""
    model, cfg = _model("frost", "resnet", **{"model.update": "gated"})
    s = cfg.image_size // cfg.stem_stride  # spatial side of the state (stride <= 3: one conv)
    w, b, k = cfg.width, cfg.bottleneck, cfg.num_classes
    hw = s * s
    branch = 2 * hw * (w * b + 9 * b * b + b * w)  # 1x1, 3x3, 1x1 convolutions
    gate = 2 * hw * w * w  # 1x1 convolution W_g h_t
    heads = 2 * (w * w + w * k + w)  # C on the pooled state (pool first), classifier, halting
    _, per_step = flops_per_image(model, (cfg.in_channels, cfg.image_size, cfg.image_size))
    assert per_step == branch + gate + heads
    canonical, _ = _model("frost", "resnet", **{"model.update": "canonical"})
    _, per_step = flops_per_image(canonical, (cfg.in_channels, cfg.image_size, cfg.image_size))
    assert per_step == branch + heads  # no gate


def test_flops_per_image_leaves_mode_and_checks_shape():
    model, cfg = _model()
    model.train()
    flops_per_image(model, (cfg.in_channels, cfg.image_size, cfg.image_size))
    assert model.training
    with pytest.raises(ValueError, match=r"\(C, H, W\)"):
        flops_per_image(model, (1, cfg.in_channels, cfg.image_size, cfg.image_size))


def test_ideal_speedup_values():
    t, fixed, step = 16, 3.0, 1.0
    assert ideal_speedup(torch.full((10,), t), t, fixed, step) == 1.0  # full depth
    assert ideal_speedup([1] * 5, t, 0.0, step) == t  # no fixed part: T / mean depth
    assert math.isclose(ideal_speedup([4, 12], t, fixed, step), (3 + 16) / (3 + 8))
    s = [ideal_speedup([d], t, fixed, step) for d in range(1, t + 1)]
    assert all(a > b for a, b in zip(s, s[1:]))  # lower depth, bigger speed-up
    assert s[0] < (fixed + t * step) / fixed  # bounded by the fixed part


@pytest.mark.parametrize("depths,steps,fixed,per_step", [
    ([0, 3], 4, 1.0, 1.0), ([5], 4, 1.0, 1.0), ([], 4, 1.0, 1.0),
    ([2], 4, -1.0, 1.0), ([2], 4, 1.0, 0.0),
    ([2, math.nan], 4, 1.0, 1.0), ([2], 4, math.nan, 1.0), ([2], 4, 1.0, math.nan)])  # defect: NaN passed
def test_ideal_speedup_rejects_bad_input(depths, steps, fixed, per_step):
    with pytest.raises(ValueError):
        ideal_speedup(depths, steps, fixed, per_step)


def test_parameters_without_heads_leave_out_exactly_the_two_heads():
    from frost_nb.analysis.complexity import parameters_without_heads

    model = create_model(make_config("smoke").model)
    heads = sum(p.numel() for m in (model.head, model.head_norm, model.halt_head, model.halt_head_norm)
                for p in m.parameters())  # halt_head_norm: model.halt_norm, on by default
    assert parameters_without_heads(model) == model.num_parameters() - heads > 0


def test_measured_time_per_image_and_throughput():
    from frost_nb.analysis.complexity import images_per_second, seconds_per_image

    model = create_model(make_config("smoke").model).eval()
    fixed, step = seconds_per_image(model, (1, 8, 8), batch_size=4, repeats=2)
    assert fixed > 0 and step > 0
    assert images_per_second(fixed, step, 1) > images_per_second(fixed, step, 2.5) > \
        images_per_second(fixed, step, model.config.steps)
    with pytest.raises(ValueError, match="repeats"):
        seconds_per_image(model, (1, 8, 8), repeats=0)


def test_table3_regime_benchmark_writes_every_ratio(tmp_path, monkeypatch):
    """benchmarks/table3_regime.py at smoke size: every family's images/s over vanilla's per
    batch size and backbone, beside the paper's ratio (timings are not checked: noise)."""
    import importlib.util
    import json
    from pathlib import Path

    from frost_nb.paper import TABLE3

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "table3_regime.py"
    spec = importlib.util.spec_from_file_location("table3_regime", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setenv("FROST_OUTPUTS", str(tmp_path))
    assert bench.main(["--size", "smoke", "--repeats", "1", "--batch-sizes", "1", "2", "--metrics"]) == 0
    d = json.loads((tmp_path / "metrics" / "bench_table3_regime.json").read_text())
    assert d["batch_sizes"] == [1, 2] and len(d["ratios"]) == 2 * 2 * 3  # batches x backbones x non-vanilla
    paper = {(r["backbone"], r["model"]): r["images_per_s"] for r in TABLE3}
    for r in d["ratios"]:
        assert r["paper"] == pytest.approx(paper[r["backbone"], r["model"]] / paper[r["backbone"], "vanilla"])
        assert r["ours"] > 0 and r["relative_error"] == pytest.approx(r["ours"] / r["paper"] - 1)
    frost = [r for r in d["rows"] if r["model"] == "frost" and r["depth"] == "paper's mean depth"]
    assert {round(r["mean_depth"] / 4, 4) for r in frost} == {round(7.56 / 16, 4), round(4.53 / 12, 4)}
    with pytest.raises(SystemExit):
        bench.main(["--size", "smoke", "--batch-sizes", "0"])


def test_adaptive_inference_benchmark_records_the_stream_beside_batch_at_a_time(tmp_path, monkeypatch):
    """benchmarks/adaptive_inference.py --stream at smoke size (a digits checkpoint): rows of
    mode eager and stream for every quantile and refill_at, throughput, latency percentiles
    and the ideal (timings are not checked: noise)."""
    import importlib.util
    import json
    from pathlib import Path

    from frost_nb.checkpoint import save_checkpoint
    from frost_nb.config import make_config
    from frost_nb.halting import HaltingCalibrator

    cfg = make_config("smoke")
    torch.manual_seed(0)
    model = create_model(cfg.model).eval()
    calibrator = HaltingCalibrator().update(torch.rand(256))  # thresholds spread over (0, 1)
    ckpt = save_checkpoint(tmp_path / "smoke.pt", {"config": cfg.to_dict(), "model": model.state_dict(),
                                                   "calibrator": calibrator.to_bytes()})
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "adaptive_inference.py"
    spec = importlib.util.spec_from_file_location("adaptive_inference", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setenv("FROST_OUTPUTS", str(tmp_path))
    argv = ["--checkpoint", str(ckpt), "--images", "40", "--repeats", "2", "--warmup", "0", "--batch-sizes", "8",
            "16", "--quantiles", "0.25", "0.75", "--stream", "--refill-at", "1", "4", "--threads", "1", "2",
            "--csv", str(tmp_path / "a.csv"), "--metrics", "stream_test"]
    assert bench.main(argv) == 0
    d = json.loads((tmp_path / "metrics" / "bench_stream_test.json").read_text())
    assert d["threads"] == [1, 2] and d["images"] == 40
    rows = pd.DataFrame(d["rows"])
    stream, batch = rows[rows["mode"] == "stream"], rows[rows["mode"] == "eager"]
    assert len(batch) == 2 * 2 * 2 and len(stream) == 2 * 2 * 2 * 2  # threads x B x q (x refill_at)
    assert set(stream["refill_at"]) == {1, 4} and set(stream["batch_size"]) == {8, 16}
    key = ["threads", "batch_size", "quantile"]
    both = stream.merge(batch, on=key, suffixes=("", "_batch"))
    assert (both["mean_depth"] == both["mean_depth_batch"]).all() and (both["exits_match"] == 1.0).all()
    assert (both["ideal"] == both["ideal_batch"]).all()  # the same exits, the same FLOP ideal
    for part in (stream, batch):
        assert (part["latency_p95_ms"] >= part["latency_p50_ms"]).all() and (part["latency_p50_ms"] > 0).all()
        assert np.allclose(part["ideal_images_per_s"], part["ideal"] * part["full_images_per_s"])
        assert np.allclose(part["ratio"], part["measured"] / part["ideal"])
        assert np.allclose(part["images_per_s"], 1e6 / part["adaptive_us"])
    assert len(pd.read_csv(tmp_path / "a.csv")) == len(rows)
    with pytest.raises(SystemExit):
        bench.main(["--checkpoint", str(ckpt), "--stream", "--batch-sizes", "8", "--refill-at", "9"])


def test_throughput_at_accuracy_takes_each_rules_fastest_setting_at_least_as_accurate():
    import pandas as pd

    from frost_nb.analysis.complexity import throughput_at_accuracy
    from frost_nb.analysis.halting_rules import FIXED

    rows = pd.DataFrame([  # fixed depth: deeper, more accurate, slower; "frost" beats it at 0.5 only
        {"rule": FIXED, "mean_depth": 2.0, "accuracy": 0.5, "images_per_s": 100.0},
        {"rule": FIXED, "mean_depth": 4.0, "accuracy": 0.7, "images_per_s": 50.0},
        {"rule": "frost", "mean_depth": 1.5, "accuracy": 0.55, "images_per_s": 150.0},
        {"rule": "frost", "mean_depth": 1.0, "accuracy": 0.45, "images_per_s": 300.0},
        {"rule": "frost", "mean_depth": 3.0, "accuracy": 0.6, "images_per_s": 120.0}])
    got = throughput_at_accuracy(rows).set_index(["reference_depth", "rule"])
    assert got.loc[(2.0, "frost"), "images_per_s"] == 150.0  # 300/s is below 0.5; 150 beats 120
    assert got.loc[(2.0, "frost"), "speedup"] == pytest.approx(1.5)
    assert got.loc[(2.0, FIXED), "speedup"] == 1.0
    assert pd.isna(got.loc[(4.0, "frost"), "images_per_s"])  # no frost setting reaches 0.7
    with pytest.raises(ValueError, match="no 'fixed depth' rows"):
        throughput_at_accuracy(rows[rows["rule"] == "frost"])
