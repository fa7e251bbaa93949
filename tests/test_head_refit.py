"""Refitting the halting head of a frozen backbone (frost_nb/analysis/head_refit.py)."""


import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from datasketches import kll_floats_sketch

from frost_nb.analysis import head_refit as hr
from frost_nb.analysis.halting_rules import FIXED, ORACLE, summary
from frost_nb.config import LossConfig, make_config
from frost_nb.losses import ranking_losses, step_losses


def _features(n=256, t=4, d=8, k=3, seed=0):
    """Pooled states whose first coordinate decides whether each step's prediction is right."""
    g = torch.Generator().manual_seed(seed)
    pooled = torch.randn(n, t, d, generator=g)
    y = torch.randint(0, k, (n,), generator=g)
    right = pooled[..., 0] > 0  # (N, T)
    logits = torch.randn(n, t, k, generator=g)
    wrong = (y[:, None] + 1) % k
    target = torch.where(right, y[:, None].expand(n, t), wrong)
    logits.scatter_(2, target[..., None], 10.0)  # argmax is y exactly where right
    return hr.StepFeatures(pooled, logits, y)


def _auc(score, label):
    pos, neg = score[label], score[~label]
    return (pos[:, None] > neg[None, :]).float().mean().item()


def _column_mean(z, losses, rank_frac, margin):
    """The ranking losses of each step's N entries on their own, averaged over the steps."""
    cols = [ranking_losses(z[:, t:t + 1], losses[:, t:t + 1], rank_frac, margin) for t in range(z.shape[1])]
    return np.mean([c.rel.item() for c in cols]), np.mean([c.abs.item() for c in cols])


def test_per_step_ranking_is_the_mean_of_column_losses():
    g = torch.Generator().manual_seed(1)
    z, losses = torch.randn(32, 5, generator=g), torch.rand(32, 5, generator=g)
    own = ranking_losses(z, losses, 0.25, 0.2, pairs="per_step")  # what the per-step heads fit
    rel, abs_ = _column_mean(z, losses, 0.25, 0.2)
    assert own.rel.item() == pytest.approx(rel, rel=1e-6)
    assert own.abs.item() == pytest.approx(abs_, rel=1e-6)


def test_the_train_objective_of_fewer_samples_than_a_batch_is_their_one_partial_batch():
    """defect: the partial batch was always left out, so fewer samples than a batch gave NaN (with a
    warning), though ``refit_head`` trains on that batch."""
    f, cfg = _features(n=100), LossConfig()
    head = hr.make_head(f.pooled.shape[-1], norm=False)
    z = hr.head_logits(head, f.pooled)
    whole = hr.head_loss(hr.GLOBAL, z, step_losses(f.logits, f.y), f.correct, cfg).item()
    assert hr.train_objective(hr.GLOBAL, head, f, cfg, batch_size=128) == pytest.approx(whole)


def test_head_loss_is_each_objective():
    f = _features(n=64)
    z = torch.randn(64, 4)
    losses = torch.rand(64, 4)
    cfg = LossConfig(lambda_rel=2.0, lambda_abs=0.5, margin=0.3, rank_frac=0.25)
    r = ranking_losses(z, losses, 0.25, 0.3)
    assert hr.head_loss(hr.GLOBAL, z, losses, f.correct, cfg).item() == pytest.approx(
        2.0 * r.rel.item() + 0.5 * r.abs.item())
    rel, abs_ = _column_mean(z, losses, 0.25, 0.3)
    for kind in (hr.PER_STEP, hr.PER_STEP_NORM):
        want = 2.0 * rel + 0.5 * abs_
        assert hr.head_loss(kind, z, losses, f.correct, cfg).item() == pytest.approx(want)
    assert hr.head_loss(hr.CORRECTNESS, z, losses, f.correct, cfg).item() == pytest.approx(
        F.binary_cross_entropy_with_logits(z, f.correct.float()).item())
    with pytest.raises(ValueError, match="unknown head"):
        hr.head_loss("median", z, losses, f.correct, cfg)


def test_heads_are_linear_with_an_optional_layernorm():
    plain, normed = hr.make_head(16, norm=False), hr.make_head(16, norm=True)
    assert sum(p.numel() for p in plain.parameters()) == 17
    assert sum(p.numel() for p in normed.parameters()) == 16 + 16 + 17
    assert isinstance(normed[0], torch.nn.LayerNorm)
    pooled = torch.randn(5, 3, 16)
    assert hr.head_logits(plain, pooled).shape == (5, 3)
    # the LayerNorm makes the score blind to the state's scale, which grows with t
    torch.testing.assert_close(hr.head_logits(normed, 7.0 * pooled), hr.head_logits(normed, pooled),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", hr.HEADS)
def test_refitted_heads_separate_right_from_wrong(kind):
    train, test = _features(seed=0), _features(seed=1)
    settings = hr.RefitSettings(epochs=15, batch_size=64, lr=0.02)
    head = hr.refit_head(kind, train, LossConfig(rank_frac=0.25), settings)
    z = hr.head_logits(head, test.pooled).detach()
    assert _auc(z.reshape(-1), test.correct.reshape(-1)) > 0.95  # one coordinate decides: all four learn it
    again = hr.refit_head(kind, train, LossConfig(rank_frac=0.25), settings)
    torch.testing.assert_close(z, hr.head_logits(again, test.pooled).detach())  # seeded


def test_within_step_auc_against_pairs():
    g = torch.Generator().manual_seed(2)
    scores = torch.randint(0, 5, (40, 3), generator=g).float()  # many ties
    correct = torch.rand(40, 3, generator=g) > 0.4
    want = []
    for t in range(3):
        pos, neg = scores[correct[:, t], t], scores[~correct[:, t], t]
        diff = pos[:, None] - neg[None, :]
        want.append(((diff > 0).float() + 0.5 * (diff == 0).float()).mean().item())
    assert hr.within_step_auc(scores, correct) == pytest.approx(np.mean(want))
    perfect = torch.arange(12.0).reshape(4, 3)
    assert hr.within_step_auc(perfect, perfect > 5) == 1.0


def test_calibrate_holds_every_score_once():
    a, b = torch.randn(100, 4), torch.randn(50, 4)
    cal = hr.calibrate(a, b, k=200)
    assert cal.n == 600
    scores = torch.sigmoid(torch.cat([a, b]).reshape(-1)).numpy()
    rank = (scores <= cal.threshold(0.5)).mean()
    assert abs(rank - 0.5) < 3 * kll_floats_sketch.get_normalized_rank_error(cal.k, False)


def test_subsample_is_seeded_and_ordered():
    from frost_nb.data.datasets import load_dataset

    ds = load_dataset("digits", "train")
    sub = hr.subsample(ds, 100, seed=3)
    assert len(sub) == 100
    again = hr.subsample(ds, 100, seed=3)
    assert torch.equal(sub.x, again.x) and torch.equal(sub.y, again.y)
    assert hr.subsample(ds, len(ds) + 1) is ds
    # superclass labels (CIFAR-100's coarse_y) follow the images they label
    with_coarse = hr.subsample(dataclasses.replace(ds, coarse_y=ds.y // 2), 100, seed=3)
    assert torch.equal(with_coarse.coarse_y, sub.y // 2) and sub.coarse_y is None


def test_margins_read_the_table():
    rows = []
    for model, (glob, norm, bce, fixed, conf) in {"a": (0.80, 0.82, 0.85, 0.83, 0.845),
                                                  "b": (0.70, 0.705, 0.80, 0.75, 0.78)}.items():
        for rule, auc in ((hr.GLOBAL, glob), (hr.PER_STEP_NORM, norm), (hr.CORRECTNESS, bce),
                          (FIXED, fixed), (hr.CONFIDENCE, conf)):
            rows.append({"rule": rule, "model": model, "auc": auc, "depth_at_99pct": 5.0})
    v = hr.margins(pd.DataFrame(rows))  # numbers only: frost_nb.claims.head_refit decides
    assert v["mean_gain_per_step_layernorm_over_global"] == pytest.approx((0.02 + 0.005) / 2)
    assert v["mean_margin_correctness_over_best_of_fixed_and_confidence"] == pytest.approx((0.005 + 0.02) / 2)
    assert v["margin_per_backbone"]["a"] == pytest.approx(0.005)
    assert not any(isinstance(x, bool) for x in v.values())


def test_refit_backbone_end_to_end_on_a_smoke_model():
    from frost_nb.training import train

    cfg = make_config("smoke", "digits", "frost", **{"train.epochs": 2, "train.device": "cpu"})
    result = train(cfg, progress=False)
    result.model.requires_grad_(False)
    before = {k: v.clone() for k, v in result.model.state_dict().items()}
    curves, heads, diagnostics = hr.refit_backbone(result, "smoke", train_samples=300,
                                                   settings=hr.RefitSettings(epochs=2, batch_size=64))
    assert set(heads) == set(hr.HEADS)
    assert {d["score"] for d in diagnostics} == {hr.TRAINED, hr.CONFIDENCE, *hr.HEADS}
    assert all(0 <= d["within_step_auc"] <= 1 for d in diagnostics)
    for k, v in result.model.state_dict().items():  # the backbone is untouched
        assert torch.equal(v, before[k]), k
    rules = set(curves["rule"])
    assert rules == {hr.TRAINED, *hr.HEADS, hr.CONFIDENCE, FIXED, ORACLE}
    table = summary(curves, cfg.model.steps)
    assert table["auc"].between(0, 1).all()
    oracle = table.set_index("rule").loc[ORACLE, "auc"]
    assert (table["auc"] <= oracle + 1e-9).all()  # nothing beats the oracle's bound
    # every head's curve reaches full depth (q = 1) with the model's full-depth accuracy
    full = curves[(curves["rule"] == FIXED) & (curves["mean_depth"] == cfg.model.steps)]["accuracy"].item()
    for head in (hr.TRAINED, *hr.HEADS):
        last = curves[curves["rule"] == head].sort_values("mean_depth").iloc[-1]
        assert last["mean_depth"] == cfg.model.steps and last["accuracy"] == pytest.approx(full)
    assert set(hr.margins(table)) >= {"margin_per_backbone", "gain_per_backbone"}
