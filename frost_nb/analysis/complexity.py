"""Compute cost of FROST inference (Yu and Hwang, ICML 2026, arXiv 2601.19551), in FLOPs and time:
the cost model C(d) = C_fixed + d * C_step and S_ideal of docs/method.md section 8; FLOPs are
``FlopCounterMode``'s (2 per multiply-add), which leaves memory-bound work out."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..config import BACKBONES, MODELS, make_config
from ..cost import flops_per_image  # the FLOP counts live with the cost of a run
from ..data.datasets import make_batches
from ..halting import adaptive_predict, stream_predict
from ..models import HEAD_PARAMS, create_model
from ..paper import table3_frost_depth
from ..training import load_split
from .halting_rules import FIXED, FROST, RULES, SIGNAL_RULES, OnlineRule, candidate_thresholds
from .trajectories import run_trajectories


def parameters_without_heads(model: torch.nn.Module) -> int:
    """Parameters of the backbone alone (what the paper's Table 3 seems to count)."""
    return sum(p.numel() for k, p in model.named_parameters() if not k.startswith(HEAD_PARAMS))


def ideal_speedup(depths: Tensor | Sequence[int], steps: int, fixed: float, per_step: float) -> float:
    """S_ideal = (C_fixed + T C_step) / (C_fixed + mean(d) C_step); 1 at full depth."""
    d = torch.as_tensor(depths, dtype=torch.float64).reshape(-1)
    if d.numel() == 0:
        raise ValueError("depths is empty: give the exit depth of at least one sample")
    if int(steps) < 1 or not bool(((d >= 1) & (d <= int(steps))).all()):  # NaN too
        raise ValueError(f"exit depths must lie in 1..steps={steps}, got "
                         f"{d.min().item():g}..{d.max().item():g}")
    if not (fixed >= 0 and per_step > 0):
        raise ValueError(f"costs must be fixed >= 0 and per_step > 0, got {fixed}, {per_step}")
    return float((fixed + int(steps) * per_step) / (fixed + d.mean().item() * per_step))


def seconds_per_image(model: torch.nn.Module, input_shape: Sequence[int], *, batch_size: int = 8,
                      repeats: int = 3, warmup: int = 1) -> tuple[float, float]:
    """Measured wall time per image (fixed part, one step) on random input: medians over ``repeats``
    rounds, each timing the prologue and the T steps of one full-depth pass apart."""
    if batch_size < 1 or repeats < 1 or warmup < 0:
        raise ValueError(f"batch_size={batch_size} and repeats={repeats} must be >= 1, warmup={warmup} >= 0")
    device = next(model.parameters(), torch.empty(0)).device  # a model without weights: the CPU
    x = torch.randn((batch_size, *(int(s) for s in input_shape)), device=device)
    steps = int(model.config.steps)
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda device: None
    fixed, stepping = [], []
    with torch.no_grad():
        for r in range(warmup + repeats):
            sync(device)
            start = time.perf_counter()
            pass_ = model.trajectory(x)
            next(pass_)  # h_0: the prologue has run
            sync(device)
            middle = time.perf_counter()
            for _ in pass_:  # h_1 .. h_T with their readouts
                pass
            sync(device)
            if r >= warmup:
                fixed.append(middle - start)
                stepping.append(time.perf_counter() - middle)
    return statistics.median(fixed) / batch_size, statistics.median(stepping) / batch_size / steps


def images_per_second(fixed_s: float, step_s: float, depth: float) -> float:
    """Throughput of samples that run ``depth`` steps on average (fractional depths allowed)."""
    return 1.0 / (fixed_s + depth * step_s)


def relative_to_vanilla(table):
    """A complexity table with ``<column> / vanilla`` for gflops and images_per_s where it has them:
    each row over its backbone's first vanilla row (at full depth)."""
    base = table[table["model"] == "vanilla"].groupby("backbone").first()
    return table.assign(**{f"{c} / vanilla": table[c] / table["backbone"].map(base[c])
                           for c in ("gflops", "images_per_s") if c in table.columns})


def table3_measurements(size: str, frost_depths: dict[str, float], *, batch_size: int, repeats: int,
                        device: str) -> pd.DataFrame:
    """Notebook 06's table: every family on both backbones at ``size`` (seed 0): parameters, FLOPs and
    images/s at full depth, and frost's at Table 3's mean depth and at ``frost_depths`` (share of T)."""
    rows = []
    for backbone in BACKBONES:
        for name in MODELS:
            cfg = make_config(size, "imagenet100" if size == "paper" else None, name, backbone)
            torch.manual_seed(0)
            model = create_model(cfg.model).eval()
            shape = (cfg.model.in_channels, cfg.model.image_size, cfg.model.image_size)
            fixed_flops, step_flops = flops_per_image(model, shape)
            fixed_s, step_s = seconds_per_image(model, shape, batch_size=batch_size, repeats=repeats)
            steps = cfg.model.steps
            depths = {"full depth": float(steps)}
            if name == "frost":
                depths = {"paper's mean depth": table3_frost_depth(backbone)["depth_fraction"] * steps,
                          **{label: fraction * steps for label, fraction in frost_depths.items()}, **depths}
            for label, depth in depths.items():
                rows.append({"backbone": backbone, "model": name, "depth": label, "mean_depth": depth,
                             "params_m": model.num_parameters() / 1e6,
                             "params_m_without_heads": parameters_without_heads(model) / 1e6,
                             "gflops": (fixed_flops + depth * step_flops) / 1e9,
                             "images_per_s": images_per_second(fixed_s, step_s, depth),
                             "fixed_ms": 1e3 * fixed_s, "step_ms": 1e3 * step_s, "device": device})
            del model
    return pd.DataFrame(rows)


def rule_settings(val, rules: Sequence[str], *, calibrator=None, count: int = 6) -> list[tuple[str, float]]:
    """(rule, threshold) pairs to time, chosen on the held-out ``val`` only: ``count`` inner quantiles
    of each rule's signal (FROST's: tau_q), ``FIXED`` as ``count`` depths over 1..T (fewer if fewer)."""
    if FROST in rules and calibrator is None:
        raise ValueError("rule 'frost' needs the run's calibrator: "
                         "rule_settings(..., calibrator=result.calibrator)")
    settings: list[tuple[str, float]] = []
    for name in rules:
        if name == FIXED:
            thresholds = [d - 0.5 for d in sorted({int(round(d)) for d in np.linspace(1, val.steps, count)})]
        elif name == FROST:
            thresholds = [calibrator.threshold(float(q)) for q in np.linspace(0, 1, count + 2)[1:-1]]
        else:  # its inner quantiles: not -inf, min, max, inf
            thresholds = candidate_thresholds(RULES[name].signal(val), count + 2)[2:-2]
        settings += [(name, float(t)) for t in thresholds]
    return settings


def rule_throughput(model: torch.nn.Module, x: Tensor, y: Tensor, settings: Sequence[tuple[str, float]], *,
                    batch_size: int = 256, rounds: int = 5, stream: bool = True) -> pd.DataFrame:
    """Accuracy against images/s (median, min and max over ``rounds``, which interleave the settings)
    of every (rule, threshold) of ``settings``, by ``stream_predict`` (or ``adaptive_predict``)."""
    if rounds < 1 or batch_size < 1:
        raise ValueError(f"rounds and batch_size must be positive, got {rounds} and {batch_size}")
    stream = stream and getattr(model.config, "name", None) != "vanilla"

    def predict(rule: OnlineRule, images: Tensor):
        if stream:
            return stream_predict(model, images, rule=rule, slots=batch_size)
        parts = [adaptive_predict(model, images[b:b + batch_size], rule=rule)
                 for b in range(0, len(images), batch_size)]
        return torch.cat([p.logits for p in parts]), torch.cat([p.depth for p in parts])

    rules = [OnlineRule(name, threshold) for name, threshold in settings]
    for rule in rules:  # one untimed pass: first-call costs stay out of the medians
        predict(rule, x[:batch_size])
    seconds = np.zeros((rounds, len(rules)))
    first: list[tuple[Tensor, Tensor]] = []  # each setting's exit depths and correct predictions, round 0
    for r in range(rounds):
        for i, rule in enumerate(rules):
            start = time.perf_counter()
            logits, exits = predict(rule, x)[:2]
            if x.is_cuda:
                torch.cuda.synchronize()
            seconds[r, i] = time.perf_counter() - start
            if r == 0:
                first.append((exits, logits.argmax(-1) == y))
    rate = len(x) / seconds  # (rounds, settings) images/s
    return pd.DataFrame([{
        "rule": rule.rule.name, "threshold": rule.threshold, "mean_depth": float(depth.float().mean()),
        "accuracy": float(correct.float().mean()), "images_per_s": float(np.median(rate[:, i])),
        "images_per_s_min": float(rate[:, i].min()), "images_per_s_max": float(rate[:, i].max()),
        "batch_size": batch_size, "threads": torch.get_num_threads(), "mode": "stream" if stream else "batch"}
        for i, (rule, (depth, correct)) in enumerate(zip(rules, first))])


def throughput_at_accuracy(throughput: pd.DataFrame, reference: str = FIXED) -> pd.DataFrame:
    """Per setting of the ``reference`` rule, each rule's fastest measured setting at least as accurate
    (no interpolation; NaN if none) and its speed-up over the reference's."""
    ref = throughput[throughput["rule"] == reference].sort_values("mean_depth")
    if ref.empty:
        raise ValueError(f"no {reference!r} rows to match accuracies against")
    rows = []
    for _, target in ref.iterrows():
        for rule, own in throughput.groupby("rule", sort=False):
            best = own.loc[own["accuracy"] >= target["accuracy"], "images_per_s"].max()  # NaN if none
            rows.append({"reference_depth": target["mean_depth"], "accuracy": target["accuracy"], "rule": rule,
                         "images_per_s": best, "speedup": best / target["images_per_s"]})
    return pd.DataFrame(rows)


def rule_throughput_table(result, *, samples: int | None = 1024, rounds: int = 5,
                          rules: Sequence[str] | None = None) -> pd.DataFrame:
    """``rule_throughput`` (CPU, one thread, the first ``samples`` test images) of the rules
    (of ``rules``) that apply to one trained run, thresholds from the held-out split."""
    cfg = result.config
    applies = [FIXED, *SIGNAL_RULES] + ["frost"] * cfg.loss.score_halting + ["ponder"] * cfg.loss.ponder
    rules = applies if rules is None else [rule for rule in applies if rule in rules]
    model = result.model.eval()
    val = run_trajectories(result, "val")
    settings = rule_settings(val, rules, calibrator=result.calibrator)
    test = make_batches(load_split(cfg, "test"), cfg.train.eval_batch_size, shuffle=False, augment=False,
                        device="cpu")
    x, y = (torch.cat(t) for t in zip(*test))
    before, device = torch.get_num_threads(), next(model.parameters()).device
    torch.set_num_threads(1)
    try:  # a model on a GPU comes to the CPU for it and goes back after
        return rule_throughput(model.cpu(), x[:samples], y[:samples], settings, rounds=rounds)
    finally:
        torch.set_num_threads(before)
        model.to(device)
