"""Halting rules of related work: exits known by construction, the oracle's bound, the MSDNet
threshold protocol, AUC and depth-to-reach, the collapse verdict, and a smoke run end to end."""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import torch

from frost_nb.analysis.curves import CURVE_COLUMNS, curve, model_curves, oracle_curve
from frost_nb.analysis.halting_rules import (
    FROST_QUANTILES,
    RULES,
    SIGNAL_RULES,
    candidate_thresholds,
    collapsed,
    confidence_signal,
    curve_auc,
    depth_to_reach,
    kl_signal,
    oracle_accuracy_at,
    oracle_exits,
    ponder_signal,
    rule_exits,
    second_order_signal,
    step_size_signal,
    summary,
    two_scale_signal,
)
from frost_nb.halting import HaltingCalibrator, exit_steps
from frost_nb.training import FullDepthPass

T = 4


def _traj(n=2, t=T, k=3, *, step_norms=None, state_norms=None, second=None, logits=None,
          halt=None, y=None, seed=0):
    """A full-depth pass with its trajectory, the given fields; the others random (seeded) or neutral."""
    g = torch.Generator().manual_seed(seed)
    fields = dict(  # drawn in this order
        pooled=torch.zeros(n, t + 1, 2),
        step_norms=(torch.rand(n, t, generator=g) if step_norms is None
                    else torch.as_tensor(step_norms).float()),
        state_norms=(torch.ones(n, t + 1) if state_norms is None
                     else torch.as_tensor(state_norms).float()),
        dist_to_final=torch.zeros(n, t + 1),
        second_diff_norms=(torch.rand(n, t - 1, generator=g) if second is None
                           else torch.as_tensor(second).float()),
        logits=torch.randn(n, t, k, generator=g) if logits is None else torch.as_tensor(logits).float(),
        halt_logits=torch.randn(n, t, generator=g) if halt is None else torch.as_tensor(halt).float(),
        y=torch.zeros(n, dtype=torch.int64) if y is None else torch.as_tensor(y))
    return FullDepthPass(scores=torch.sigmoid(fields["halt_logits"]), **fields)


def _exits(name, traj, thr):
    rule = RULES[name]
    return rule_exits(rule, rule.signal(traj), thr).tolist()


# --- each rule on hand-made outputs ---------------------------------------------------------

def test_step_size_exits_at_the_first_small_relative_step():
    traj = _traj(step_norms=[[1.0, 0.5, 0.05, 0.01], [1.0, 1.0, 1.0, 1.0], [4.0, 0.3, 0.3, 0.3]],
                 state_norms=[[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 2, 2, 2, 10]], n=3)
    # relative steps: [1, .5, .05, .01], [1, 1, 1, 1], [2, .15, .15, .03]
    expected = torch.tensor([2.0, 0.15, 0.15, 0.03], dtype=torch.float64)
    assert torch.allclose(step_size_signal(traj)[2], expected)
    assert _exits("step size", traj, 0.1) == [3, T, 4]
    assert _exits("step size", traj, 0.2) == [3, T, 2]
    assert _exits("step size", traj, 0.5) == [3, T, 2]  # strict: 0.5 is not < 0.5
    assert _exits("step size", traj, math.inf) == [1, 1, 1]  # the extreme: exit at once
    assert _exits("step size", traj, -math.inf) == [T, T, T]  # never fires: full depth


def test_relative_step_of_a_zero_state_never_fires():
    traj = _traj(step_norms=[[0.0, 1.0, 0.0, 0.0]], state_norms=[[1, 0, 0, 1, 1]], n=1)
    s = step_size_signal(traj)[0]
    assert math.isnan(s[0]) and s[1] == math.inf  # 0 / 0 and 1 / 0
    assert _exits("step size", traj, 0.5) == [3]
    assert _exits("step size", traj, math.inf) == [3]  # the first step where it is defined


def test_second_order_is_undefined_at_step_one():
    traj = _traj(second=[[0.05, 1.0, 1.0], [1.0, 1.0, 0.01]], state_norms=[[1, 1, 1, 1, 1], [1, 1, 1, 1, 2]])
    s = second_order_signal(traj)
    assert torch.isnan(s[:, 0]).all()
    assert torch.allclose(s[1, 1:], torch.tensor([1.0, 1.0, 0.005], dtype=torch.float64))
    assert _exits("second-order step", traj, 0.1) == [2, 4]
    assert _exits("second-order step", traj, math.inf) == [2, 2]  # never at step 1
    assert _exits("second-order step", traj, 0.001) == [T, T]


def test_two_scale_rule_as_stated_needs_two_consecutive_unnormalised_hits():
    """The Two-Scale rule as stated: ||Delta_t - Delta_{t-1}|| (no division by ||h_t||) below eps
    at two steps in a row; beside it this project's normalised first-hit variant."""
    from frost_nb.analysis.halting_rules import TWO_SCALE

    second = [[0.05, 0.05, 1.0],  # hits at t = 2 and 3: exits at 3
              [0.05, 1.0, 0.05],  # two single hits, never two in a row: T
              [0.5, 0.5, 0.5]]  # unnormalised 0.5 never hits; divided by ||h_t|| = 10 it is 0.05
    traj = _traj(n=3, second=second, state_norms=[[1] * 5, [1] * 5, [10] * 5])
    s = two_scale_signal(traj)
    assert torch.isnan(s[:, 0]).all()
    assert torch.equal(s[:, 1:], torch.tensor(second, dtype=torch.float32).double())
    assert RULES[TWO_SCALE].hits == 2 and RULES["second-order step"].hits == 1
    assert _exits(TWO_SCALE, traj, 0.1) == [3, T, T]
    assert _exits("second-order step", traj, 0.1) == [2, 2, 2]  # first hit, normalised
    assert _exits(TWO_SCALE, traj, math.inf) == [3, 3, 3]  # the earliest: the second defined step
    assert _exits(TWO_SCALE, traj, -math.inf) == [T, T, T]
    assert "2509.23314" in RULES[TWO_SCALE].source and "this project" in RULES["second-order step"].source
    assert TWO_SCALE in SIGNAL_RULES and "second-order step" in SIGNAL_RULES


def test_consecutive_hits_against_a_loop():
    from frost_nb.analysis.halting_rules import consecutive

    g = torch.Generator().manual_seed(11)
    cond = torch.rand(50, 7, generator=g) < 0.6
    for hits in (1, 2, 3):
        run, expected = torch.zeros(50, dtype=torch.int64), torch.zeros_like(cond)
        for t in range(7):
            run = torch.where(cond[:, t], run + 1, 0)
            expected[:, t] = run >= hits
        assert torch.equal(consecutive(cond, hits), expected), hits


def test_online_rules_take_a_step_index_per_row():
    """Rows at different depths in one call (the stream) give each row what a call at its own
    step gives; the two-hit rule's count of hits restarts on a miss and on a NaN."""
    from frost_nb.analysis.halting_rules import TWO_SCALE, OnlineRule

    g = torch.Generator().manual_seed(12)
    h0, h1, h2 = (torch.randn(4, 3, 2, 2, generator=g) for _ in range(3))
    logits, halt = torch.randn(4, 5, generator=g), torch.randn(4, generator=g)
    for name in ("second-order step", "KL between steps", "fixed depth"):
        rule = OnlineRule(name, 2.5 if name == "fixed depth" else 10.0)
        mem = rule.start(h0)
        _, mem = rule.fires(1, h1, logits, halt, mem)
        t = torch.tensor([1, 2, 3, 2])  # per row
        mixed, _ = rule.fires(t, h2, logits, halt, mem)
        for i in range(4):
            alone, _ = rule.fires(int(t[i]), h2, logits, halt, mem)
            assert bool(mixed[i]) == bool(alone[i]), (name, i)
    rule = OnlineRule(TWO_SCALE, 0.5)
    assert "2509.23314" in repr(rule)
    h = torch.zeros(2, 3)
    mem = rule.start(h)
    fired = []
    # steps of 0, 0, 0, 1, 1, 1.3 along one axis: accelerations NaN, 0, 0, 1, 0, 0.3
    for t, step in enumerate([0.0, 0.0, 0.0, 1.0, 1.0, 1.3], start=1):
        h = h + torch.tensor([[step, 0, 0], [step, 0, 0]])
        out, mem = rule.fires(t, h, logits[:2], halt[:2], mem)
        fired.append(bool(out[0]))
    assert fired == [False, False, True, False, False, True]  # hits at 2, 3; miss at 4; hits at 5, 6


def test_kl_between_steps():
    a, b = torch.tensor([2.0, 0.0, -1.0]), torch.tensor([0.0, 1.0, 0.0])
    logits = torch.stack([torch.stack([a, b, b, a]),  # KL 0 at t = 3
                          torch.stack([a, a, b, b])])  # KL 0 at t = 2 and t = 4
    traj = _traj(logits=logits)
    s = kl_signal(traj)
    assert torch.isnan(s[:, 0]).all()
    pa, pb = torch.softmax(a.double(), 0), torch.softmax(b.double(), 0)
    expected = (pb * (pb.log() - pa.log())).sum()  # KL(softmax y_2 || softmax y_1), sample 0
    assert torch.allclose(s[0, 1], expected) and s[0, 2] == 0
    assert _exits("KL between steps", traj, 1e-9) == [3, 2]
    assert _exits("KL between steps", traj, math.inf) == [2, 2]


def test_confidence():
    # max softmax of [log 3, 0] is 0.75, of [0, 0] 0.5, of [log 9, 0] 0.9
    lo, mid, hi = [0.0, 0.0], [math.log(3), 0.0], [math.log(9), 0.0]
    traj = _traj(logits=[[lo, mid, hi, hi], [lo, lo, lo, lo]], k=2)
    expected = torch.tensor([0.5, 0.75, 0.9, 0.9], dtype=torch.float64)
    assert torch.allclose(confidence_signal(traj)[0], expected)
    assert _exits("confidence", traj, 0.7) == [2, T]
    assert _exits("confidence", traj, 0.8) == [3, T]
    assert _exits("confidence", traj, math.inf) == [T, T]
    assert _exits("confidence", traj, -math.inf) == [1, 1]


def test_ponder_cumulative_halting_probability():
    # lambda = 0.5 at every step: 1 - prod (1 - lambda) = 0.5, 0.75, 0.875, then 1 (the rest)
    traj = _traj(halt=[[0.0] * T, [-20.0] * T])
    s = ponder_signal(traj)
    assert torch.allclose(s[0], torch.tensor([0.5, 0.75, 0.875, 1.0], dtype=torch.float64), atol=1e-6)
    assert torch.allclose(s[1, -1], torch.tensor(1.0, dtype=torch.float64), atol=1e-6)
    assert _exits("ponder", traj, 0.8) == [3, T]
    assert _exits("ponder", traj, 0.3) == [1, T]
    assert _exits("ponder", traj, math.inf) == [T, T]


def test_frost_curve_uses_the_calibrators_thresholds():
    val, test = _traj(n=50, seed=1), _traj(n=60, seed=2)
    cal = HaltingCalibrator(200).update(torch.sigmoid(val.halt_logits))
    c = curve(test, val=val, calibrator=cal, quantiles=(0.0, 0.5, 1.0), model="m")
    assert list(c.columns) == list(CURVE_COLUMNS)
    assert set(c["source"]) == {RULES["frost"].source}  # each curve names its rule's source
    assert c["quantile"].tolist() == [0.0, 0.5, 1.0]
    assert c["threshold"].tolist() == [cal.threshold(0.0), cal.threshold(0.5), math.inf]
    depth = exit_steps(torch.sigmoid(test.halt_logits), cal.threshold(0.5))  # halting.exit_steps
    assert c["mean_depth"][1] == pytest.approx(depth.double().mean().item())
    assert c["std_depth"][1] == pytest.approx(depth.double().std(unbiased=False).item())
    val_depth = exit_steps(torch.sigmoid(val.halt_logits), cal.threshold(0.5))
    assert c["val_mean_depth"][1] == pytest.approx(val_depth.double().mean().item())
    assert c["mean_depth"][2] == T and c["std_depth"][2] == 0  # q = 1: full depth for everyone
    full = curve(test, val=val, calibrator=cal, quantiles=FROST_QUANTILES)
    assert len(full) == len(FROST_QUANTILES) and full["mean_depth"].is_monotonic_increasing
    # another rule's curve has no quantile; without val, no val columns
    assert curve(test, "confidence", val=val, count=5)["quantile"].isna().all()
    assert curve(test, calibrator=cal, quantiles=(0.5,))[["val_mean_depth", "val_accuracy"]].isna().all().all()


def test_curve_refuses_what_it_cannot_read():
    val, test = _traj(n=10, seed=1), _traj(n=10, seed=2)
    with pytest.raises(ValueError, match="thresholds from val"):
        curve(test, "confidence")  # no val to take thresholds from, none given
    with pytest.raises(TypeError, match="calibrator must be a HaltingCalibrator"):
        curve(test, val=val, calibrator="0.5")
    with pytest.raises(TypeError, match="full-depth passes"):
        curve(test.scores, "fixed depth")
    with pytest.raises(KeyError):
        curve(test, "no such rule", val=val)
    nan = dataclasses.replace(test, scores=test.scores.clone().fill_(math.nan))
    with pytest.raises(ValueError, match="curve: the scores hold"):
        curve(nan, val=val, calibrator=HaltingCalibrator(200).update(val.scores), quantiles=(0.5,))
    assert len(curve(nan, "confidence", val=val, count=3))  # another rule does not read the scores


# --- the oracle ------------------------------------------------------------------------------

def test_oracle_exits_at_the_earliest_correct_step():
    # y = 0; predictions per step: sample 0 right from step 3, sample 1 at step 1 only, sample 2 never
    right, wrong = [5.0, 0.0], [0.0, 5.0]
    traj = _traj(logits=[[wrong, wrong, right, wrong], [right, wrong, wrong, wrong], [wrong] * 4], n=3, k=2)
    correct = traj.correct
    assert oracle_exits(correct).tolist() == [3, 1, T]
    bound = oracle_curve(traj)
    point = bound[np.isclose(bound["mean_depth"], (3 + 1 + T) / 3)]
    assert point["accuracy"].tolist() == pytest.approx([2 / 3])  # never-correct counts wrong
    # the bound: sample 1 is right at depth 1 for free; sample 0 needs 2 more steps
    assert oracle_accuracy_at(correct, [1.0, 1.5, 5 / 3, 2.0, 4.0]).tolist() == \
        pytest.approx([1 / 3, 1 / 3, 2 / 3, 2 / 3, 2 / 3])


def test_oracle_bound_equals_brute_force_over_every_exit_assignment():
    g = torch.Generator().manual_seed(3)
    for _ in range(5):
        correct = torch.rand(4, 3, generator=g) < 0.4  # (N, T)
        best: dict[int, int] = {}  # total depth -> most correct
        for exits in itertools.product(range(3), repeat=4):
            total = sum(exits) + 4
            hits = sum(bool(correct[i, e]) for i, e in enumerate(exits))
            best[total] = max(best.get(total, 0), hits)
        for total in range(4, 13):
            brute = max(v for k, v in best.items() if k <= total)
            assert oracle_accuracy_at(correct, [total / 4])[0] == pytest.approx(brute / 4)


def test_no_rule_beats_the_oracle():
    val, test = _traj(n=40, t=6, k=3, seed=4), _traj(n=40, t=6, k=3, seed=5)
    cal = HaltingCalibrator(200).update(torch.sigmoid(val.halt_logits))
    curves = model_curves(val, test, "m", calibrator=cal, ponder=True)
    rules = curves[~curves["rule"].isin(["oracle"])]
    bound = oracle_accuracy_at(test.correct, rules["mean_depth"].to_numpy())
    assert (rules["accuracy"].to_numpy() <= bound + 1e-12).all()
    assert set(curves["rule"]) == {*SIGNAL_RULES, "ponder", "frost", "settled probe", "fixed depth", "oracle",
                                   "hindsight exit"}


# --- the threshold protocol ------------------------------------------------------------------

def test_thresholds_come_from_the_held_out_split_only():
    val = _traj(n=30, step_norms=torch.linspace(0.01, 0.3, 120).reshape(30, 4), seed=6)
    test = _traj(n=30, step_norms=torch.linspace(0.5, 2.0, 120).reshape(30, 4), seed=7)  # larger
    c = curve(test, "step size", val=val, count=10, model="m")
    expected = candidate_thresholds(step_size_signal(val), 10)
    assert c["threshold"].to_numpy() == pytest.approx(expected)
    assert expected[1] == pytest.approx(0.01) and expected[-2] == pytest.approx(0.3)  # val's range
    # test's own signal would give other thresholds; the curve does not move with test
    assert not np.allclose(candidate_thresholds(step_size_signal(test), 10)[1:-1], expected[1:-1])
    other = curve(_traj(n=30, seed=8), "step size", val=val, count=10, model="m")
    assert other["threshold"].tolist() == c["threshold"].tolist()
    assert other["val_mean_depth"].tolist() == c["val_mean_depth"].tolist()
    given = curve(test, "step size", val=val, thresholds=c["threshold"], model="m")  # the same thresholds, given
    pd.testing.assert_frame_equal(given, c)
    # val's thresholds never fire on test's larger steps except the +inf extreme
    assert (c["mean_depth"].to_numpy()[:-1] == T).all() and c["mean_depth"].iloc[-1] == 1


def test_a_runs_curves_read_the_passes_given_and_compute_only_the_missing_one(monkeypatch):
    from types import SimpleNamespace

    from frost_nb.analysis import curves as C

    val, test = _traj(n=30, seed=6), _traj(n=30, seed=7)
    computed = []
    monkeypatch.setattr(C, "run_trajectories", lambda result, split: computed.append(split) or val)
    run = SimpleNamespace(config=SimpleNamespace(loss=SimpleNamespace(score_halting=False, ponder=False)))
    given = C.run_rule_curves(run, "m", test=test, val=val)
    assert computed == []  # both passes at hand: no model pass
    pd.testing.assert_frame_equal(given, model_curves(val, test, "m"))
    C.run_rule_curves(run, "m", test=test)
    assert computed == ["val"]


def test_candidate_thresholds_skip_undefined_values():
    s = torch.tensor([[math.nan, 1.0, 2.0], [math.nan, 3.0, math.inf]])
    thr = candidate_thresholds(s, 3)
    assert thr.tolist() == [-math.inf, 1.0, 2.0, 3.0, math.inf]
    assert candidate_thresholds(torch.full((2, 2), math.nan)).tolist() == [-math.inf, math.inf]


def test_fixed_depth_curve_ends_at_full_depth_accuracy():
    val, test = _traj(n=20, seed=9), _traj(n=20, seed=10)
    c = curve(test, "fixed depth", val=val, model="m")
    assert c["mean_depth"].tolist() == c["threshold"].tolist() == c["val_mean_depth"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert (c["std_depth"] == 0).all() and c["quantile"].isna().all()
    assert c["accuracy"].tolist() == test.correct.double().mean(0).tolist()  # step t's accuracy
    assert c["val_accuracy"].tolist() == val.correct.double().mean(0).tolist()
    assert curve(test, "fixed depth")["accuracy"].tolist() == c["accuracy"].tolist()  # no val needed
    assert curve(test, "fixed depth", thresholds=[2, 4])["accuracy"].tolist() == c["accuracy"].iloc[[1, 3]].tolist()


# --- AUC, depth to reach, summary ------------------------------------------------------------

def _curve(points, rule="r", model="m"):
    return pd.DataFrame({"rule": rule, "model": model, "mean_depth": [p[0] for p in points],
                         "accuracy": [p[1] for p in points]})


def test_auc_of_a_flat_curve_is_its_accuracy():
    assert curve_auc(_curve([(1, 0.7), (16, 0.7)]), 16) == pytest.approx(0.7)
    assert curve_auc(_curve([(5, 0.8)]), 16, (5, 5)) == pytest.approx(0.8)  # a window of one depth


def test_auc_never_extends_a_curve_and_sorts_by_depth():
    """Defect: a curve was extended flat to depths 1 and T, so a rule's area could pass the oracle's.
    Now a curve is read only over the depths it reaches: a window it does not cover is NaN."""
    assert math.isnan(curve_auc(_curve([(5, 0.8)]), 16))  # one point cannot cover 1..16
    assert math.isnan(curve_auc(_curve([(3, 0.6), (2, 0.2)]), 4))  # reaches 2..3 only
    assert curve_auc(_curve([(3, 0.6), (2, 0.2)]), 4, (2, 3)) == pytest.approx(0.4)  # sorted by depth
    assert curve_auc(_curve([(1, 0.0), (4, 1.0)]), 4) == pytest.approx(0.5)
    assert curve_auc(_curve([(1, 0.0), (4, 1.0)]), 4, (2, 3)) == pytest.approx(0.5)  # a window inside
    assert math.isnan(curve_auc(_curve([(math.nan, 0.5)]), 4))
    with pytest.raises(ValueError, match="T >= 2"):
        curve_auc(_curve([(1, 0.5)]), 1)


def test_no_rules_area_passes_the_oracles_over_the_depths_it_reaches():
    """Any exit assignments, joined as a curve and read over the depths they reach, stay under the
    oracle's area there (a random exit assignment per point; within 1/N for mixing two of them)."""
    g = torch.Generator().manual_seed(11)
    n, steps = 200, 6
    correct = torch.rand(n, steps, generator=g) < torch.linspace(0.2, 0.7, steps)
    bound = _curve([(d, a) for d, a in zip(np.linspace(1, steps, 321),
                                            oracle_accuracy_at(correct, np.linspace(1, steps, 321)))])
    for _ in range(20):
        points = []
        for _ in range(5):
            exits = torch.randint(1, steps + 1, (n,), generator=g)
            hit = correct.gather(1, (exits - 1)[:, None]).double().mean().item()
            points.append((exits.double().mean().item(), hit))
        rule = _curve(points)
        window = (min(p[0] for p in points), max(p[0] for p in points))
        assert curve_auc(rule, steps, window) <= curve_auc(bound, steps, window) + 1 / n


def test_depth_to_reach_interpolates():
    curve = _curve([(3, 0.9), (1, 0.5), (4, 0.95)])
    assert depth_to_reach(curve, 0.8) == pytest.approx(1 + 0.3 / 0.4 * 2)  # 2.5
    assert depth_to_reach(curve, 0.9) == pytest.approx(3.0)
    assert depth_to_reach(curve, 0.4) == pytest.approx(1.0)  # the shallowest point reaches it
    assert math.isnan(depth_to_reach(curve, 0.96))
    # a curve that dips: the first crossing counts
    assert depth_to_reach(_curve([(1, 0.5), (2, 0.9), (3, 0.6), (4, 0.95)]), 0.7) == pytest.approx(1.5)


def test_summary_reads_every_rule_over_the_depths_all_reach():
    fixed = _curve([(1, 0.5), (2, 0.8), (3, 0.9), (4, 1.0)], rule="fixed depth")
    rule = _curve([(2, 0.9), (4, 1.0)], rule="confidence").assign(random_accuracy=[0.8, 1.0])
    table = summary(pd.concat([fixed, rule]), steps=4)
    assert list(table.columns) == ["rule", "model", "auc", "random_auc", "window_lo", "window_hi", "depth_at_99pct"]
    row = table.set_index("rule").loc["confidence"]
    assert (row["window_lo"], row["window_hi"]) == (2.0, 4.0)  # the rule starts at depth 2
    assert row["depth_at_99pct"] == pytest.approx(2 + 0.09 / 0.1 * 2)  # reaches 0.99 at 3.8
    assert row["auc"] == pytest.approx(0.95)  # (0.9 + 1.0) / 2 over 2..4
    assert row["random_auc"] == pytest.approx(0.9)  # (0.8 + 1.0) / 2
    fixed_row = table.set_index("rule").loc["fixed depth"]
    assert fixed_row["auc"] == pytest.approx((0.85 + 0.95) / 2) and fixed_row["depth_at_99pct"] == pytest.approx(3.9)


# --- collapse -----------------------------------------------------------------------------

def test_collapse_definition():
    assert collapsed(0.8, 0.9, [30, 30, 40]) == (False, [])
    flag, reasons = collapsed(0.4, 0.9, [30, 30, 40])
    assert flag and len(reasons) == 1 and "below half" in reasons[0]
    flag, reasons = collapsed(0.9, 0.9, [0, 1, 99])
    assert flag and "99.0% of the samples exit at step 3" in reasons[0]
    assert collapsed(0.45, 0.9, [5, 0, 95]) == (False, [])  # exactly half and exactly 95%: not yet
    assert len(collapsed(0.1, 0.9, [100, 0, 0])[1]) == 2
    with pytest.raises(ValueError):
        collapsed(float("nan"), 0.9, [1, 2])


# --- end to end on a tiny trained model ------------------------------------------------------

def test_rules_on_a_tiny_trained_model():
    from frost_nb.analysis.trajectories import run_trajectories
    from frost_nb.config import make_config
    from frost_nb.runs import train_or_load

    cfg = make_config("smoke", **{"train.epochs": 2, "train.device": "cpu"})
    result = train_or_load(cfg, progress=False)
    val, test = run_trajectories(result, "val"), run_trajectories(result, "test")
    curves = model_curves(val, test, "frost", calibrator=result.calibrator)
    assert set(curves["rule"]) == {*SIGNAL_RULES, "frost", "settled probe", "fixed depth", "oracle", "hindsight exit"}
    assert curves["mean_depth"].between(1, cfg.model.steps).all()
    full = curves[curves["rule"] == "fixed depth"]["accuracy"].iloc[-1]
    assert full == pytest.approx(result.metrics["test_accuracy"])
    for rule in SIGNAL_RULES:  # the extremes reach both ends of the depth range
        c = curves[curves["rule"] == rule]
        assert c["mean_depth"].max() == cfg.model.steps
    rules = curves[curves["rule"] != "oracle"]
    bound = oracle_accuracy_at(test.correct, rules["mean_depth"].to_numpy())
    assert (rules["accuracy"].to_numpy() <= bound + 1e-12).all()
    table = summary(curves, cfg.model.steps)
    assert len(table) == len(SIGNAL_RULES) + 5 and table["auc"].between(0, 1).all()
    oracle = table.set_index("rule").loc["oracle", "auc"]
    assert (table["auc"] <= oracle + 1e-9).all()  # over the common window no rule passes the bound


# ---------------------------------------------------------------- rules inside adaptive_predict
def _smoke_model_and_images(backbone: str = "resnet"):
    from frost_nb.config import make_config
    from frost_nb.models import create_model

    torch.manual_seed(0)
    cfg = make_config("smoke", None, "frost", backbone, **{"model.steps": 6})
    model = create_model(cfg.model).eval()
    x = torch.randn(64, cfg.model.in_channels, cfg.model.image_size, cfg.model.image_size)
    return model, x


@pytest.mark.parametrize("backbone", ["resnet", "vit"])
def test_online_rules_exit_where_the_offline_rules_do(backbone):
    """Every rule run inside adaptive_predict (its signal on the rows still running, its memory
    compacted with them) exits each sample at the step the offline rule finds in a full-depth pass,
    and returns that step's logits, with and without compaction."""
    from frost_nb.analysis.halting_rules import FIXED, FIXED_RULE, OnlineRule
    from frost_nb.halting import adaptive_predict
    from frost_nb.training import full_depth_pass

    model, x = _smoke_model_and_images(backbone)
    y = torch.zeros(len(x), dtype=torch.int64)
    traj = full_depth_pass(model, [(x, y)], trajectories=True)
    for rule in (*RULES.values(), FIXED_RULE):
        signal = rule.signal(traj)
        thresholds = [2.5, 4.5] if rule.name == FIXED else candidate_thresholds(signal, 4)[1:-1]
        for threshold in thresholds:
            offline = rule_exits(rule, signal, float(threshold))
            for compact_below in (0.0, 1.0):
                res = adaptive_predict(model, x, rule=OnlineRule(rule.name, float(threshold)),
                                       compact_below=compact_below)
                assert torch.equal(res.depth, offline), (rule.name, threshold, compact_below)
                at_exit = traj.logits[torch.arange(len(x)), offline - 1]
                torch.testing.assert_close(res.logits, at_exit, rtol=1e-4, atol=1e-5)
    with pytest.raises(TypeError, match="either tau"):
        adaptive_predict(model, x, 0.5, rule=OnlineRule("confidence", 0.9))
    with pytest.raises(ValueError, match="threshold tau=None"):
        adaptive_predict(model, x)  # neither: FROST's rule without its threshold
    with pytest.raises(ValueError, match="NaN"):
        OnlineRule("confidence", math.nan)
    with pytest.raises(ValueError, match="unknown halting rule 'confidance'; known"):
        OnlineRule("confidance", 0.9)
    with pytest.raises(TypeError, match="OnlineRule\\(name, threshold\\)"):
        adaptive_predict(model, x, rule="confidence")


def test_rule_throughput_reports_each_setting_with_its_spread():
    from frost_nb.analysis.complexity import rule_settings, rule_throughput
    from frost_nb.analysis.halting_rules import FIXED
    from frost_nb.training import full_depth_pass

    model, x = _smoke_model_and_images()
    y = torch.randint(0, 10, (len(x),))
    val = full_depth_pass(model, [(x, y)], trajectories=True)
    calibrator = HaltingCalibrator()
    calibrator.update(torch.sigmoid(val.halt_logits))
    settings = rule_settings(val, [FIXED, "frost", "confidence"], calibrator=calibrator, count=3)
    assert [name for name, _ in settings].count("confidence") == 3  # inner quantiles: not min, not max
    assert [name for name, _ in settings].count("frost") == 3
    with pytest.raises(ValueError, match="calibrator=result.calibrator"):
        rule_settings(val, ["frost"])
    assert [s for s in settings if s[0] == FIXED] == [(FIXED, 0.5), (FIXED, 3.5), (FIXED, 5.5)]
    table = rule_throughput(model, x, y, settings, batch_size=32, rounds=2)
    assert len(table) == len(settings) and (table["images_per_s"] > 0).all()
    assert (table["images_per_s_min"] <= table["images_per_s"]).all()
    assert (table["images_per_s"] <= table["images_per_s_max"]).all()
    fixed = table[table["rule"] == FIXED]
    assert list(fixed["mean_depth"]) == [1.0, 4.0, 6.0]  # linspace(1, 6, 3) rounded: 1, 4, 6


def test_halting_gains_known_answers():
    """Two steps, four samples: a score that stops the two samples right at step 1 there and runs
    the rest to step 2 beats a fixed depth at its mean depth by a quarter."""
    import pandas as pd

    from frost_nb.analysis.curves import curve, halting_gains, oracle_curve
    from frost_nb.analysis.halting_rules import FIXED
    from frost_nb.halting import HaltingCalibrator
    from frost_nb.training import FullDepthPass

    y = torch.tensor([0, 0, 0, 0])
    # readouts: samples 0 and 1 right at both steps, samples 2 and 3 right only at step 2
    logits = torch.tensor([[[5.0, 0], [5, 0]], [[5, 0], [5, 0]], [[0, 5], [5, 0]], [[0, 5], [5, 0]]])
    scores = torch.tensor([[0.6, 0.2], [0.6, 0.2], [0.1, 0.7], [0.1, 0.7]])  # high where stopping is safe
    p = FullDepthPass(scores, torch.logit(scores), logits, y)
    calibrator = HaltingCalibrator(200).update(scores)
    curves = pd.concat([curve(p, calibrator=calibrator, quantiles=(0.375,), model="m"),
                        curve(p, FIXED, model="m"), oracle_curve(p, "m")], ignore_index=True)
    g = halting_gains(curves, 2, quantiles=(0.375,)).iloc[0]
    # q = 0.375: tau = 0.2 (the third of eight scores), so samples 0-1 stop at 1, 2-3 at 2: depth 1.5, all
    # right; a fixed depth at 1.5 reads halfway between 0.5 (t = 1) and 1.0 (t = 2)
    assert calibrator.threshold(0.375) == pytest.approx(0.2)
    assert g["gap_q0.375"] == pytest.approx(1.0 - 0.75)
    assert g["full_depth"] == 1.0 and g["fixed_auc"] == pytest.approx(0.75)
    # over the depths the rule reaches (its one point, 1.5 .. T = 2 with q = 1 absent: the window is
    # 1.5..1.5 plus nothing), the areas are the curves' values there; the oracle bounds the rule
    # 1.5..1.5 plus nothing), the areas are the curves' values there: the rule 1.0 (every sample right), the
    # oracle 1.0 (samples 0-1 right at step 1, 2-3 at step 2: budget 1.5), a fixed depth 0.75, so the rule
    # closes the whole gap: (1.0 - 0.75) / (1.0 - 0.75)
    assert (g["auc"], g["oracle_auc"], g["closed"]) == pytest.approx((1.0, 1.0, 1.0))
    assert g["worst_gap"] == g["gap_q0.375"]
    # the split at q = 0.375: random exits of depths {1, 1, 2, 2} score 0.5 * 0.5 + 0.5 * 1.0 = 0.75,
    # the fixed depth at 1.5 as much (no spread), and the ranking is the whole gain
    assert g["spread"] == pytest.approx(0.0) and g["ranking"] == pytest.approx(0.25)


def test_halting_gains_shares_are_nan_where_there_is_no_gap_to_close():
    """Defect: predictions that never change across steps leave the oracle, the hindsight exit and a fixed
    depth level, and halting_gains divided by their difference (ZeroDivisionError). Each share is NaN."""
    import pandas as pd

    from frost_nb.analysis.curves import curve, halting_gains, hindsight_curve, oracle_curve, share
    from frost_nb.analysis.halting_rules import FIXED
    from frost_nb.halting import HaltingCalibrator
    from frost_nb.training import FullDepthPass

    y = torch.tensor([0, 0, 1, 1])
    logits = torch.tensor([[[5.0, 0], [5, 0]], [[5, 0], [5, 0]], [[5, 0], [5, 0]], [[0, 5], [0, 5]]])  # fixed
    scores = torch.tensor([[0.6, 0.2], [0.6, 0.2], [0.1, 0.7], [0.1, 0.7]])
    p = FullDepthPass(scores, torch.logit(scores), logits, y)
    calibrator = HaltingCalibrator(200).update(scores)
    curves = pd.concat([curve(p, calibrator=calibrator, quantiles=(0.375,), model="m"), curve(p, FIXED, model="m"),
                        oracle_curve(p, "m"), hindsight_curve(p, p, "m")], ignore_index=True)
    g = halting_gains(curves, 2, quantiles=(0.375,)).iloc[0]
    assert g["auc"] == pytest.approx(0.75) and math.isnan(g["closed"]) and math.isnan(g["closed_hindsight"])
    assert share(0.1, 0.2) == pytest.approx(0.5) and math.isnan(share(0.1, 0.0)) and math.isnan(share(math.nan, 1.0))


def test_predictions_that_never_change_give_nan_shares_and_a_constant_probe():
    """Defects on a pass whose predictions never change across steps (200 samples): the areas of the
    oracle and the fixed depth differ by float noise (1e-17), which ``share`` divided by (``closed`` read
    0, 0.5 or 1 by seed); the settled probe, every sample settled at step 1, failed to fit (one class)."""
    from frost_nb.analysis.curves import halting_gains, share
    from frost_nb.analysis.halting_rules import PROBE, fit_settled_probe

    for seed in range(3):
        val, test = (_traj(200, k=4, logits=_traj(200, t=1, k=4, seed=s).logits.expand(200, T, 4), seed=s)
                     for s in (2 * seed, 2 * seed + 1))
        curves = model_curves(val, test, "m", calibrator=HaltingCalibrator(200).update(val.scores))
        assert PROBE in set(curves["rule"])
        for rule in ("frost", "step size", PROBE):
            assert math.isnan(halting_gains(curves, T, rule=rule).iloc[0]["closed"]), (seed, rule)
    assert (fit_settled_probe(val).signal(test) == 1.0).all()  # settled from the first step on
    assert math.isnan(share(1e-17, 3e-17)) and share(0.01, 0.02) == pytest.approx(0.5)


def test_area_gap_bootstrap_reads_the_settled_probe_as_the_rule_too():
    """Defect: the probe was fitted again only as the rival; as the rule under test it was None."""
    from frost_nb.analysis.curves import area_gap_bootstrap
    from frost_nb.analysis.halting_rules import PROBE, REFERENCES, summary

    val, test = _traj(300, seed=1), _traj(300, seed=2)
    curves = model_curves(val, test, "m", calibrator=HaltingCalibrator(200).update(val.scores))
    table = summary(curves, T)
    gap = area_gap_bootstrap(curves, table, test, val, "m", T, rule=PROBE, draws=200)
    own = table[table["model"] == "m"].set_index("rule")["auc"]
    rivals = own.drop([PROBE, *REFERENCES])
    assert (gap["rule"], gap["rival"]) == (PROBE, rivals.idxmax())
    assert gap["gap"] == pytest.approx(own[PROBE] - rivals.max(), abs=1e-9) and gap["low"] < gap["high"]


# ---------------------------------------------------------------- the references and the split
def test_random_exit_accuracy_is_the_mean_over_every_permutation_of_the_exits():
    """The exact expectation: brute force over every assignment of the same exit depths to samples."""
    from frost_nb.analysis.halting_rules import random_exit_accuracy

    g = torch.Generator().manual_seed(12)
    correct = torch.rand(5, 3, generator=g) < 0.5
    exits = torch.tensor([1, 1, 2, 3, 3])
    perms = list(itertools.permutations(exits.tolist()))
    brute = np.mean([np.mean([bool(correct[i, e - 1]) for i, e in enumerate(p)]) for p in perms])
    assert random_exit_accuracy(correct, exits) == pytest.approx(brute)
    # a fixed depth is its own random exits; so is any assignment when accuracy is flat across steps
    assert random_exit_accuracy(correct, torch.full((5,), 2)) == pytest.approx(correct[:, 1].double().mean().item())
    with pytest.raises(ValueError, match="1..3"):
        random_exit_accuracy(correct, torch.tensor([0, 1, 2, 3, 3]))


def test_gain_split_spread_and_ranking_add_up_and_have_known_signs():
    """Concave accuracy by step: spreading exits loses against a fixed depth (spread < 0); stopping
    exactly the samples already right wins over random exits of the same depths (ranking > 0)."""
    from frost_nb.analysis.halting_rules import fixed_accuracy_at, gain_split, random_exit_accuracy

    def split(correct, exits):  # one exit assignment against a fixed depth at its mean depth
        own = correct.gather(1, (exits - 1)[:, None]).double().mean().item()
        fixed = float(fixed_accuracy_at(correct, [exits.double().mean().item()])[0])
        return gain_split(own, fixed, random_exit_accuracy(correct, exits))

    # samples 0-3 right from step 1, 4-5 from step 2, 6-7 never: accuracy 0.5, 0.75, 0.75 (concave)
    correct = torch.tensor([[1, 1, 1]] * 4 + [[0, 1, 1]] * 2 + [[0, 0, 0]] * 2).bool()
    spread_only = split(correct, torch.tensor([1, 3] * 4))  # depths 1 and 3 over samples at random-ish
    assert spread_only["spread"] == pytest.approx(0.5 * 0.5 + 0.5 * 0.75 - 0.75)  # fixed depth 2: 0.75
    ranked = split(correct, torch.tensor([1, 1, 1, 1, 3, 3, 3, 3]))  # the right ones stop at once
    assert ranked["ranking"] == pytest.approx(0.75 - 0.625) and ranked["spread"] == pytest.approx(-0.125)
    for g in (spread_only, ranked):
        assert g["gain"] == pytest.approx(g["spread"] + g["ranking"])
    assert gain_split(0.7, 0.6) == {"gain": pytest.approx(0.1)}  # no random exits: the gain alone


def _settled_by_loop(preds) -> list[int]:
    """Per sample, the first step (1-based) from which every prediction equals the final one."""
    out = []
    for row in preds.tolist():
        t = len(row)
        while t > 1 and row[t - 2] == row[-1]:
            t -= 1
        out.append(t)
    return out


def _score(preds, labels, exits) -> Fraction:
    """The accuracy of stopping sample i at step exits[i] (its prediction there against its label)."""
    return Fraction(sum(int(preds[i, e - 1] == labels[i]) for i, e in enumerate(exits)), len(exits))


def _cheapest_first_by_brute_force(preds, labels, total) -> Fraction:
    """The first construction at total depth ``total`` (mean depth total / N), over every label-free
    choice: each sample stops at step 1 or where it settles (cost e - 1), within the budget; the
    cheapest first (no sample left out is cheaper, by settled step then sample order, than one taken),
    as many as fit. Scored with the labels only once chosen."""
    n = len(preds)
    settled = _settled_by_loop(preds)
    key = lambda i: (settled[i], i)
    feasible = [taken for taken in itertools.product((False, True), repeat=n)
                if sum(settled[i] - 1 for i in range(n) if taken[i]) <= total - n]
    cheapest = [t for t in feasible if not any(key(j) < key(i) for i in range(n) if t[i] for j in range(n) if not t[j])]
    best = max(cheapest, key=sum)
    assert sum(best) == max(map(sum, feasible))  # cheapest first takes the most settled samples any choice can
    return _score(preds, labels, [settled[i] if best[i] else 1 for i in range(n)])


def _capped_by_brute_force(preds, labels, total) -> Fraction:
    """The second construction at total depth ``total``: every sample stops at step s or where it settles
    if that is earlier, for s = 1..T; between two neighbouring s, the straight line (a share of the
    samples at the one, the rest at the other); beyond the last s, its accuracy."""
    n, steps = preds.shape
    settled = _settled_by_loop(preds)
    points = []
    for s in range(1, steps + 1):
        exits = [min(e, s) for e in settled]
        points.append((Fraction(sum(exits)), _score(preds, labels, exits)))
    if total >= points[-1][0]:
        return points[-1][1]
    for (d0, a0), (d1, a1) in zip(points, points[1:]):
        if d0 <= total <= d1:
            return a0 if d1 == d0 else a0 + (a1 - a0) * (total - d0) / (d1 - d0)  # d1 == d0: the same exits
    raise AssertionError(f"total depth {total} below {points[0][0]}")


def test_settled_exits_and_the_hindsight_exit_against_brute_force():
    """Settled for good: the first step from which every prediction equals the final one. The hindsight
    exit's two constructions (``hindsight_constructions``), each found here by enumerating every choice
    on tiny passes, with labels some right and some wrong at step 1 and at the end; the labels only
    score the choice. Chosen on the test pass itself, the exit is the better of the two; at the mean
    settled depth it is full depth."""
    from frost_nb.analysis.halting_rules import hindsight_constructions, hindsight_exit_at, settled_exits

    own = lambda p, y, depths: hindsight_exit_at(p, y, depths, p, y)  # the choice made on the same pass
    preds = torch.tensor([[0, 1, 1, 1], [2, 2, 2, 2], [0, 1, 0, 1], [3, 3, 1, 3]])
    labels = torch.tensor([1, 2, 0, 3])
    assert settled_exits(preds).tolist() == _settled_by_loop(preds) == [2, 1, 4, 4]
    full = (preds[:, -1] == labels).double().mean().item()  # 0.75
    assert own(preds, labels, [settled_exits(preds).double().mean().item()])[0] == pytest.approx(full)
    # known answers. Budget 1.25 (one step beyond step 1 for 4 samples): sample 1 settles at step 1, sample 0
    # (cost 1) takes its final, right answer: 4 of 4. At 2.0 sample 2 (cost 3, tied with sample 3 and first in
    # order; right at step 1, wrong at the end) is taken: 3 of 4, though taking sample 3 would keep 4 of 4:
    # the choice cannot look at the labels
    assert own(preds, labels, [1.0, 1.25, 2.0]).tolist() == pytest.approx([0.75, 1.0, 0.75])
    g = torch.Generator().manual_seed(15)
    cases, won = [(preds, labels)], {"cheapest first": 0, "capped": 0}
    while len(cases) < 12:
        p, y = torch.randint(0, 3, (5, 4), generator=g), torch.randint(0, 3, (5,), generator=g)
        if all(0 < int((p[:, t] == y).sum()) < 5 for t in (0, -1)):  # neither all right nor all wrong
            cases.append((p, y))
    for p, y in cases:
        n, steps = p.shape
        for labels_ in (y, torch.roll(y, 1), torch.flip(y, (0,))):  # other labels: the same choices, scored anew
            totals = [*range(n, n * steps + 2), Fraction(2 * n + 1, 2)]  # every whole total depth, 1 to past T;
            depths = [float(t / n) for t in totals]  # between whole totals: on the capped construction's line
            got = np.stack(hindsight_constructions(p, labels_, depths), 1)  # (depths, 2)
            for total, (cheapest, capped), best in zip(totals, got, own(p, labels_, depths)):
                first, line = _cheapest_first_by_brute_force(p, labels_, total), _capped_by_brute_force(p, labels_, total)
                assert (cheapest, capped, best) == pytest.approx((float(first), float(line), float(max(first, line))),
                                                                 abs=1e-12), (p.tolist(), labels_.tolist(), total)
                won["cheapest first"] += first > line
                won["capped"] += line > first
    assert min(won.values()) > 0  # each construction is the better one somewhere: both are checked
    assert np.isnan(own(preds, labels, [0.5])).all()  # below one step: no budget
    assert np.isnan(hindsight_constructions(preds, labels, [0.5])).all()


def test_the_hindsight_exit_picks_its_construction_on_the_held_out_pass():
    """Defect: the hindsight exit took, at each depth, the better of its two constructions by test
    accuracy, a choice that read the test labels. The held-out pass now picks one per depth and the
    test pass only scores it. At mean depth 1.25, cheapest first wins on ``a`` (1.0 against capped's
    0.75), capped on ``b`` (0.25 against 0.0: every sample right at step 2 but settled only at 4);
    a tie (``level``: no prediction ever changes) goes to capped."""
    from frost_nb.analysis.halting_rules import hindsight_constructions, hindsight_exit_at

    a = torch.tensor([[0, 1, 1, 1], [2, 2, 2, 2], [0, 1, 0, 1], [3, 3, 1, 3]]), torch.tensor([1, 2, 0, 3])
    b = torch.tensor([[9, c, 5, c] for c in range(4)]), torch.arange(4)
    level = torch.zeros(4, 4, dtype=torch.long), torch.tensor([0, 0, 1, 1])
    assert np.stack(hindsight_constructions(*a, [1.25])).ravel().tolist() == pytest.approx([1.0, 0.75])
    assert np.stack(hindsight_constructions(*b, [1.25])).ravel().tolist() == pytest.approx([0.0, 0.25])
    assert hindsight_exit_at(*a, [1.25], *b)[0] == pytest.approx(0.75)  # capped, not test's better 1.0
    assert hindsight_exit_at(*b, [1.25], *a)[0] == pytest.approx(0.0)  # cheapest first, not test's better 0.25
    assert hindsight_exit_at(*a, [1.25], *level)[0] == pytest.approx(0.75)  # a tie on val: capped
    assert hindsight_exit_at(*a, [1.25], *a)[0] == pytest.approx(1.0)


def test_settled_auroc_of_a_score_that_knows_and_of_one_that_does_not():
    from frost_nb.analysis.halting_rules import auroc, settled_auroc, settled_exits

    g = torch.Generator().manual_seed(13)
    preds = torch.randint(0, 3, (200, 5), generator=g)
    settled = torch.arange(1, 6)[None] >= settled_exits(preds)[:, None]  # (N, T)
    per, mean = settled_auroc(settled.float() + 0.1 * torch.rand(200, 5, generator=g), preds)
    finite = per[np.isfinite(per)]
    assert finite.size and np.allclose(finite, 1.0) and mean == pytest.approx(1.0)
    per, mean = settled_auroc(1.0 - settled.float(), preds)  # knows, backwards
    assert mean == pytest.approx(0.0)
    assert auroc(torch.tensor([0.1, 0.2, 0.2, 0.9]), torch.tensor([0, 1, 0, 1])) == pytest.approx(0.875)
    assert math.isnan(auroc(torch.tensor([0.1, 0.2]), torch.tensor([1, 1])))


def test_patience_counts_the_steps_the_prediction_stayed_and_the_probe_is_label_free():
    from frost_nb.analysis.halting_rules import PATIENCE, fit_settled_probe, patience_signal

    right, other = [5.0, 0.0], [0.0, 5.0]
    traj = _traj(logits=[[right, right, other, other], [other, right, right, right]], n=2, k=2)
    assert patience_signal(traj).tolist() == [[0, 1, 0, 1], [0, 0, 1, 2]]
    assert _exits(PATIENCE, traj, 1.5) == [4, 4] and _exits(PATIENCE, traj, 0.5) == [2, 3]
    val = _traj(n=60, t=5, k=3, seed=14)
    probe = fit_settled_probe(val)
    relabelled = dataclasses.replace(val, y=(val.y + 1) % 3)  # other labels: the same probe
    assert torch.equal(probe.signal(val), fit_settled_probe(relabelled).signal(val))
    assert probe.signal(val).shape == (60, 5) and ((probe.signal(val) >= 0) & (probe.signal(val) <= 1)).all()


def test_a_share_of_the_oracle_gap_above_one_is_a_bug():
    """The oracle bounds every exit assignment, so no rule closes more than the whole gap: a curve
    above the bound (here made by hand) stops ``halting_gains`` instead of reading as a success."""
    from frost_nb.analysis.curves import halting_gains

    fixed = _curve([(1, 0.5), (2, 0.6)], rule="fixed depth")
    oracle = _curve([(1, 0.5), (2, 0.7)], rule="oracle")
    honest = _curve([(1, 0.5), (2, 0.6)], rule="frost").assign(quantile=[0.0, 1.0], random_accuracy=[0.5, 0.6])
    assert halting_gains(pd.concat([fixed, oracle, honest]), 2, quantiles=(0.0,))["closed"].iloc[0] == 0
    above = honest.assign(accuracy=[0.9, 0.95])  # more than the bound allows
    with pytest.raises(ValueError, match="oracle gap closed .* > 1"):
        halting_gains(pd.concat([fixed, oracle, above]), 2, quantiles=(0.0,))


def test_split_summary_matches_rules_by_mean_depth():
    from frost_nb.analysis.curves import split_summary

    fixed = _curve([(1, 0.5), (2, 0.8), (3, 0.9), (4, 1.0)], rule="fixed depth")
    rule = _curve([(2, 0.7), (3, 0.9)], rule="r").assign(random_accuracy=[0.75, 0.85])
    row = split_summary(pd.concat([fixed, rule]), 4).iloc[0]
    assert row["depths"] == 2  # depths 2 and 3, the ones it reaches
    assert row["spread"] == pytest.approx(((0.75 - 0.8) + (0.85 - 0.9)) / 2)
    assert row["ranking"] == pytest.approx(((0.7 - 0.75) + (0.9 - 0.85)) / 2)


def test_rule_curves_stored_by_column_come_back_whole():
    """by_column keeps a column plain unless its runs of equal values take at most half the bytes, and
    from_columns gives the very table back (NaN as None: strict JSON)."""
    import json

    from frost_nb.analysis.curves import by_column, from_columns

    table = pd.DataFrame({"rule": ["fixed depth"] * 40 + ["frost"] * 40, "model": ["frost seed 0"] * 80,
                          "threshold": [float("nan")] * 40 + [i / 80 for i in range(40)],
                          "accuracy": [round(0.1 + i / 100, 6) for i in range(80)]})
    stored = json.loads(json.dumps(by_column(table), allow_nan=False))  # as a metrics file holds it
    assert stored["rule"] == {"runs": [["fixed depth", 40], ["frost", 40]]}
    assert stored["model"] == {"runs": [["frost seed 0", 80]]}
    assert isinstance(stored["accuracy"], list) and isinstance(stored["threshold"], list)  # runs no smaller
    back = from_columns(stored)
    assert back[["rule", "model", "accuracy"]].equals(table[["rule", "model", "accuracy"]])
    assert back["threshold"].isna().sum() == 40 and back["threshold"][40:].tolist() == table["threshold"][40:].tolist()
    assert from_columns({"a": [1, 2]}).equals(pd.DataFrame({"a": [1, 2]}))  # a plain dict of lists reads as it is


def test_rival_gap_bootstrap_draws_the_test_images_jointly_across_seeds():
    """Claim 15's interval over seeds: every seed's gap is resampled with the same test images (draw d
    of one seed and draw d of another weigh the images alike), so the seeds' mean gap has the
    percentile interval of the per-draw means; each seed's own interval is its own; fewer draws than
    the rule's minimum are refused."""
    from frost_nb.analysis.curves import area_gap_bootstrap, rival_gap_bootstrap
    from frost_nb.analysis.halting_rules import summary

    passes = {m: (_traj(300, seed=1 + 2 * i), _traj(300, seed=2 + 2 * i)) for i, m in enumerate("ab")}
    curves = pd.concat([model_curves(val, test, m, calibrator=HaltingCalibrator(200).update(val.scores))
                        for m, (val, test) in passes.items()], ignore_index=True)
    table = summary(curves, T)
    tests, vals = ({m: p[i] for m, p in passes.items()} for i in (1, 0))
    each, half = rival_gap_bootstrap(curves, table, tests, vals, T)
    own = {m: area_gap_bootstrap(curves, table, tests[m], vals[m], m, T, draws=1000) for m in "ab"}
    mean = (own["a"]["values"] + own["b"]["values"]) / 2  # draw by draw: the same images for both seeds
    assert half == pytest.approx(np.diff(np.nanpercentile(mean, [2.5, 97.5]))[0] / 2, abs=1e-12) and half > 0
    alone = [(own[m]["high"] - own[m]["low"]) / 2 for m in "ab"]
    assert half < max(alone)  # two different models: the mean's interval is not either seed's
    assert all(each[m] == {k: v for k, v in own[m].items() if k != "values"} for m in "ab")
