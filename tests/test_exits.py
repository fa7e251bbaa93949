"""Exits read off cached outputs (notebook 05) agree with adaptive inference; the explorer
widget redraws from the caches alone."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from frost_nb.analysis.curves import FIXED, PAPER_QUANTILES, curve, summarise_sweeps, versus_fixed_depth
from frost_nb.analysis.exits import ExitCache
from frost_nb.config import make_config
from frost_nb.halting import HaltingCalibrator, adaptive_predict, exit_steps
from frost_nb.models import create_model
from frost_nb.training import full_depth_pass


@pytest.fixture(scope="module")
def model_and_cache():
    """An untrained smoke FROST model on random 8x8 images, its scores in the calibrator."""
    torch.manual_seed(0)
    model = create_model(make_config("smoke").model).eval()
    x, y = torch.randn(96, 1, 8, 8), torch.randint(0, 10, (96,))
    outputs = full_depth_pass(model, [(x[:50], y[:50]), (x[50:], y[50:])])
    calibrator = HaltingCalibrator(200)
    calibrator.update(outputs.scores)
    return model, x, y, ExitCache(outputs, calibrator, "smoke")


@pytest.mark.parametrize("q", [0.0, 0.2, 0.5, 0.8, 1.0])
def test_cached_exits_are_those_of_adaptive_inference(model_and_cache, q):
    model, x, y, cache = model_and_cache
    e = cache.at(q)
    res = adaptive_predict(model, x, cache.calibrator.threshold(q))
    assert torch.equal(e.depth, res.depth)
    assert torch.equal(e.correct, res.logits.argmax(-1) == y)
    assert e.accuracy == pytest.approx((res.logits.argmax(-1) == y).double().mean().item())


def test_exits_follow_a_calibrator_updated_after_they_were_read(model_and_cache):
    """Defect: exits were kept by quantile alone, so a calibrator updated since gave the old exits."""
    _, _, _, cache = model_and_cache
    calibrator = HaltingCalibrator.from_bytes(cache.calibrator.to_bytes())
    own = ExitCache(cache.outputs, calibrator, "own")
    before = own.at(0.5)
    calibrator.update(torch.full((500,), 0.999))  # most scores now lie below the median: a higher threshold
    after = own.at(0.5)
    assert after.threshold == calibrator.threshold(0.5) > before.threshold
    assert torch.equal(after.depth, exit_steps(cache.outputs.scores, after.threshold))
    assert not torch.equal(after.depth, before.depth)


def test_exit_views_add_up(model_and_cache):
    _, _, y, cache = model_and_cache
    e = cache.at(0.5)
    assert e.histogram().sum() == len(y) and len(e.histogram()) == cache.steps
    assert np.dot(np.arange(1, cache.steps + 1), e.histogram()) / len(y) == pytest.approx(e.mean_depth)
    d = e.depth[e.order()]
    assert torch.all(d[1:] >= d[:-1])  # earliest first
    table = cache.per_class(0.5, [f"c{i}" for i in range(10)])
    assert table["samples"].sum() == len(y) and set(table["class"]) <= {f"c{i}" for i in range(10)}
    weighted = (table["samples"] * table["mean_depth"]).sum() / len(y)
    assert weighted == pytest.approx(e.mean_depth)
    assert cache.at(1.0).mean_depth == cache.steps and cache.at(1.0).std_depth == 0


def _sweep(cache, quantiles):
    return curve(cache.outputs, calibrator=cache.calibrator, quantiles=quantiles)


def test_sweep_against_fixed_depth(model_and_cache):
    _, _, _, cache = model_and_cache
    sweep = _sweep(cache, (0.25, 0.5, 1.0))
    assert list(sweep["quantile"]) == [0.25, 0.5, 1.0]
    assert sweep["accuracy"].iloc[-1] == pytest.approx(cache.outputs.accuracy)  # q = 1 is full depth
    for q, row in zip((0.25, 0.5, 1.0), sweep.itertuples()):  # the curve's rows are the cache's exits
        e = cache.at(q)
        assert (row.threshold, row.mean_depth, row.std_depth, row.accuracy) == (
            e.threshold, e.mean_depth, e.std_depth, e.accuracy)
    fixed = curve(cache.outputs, FIXED)
    assert list(fixed["mean_depth"]) == list(range(1, cache.steps + 1)) and (fixed["std_depth"] == 0).all()
    assert fixed["accuracy"].to_numpy() == pytest.approx(cache.outputs.accuracy_per_step())
    vs = versus_fixed_depth(sweep, fixed)
    assert vs["gain"].iloc[-1] == pytest.approx(0.0, abs=1e-6)  # at depth T both are the full-depth accuracy
    both = summarise_sweeps({"a": sweep, "b": sweep.assign(accuracy=sweep["accuracy"] + 0.1)})
    assert both["accuracy"].to_numpy() == pytest.approx(sweep["accuracy"].to_numpy() + 0.05)
    # a sample standard deviation (ddof = 1): two runs 0.1 apart spread 0.1 / sqrt(2), not 0.05
    assert both["accuracy_spread"].to_numpy() == pytest.approx(0.1 / math.sqrt(2)) and (both["runs"] == 2).all()


def test_groups_side_by_side_are_their_runs_means(model_and_cache):
    """side_by_side: one row per group and quantile, each the mean over the group's runs of what
    the sweep, the fixed-depth curve and the rival give that run alone."""
    import pandas as pd

    from frost_nb.analysis.curves import side_by_side

    _, _, _, cache = model_and_cache
    calibrator = HaltingCalibrator(200)
    calibrator.update(cache.outputs.scores ** 2)  # other thresholds, other exits
    other = ExitCache(cache.outputs, calibrator, "other")
    rival = pd.DataFrame({"mean_depth": [1.0, float(cache.steps)], "accuracy": [0.0, cache.outputs.accuracy]})
    quantiles = PAPER_QUANTILES
    table = side_by_side({"a": {0: cache, 1: other}, "b": {0: cache}},
                         {"a": {0: rival, 1: rival}, "b": {0: rival}})
    assert list(zip(table["group"], table["quantile"])) == [(g, q) for g in "ab" for q in quantiles]
    assert table["runs"].tolist() == [2] * len(quantiles) + [1] * len(quantiles)
    one, two = (versus_fixed_depth(_sweep(c, quantiles), curve(c.outputs, FIXED), rival, "confidence")
                for c in (cache, other))
    a = table[table["group"] == "a"]
    assert a["gain"].to_numpy() == pytest.approx((one["gain"] + two["gain"]).to_numpy() / 2)
    assert a["gain_over_confidence"].to_numpy() == pytest.approx(
        (one["gain_over_confidence"] + two["gain_over_confidence"]).to_numpy() / 2)
    b = table[table["group"] == "b"]
    assert b["std_depth"].to_numpy() == pytest.approx([cache.at(q).std_depth for q in quantiles])
    assert b["kept"].iloc[-1] == pytest.approx(1.0)  # q = 1: full depth keeps all of it


def test_sweep_read_at_given_depths():
    import pandas as pd

    from frost_nb.analysis.curves import at_depths

    sweep = pd.DataFrame({"quantile": [0.5, 1.0], "mean_depth": [1.0, 4.0], "accuracy": [0.2, 0.8]})
    fixed = pd.DataFrame({"mean_depth": [1, 2, 3, 4], "accuracy": [0.1, 0.3, 0.5, 0.8]})
    got = at_depths(sweep, fixed, [2.0, 3.5])
    assert got["accuracy"].tolist() == pytest.approx([0.4, 0.7])  # along the sweep's curve
    assert got["fixed_depth_accuracy"].tolist() == pytest.approx([0.3, 0.65])  # between steps
    assert got["kept"].tolist() == pytest.approx([0.5, 0.875]) and got["fixed_kept"].iloc[0] == pytest.approx(0.375)


def test_a_rival_rule_is_read_at_the_same_depths():
    """Another rule's curve (a curves.curve table, its points in any order, one of them
    not finite) read along its own points at the sweep's depths and at given depths."""
    import pandas as pd

    from frost_nb.analysis.curves import at_depths

    sweep = pd.DataFrame({"quantile": [0.5, 1.0], "mean_depth": [2.0, 4.0], "accuracy": [0.5, 0.8]})
    fixed = pd.DataFrame({"mean_depth": [1, 2, 3, 4], "accuracy": [0.1, 0.3, 0.5, 0.8]})
    rival = pd.DataFrame({"mean_depth": [4.0, 1.0, float("nan"), 3.0], "accuracy": [0.8, 0.2, 0.9, 0.6]})
    vs = versus_fixed_depth(sweep, fixed, rival, "confidence")
    assert vs["confidence_accuracy"].tolist() == pytest.approx([0.4, 0.8])
    assert vs["gain_over_confidence"].tolist() == pytest.approx([0.1, 0.0])
    got = at_depths(sweep, fixed, [1.0, 3.5], rival, "confidence")
    assert got["confidence_accuracy"].tolist() == pytest.approx([0.2, 0.7])
    assert got["confidence_kept"].tolist() == pytest.approx([0.25, 0.875])
    assert "confidence_accuracy" not in versus_fixed_depth(sweep, fixed)  # no rival, no column
    with pytest.raises(ValueError, match="no finite"):
        versus_fixed_depth(sweep, fixed, rival.assign(accuracy=float("nan")), "confidence")


def test_a_quantile_outside_0_1_is_refused(model_and_cache):
    cache = model_and_cache[3]
    for q in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"is (outside|not a number).*\[0, 1\]"):
            cache.at(q)


def test_explorer_redraws_from_the_caches_only(model_and_cache, monkeypatch):
    pytest.importorskip("ipywidgets")
    from frost_nb.notebook.widgets import HaltingExplorer, describe

    model, x, _, cache = model_and_cache
    other = ExitCache(cache.outputs, cache.calibrator, "other")
    images = (x.clamp(-2, 2) * 60 + 128).to(torch.uint8)
    explorer = HaltingExplorer({"a": cache, "b": other}, images=images, classes=[str(i) for i in range(10)],
                               quantile=0.5, examples=3)
    monkeypatch.setattr(type(model), "forward", lambda *a, **k: pytest.fail("the explorer ran the model"))
    before = explorer.redraws
    explorer.slider.value = 0.25
    assert explorer.current.quantile == 0.25 and explorer.redraws == before + 1
    assert describe(cache.at(0.25)) in explorer.stats.value
    # the views are PNGs of their own, whatever the matplotlib backend (here Agg, no inline display)
    views = (explorer.histogram, explorer.per_class, explorer.gallery)
    assert all(bytes(v.value).startswith(b"\x89PNG") for v in views)
    explorer.selector.value = "b"
    assert explorer.redraws == before + 2 and explorer.stats.value.startswith("<b>b</b>")
    with pytest.raises(ValueError, match="outside"):
        HaltingExplorer({"a": cache}, quantile=2.0)


def test_explorer_mean_depth_slider_sets_the_quantile_from_the_held_out_caches(model_and_cache, monkeypatch):
    """The budget knob: a mean depth asked for moves the quantile to the one whose held-out mean
    depth is closest; moving the quantile (or the model) shows the held-out depth it gives."""
    pytest.importorskip("ipywidgets")
    from frost_nb.notebook.widgets import HaltingExplorer

    model, _, _, cache = model_and_cache
    held_out = ExitCache(cache.outputs, cache.calibrator, "held-out")  # stands in for a val pass
    explorer = HaltingExplorer({"a": cache, "b": cache}, quantile=0.5, budgets={"a": held_out, "b": held_out})
    monkeypatch.setattr(type(model), "forward", lambda *a, **k: pytest.fail("the explorer ran the model"))
    assert explorer.budget.value == pytest.approx(held_out.at(0.5).mean_depth)
    before = explorer.redraws
    explorer.budget.value = 2.0
    found = held_out.quantile_for_depth(2.0)
    assert explorer.slider.value == found.quantile and explorer.redraws == before + 1
    assert explorer.budget.value == 2.0  # not pulled back to the depth reached
    assert f"held-out mean depth at this q: {found.mean_depth:.2f}" in explorer.budget_note.value
    explorer.slider.value = 1.0  # full depth: the slider follows
    assert explorer.budget.value == cache.steps
    with pytest.raises(ValueError, match="budgets needs a held-out ExitCache for every model"):
        HaltingExplorer({"a": cache, "b": cache}, budgets={"a": held_out})
    plain = HaltingExplorer({"a": cache})
    assert plain.budget not in plain.widget.children[0].children  # no knob without held-out caches


# --- bad input (issue 18) ------------------------------------------------------------------------

def _split(x: torch.Tensor):
    """A synthetic ImageData test split of digits' info around the uint8 images ``x``."""
    from frost_nb.data.datasets import DATASETS, ImageData

    return ImageData(x, torch.zeros(len(x), dtype=torch.int64), DATASETS["digits"],
                     [str(c) for c in range(10)], "digits", "test", "synthetic")


def test_a_cache_of_a_pass_with_trajectories_is_the_cache_of_the_model(model_and_cache):
    """The same pass read twice: scores and predictions equal to the last bit, so the exits too."""
    model, x, y, cache = model_and_cache
    traj = full_depth_pass(model, [(x[:50], y[:50]), (x[50:], y[50:])], trajectories=True)
    again = ExitCache(traj, cache.calibrator, "smoke")
    assert torch.equal(again.outputs.scores, cache.outputs.scores)
    assert torch.equal(again.outputs.preds, cache.outputs.preds) and torch.equal(again.y, cache.y)
    assert torch.equal(again.at(0.5).depth, cache.at(0.5).depth)


def test_from_model_checks_that_the_split_fits_the_model(model_and_cache):
    from frost_nb.data.datasets import DataError

    model, _, _, cache = model_and_cache
    pixels = torch.randint(0, 256, (12, 1, 8, 8), dtype=torch.uint8)
    assert ExitCache.from_model(model, cache.calibrator, _split(pixels)).steps == 4
    with pytest.raises(DataError, match=r"digits test split has 3 channel\(s\).*takes 1"):
        ExitCache.from_model(model, cache.calibrator, _split(pixels.expand(12, 3, 8, 8)))
    with pytest.raises(DataError, match=r"16x16, the model was built for 8x8"):
        ExitCache.from_model(model, cache.calibrator, _split(pixels.repeat(1, 1, 2, 2)))
    big = ExitCache.from_model(model, cache.calibrator, _split(pixels.repeat(1, 1, 2, 2)),
                               allow_other_size=True)
    assert big.outputs.scores.shape == (12, 4)
    with pytest.raises(DataError, match="uint8"):
        ExitCache.from_model(model, cache.calibrator, _split(pixels.float()))
    with pytest.raises(TypeError, match="ImageData split"):
        ExitCache.from_model(model, cache.calibrator, pixels.float())  # was an AttributeError


def test_cache_construction_refuses_bad_scores_and_shapes(model_and_cache):
    outputs, calibrator = model_and_cache[3].outputs, model_and_cache[3].calibrator
    scores = outputs.scores.clone()
    scores[3, 1] = float("nan")  # used to read as "never exits": full depth for that sample
    with pytest.raises(ValueError, match="ExitCache: outputs.scores hold 1 NaN"):
        ExitCache(dataclasses.replace(outputs, scores=scores), calibrator)
    with pytest.raises(ValueError, match=r"labels y \(N,\)"):
        ExitCache(dataclasses.replace(outputs, y=outputs.y[:5]), calibrator)
    with pytest.raises(TypeError, match="HaltingCalibrator"):
        ExitCache(outputs, calibrator.to_bytes())


def test_budget_depth_is_met_on_the_split_it_was_found_on():
    """A mean-depth budget from 2 to T - 2 steps, found on the held-out split of the committed
    digits demo frost (one pass, bisection on q), is met there within 0.5 steps. On the test split
    the same quantiles overshoot by up to 1.25 steps (digits' held-out split is 144 images; issue
    20 asks for 0.5 there, not met yet), so only the direction is checked: deeper budgets, deeper exits."""
    from frost_nb.checkpoint import load_model
    from frost_nb.config import make_config
    from frost_nb.runs import find_run
    from frost_nb.training import load_split

    config = make_config("demo", "digits", "frost")
    model, calibrator = load_model(find_run(config).checkpoint)
    val = ExitCache.from_model(model, calibrator, load_split(config, "val"))
    test = ExitCache.from_model(model, calibrator, load_split(config, "test"))
    steps = config.model.steps
    found = [val.quantile_for_depth(budget) for budget in range(2, steps - 1)]
    for budget, f in zip(range(2, steps - 1), found):
        assert abs(f.mean_depth - budget) <= 0.5 and f.threshold == calibrator.threshold(f.quantile), (budget, f)
    reached = [test.at(f.quantile).mean_depth for f in found]
    assert reached == sorted(reached) and reached[0] < reached[-1]
    for bad in (0.5, steps + 1, float("nan"), "6"):
        with pytest.raises(ValueError, match=r"^depth=.* (is outside|is not a number|must be).* 16.*: a mean depth"):
            val.quantile_for_depth(bad)


def test_table_1_beside_the_paper_spreads_seeds_by_the_sample_standard_deviation():
    """One ddof for every spread over seeds (docs/method.md 9.8): three seeds 0.80, 0.85, 0.90 spread 0.05
    (ddof = 1), not 0.041 (ddof = 0)."""
    import pandas as pd

    from frost_nb.notebook.tables import beside_paper_table1

    table = pd.DataFrame([{"model": "frost", "seed": s, "step": 3, "mean": m, "std": 0.1}
                          for s, m in enumerate((0.80, 0.85, 0.90))])
    (row,) = beside_paper_table1(table, steps=[3]).to_dict("records")
    assert row["spread over seeds"] == pytest.approx(0.05) and row["mean"] == pytest.approx(0.85)


def _constant_exit_cache(n: int = 2000, steps: int = 4, right_early: float = 0.5) -> ExitCache:
    """Every image the same scores (rising with the step), so every quantile exits all of them at one
    step; before the last step the first ``right_early`` of the images are right, at the last all."""
    from frost_nb.training import FullDepthPass

    scores = torch.arange(1, steps + 1, dtype=torch.float32).div(steps + 1).repeat(n, 1)  # (N, T)
    y = torch.zeros(n, dtype=torch.long)
    logits = torch.zeros(n, steps, 2)
    logits[:, :, 1] = 1.0  # class 1: wrong ...
    logits[: int(right_early * n), :, 0] = 2.0  # ... but for these, right at every step
    logits[:, -1, 0] = 2.0  # and at the last step all are right
    calibrator = HaltingCalibrator(200)
    calibrator.update(scores)
    return ExitCache(FullDepthPass(scores, torch.logit(scores), logits, y), calibrator)


def test_the_image_halves_of_table_2_are_the_binomial_interval_and_resample_the_seeds_jointly():
    """Every image exits at one step d_q, so the share kept at q is the accuracy at d_q over 1 (all right
    at full depth): a proportion p = 0.5 below the last step (half-width 1.96 sqrt(p (1 - p) / n)), exactly
    1 at it (half-width 0); a halting rule that exits everyone at one step gains nothing over that fixed
    depth on any resample (0). Two seeds holding the same images keep the one-seed half-width: the
    images are resampled jointly (separately, the mean of two would shrink it by sqrt 2)."""
    from frost_nb.analysis.exits import sweep_image_halves

    cache, n = _constant_exit_cache(), 2000
    quantiles = (0.0, 0.25, 0.5, 0.75, 1.0)
    early = [q for q in quantiles if cache.at(q).mean_depth < cache.steps]
    assert early and cache.at(1.0).mean_depth == cache.steps
    shown = (early[0], 1.0)
    depths = {early[0]: cache.at(early[0]).mean_depth, 1.0: float(cache.steps)}
    binomial = 1.96 * math.sqrt(0.25 / n)
    for caches in ({"seed 0": cache}, {"seed 0": cache, "seed 1": cache}):
        halves = sweep_image_halves(caches, quantiles, shown, depths)
        assert halves["kept_at_quantile"][early[0]] == pytest.approx(binomial, rel=0.15)
        assert halves["kept_at_depth"][early[0]] == pytest.approx(binomial, rel=0.15)
        assert halves["kept_at_quantile"][1.0] == 0.0 and halves["kept_at_depth"][1.0] == 0.0
        assert halves["gain_over_fixed"] == pytest.approx(0.0, abs=1e-12) and halves["resamples"] == 1000
