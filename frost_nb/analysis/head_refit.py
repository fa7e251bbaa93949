"""Refit the halting head of a frozen backbone (fidelity experiment 3(a), docs/fidelity.md section 3): a
linear head ``z_t = w . GAP(h_t) + b`` on the frozen pooled states, four ways (``HEADS``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import LossConfig
from ..halting import HaltingCalibrator
from ..losses import ranking_losses, step_losses
from ..training import FullDepthPass, evaluate, load_split, lr_factor, optimizer_step
from .curves import curve, oracle_curve
from .halting_rules import FIXED, FROST_QUANTILES, THRESHOLDS, auroc, confidence_signal

GLOBAL, PER_STEP, PER_STEP_NORM, CORRECTNESS = ("global pairs", "per-step pairs",
                                                "per-step pairs, LayerNorm", "correctness (BCE)")
HEADS = (GLOBAL, PER_STEP, PER_STEP_NORM, CORRECTNESS)
TRAINED = "trained head"
CONFIDENCE = "confidence"
TRAIN_SAMPLES = 10000  # training images whose pooled states the heads are refitted on


@dataclass(frozen=True)
class RefitSettings:
    """How a head is refitted: AdamW over shuffled batches, the learning rate decayed to 0 (cosine);
    ``batch_size`` is the N of the ranking losses' N x T matrix (the trainer's batch at demo size)."""

    epochs: int = 300  # each objective within 1% of a 600-epoch fit (Fashion-MNIST, frost seed 0)
    batch_size: int = 128
    lr: float = 1e-2
    weight_decay: float = 0.0
    seed: int = 0


@dataclass
class StepFeatures:
    """What a refit needs from one split, steps t = 1..T (float32, CPU)."""

    pooled: Tensor  # (N, T, D) GAP(h_t)
    logits: Tensor  # (N, T, K) class logits y_t
    y: Tensor  # (N,)

    @classmethod
    def of(cls, traj: FullDepthPass) -> StepFeatures:
        return cls(traj.pooled[:, 1:].float(), traj.logits.float(), traj.y)

    @property
    def correct(self) -> Tensor:
        return self.logits.argmax(-1) == self.y[:, None]  # (N, T)


# ---------------------------------------------------------------- heads and losses
def make_head(width: int, norm: bool) -> nn.Module:
    """A fresh linear halting head ``Linear(width, 1)``, after a ``LayerNorm(width)`` if ``norm``."""
    return nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 1)) if norm else nn.Linear(width, 1)


def head_logits(head: nn.Module, pooled: Tensor) -> Tensor:
    """(N, T, D) pooled states -> (N, T) halting logits z_t (the same head at every step)."""
    return head(pooled).squeeze(-1)


def head_loss(kind: str, z: Tensor, losses: Tensor, correct: Tensor, cfg: LossConfig) -> Tensor:
    """The refit objective of head ``kind`` (one of HEADS) on a batch: ``z`` (B, T) halting
    logits, ``losses`` (B, T) detached per-step task losses, ``correct`` (B, T) bool."""
    if kind == CORRECTNESS:
        return F.binary_cross_entropy_with_logits(z.float(), correct.float())
    if kind not in (GLOBAL, PER_STEP, PER_STEP_NORM):
        raise ValueError(f"unknown head {kind!r}; known: {HEADS}")
    # the training loss's own sets and pairs: over all N*T entries, or within each step
    r = ranking_losses(z, losses, cfg.rank_frac, cfg.margin, pairs="global" if kind == GLOBAL else "per_step")
    return cfg.lambda_rel * r.rel + cfg.lambda_abs * r.abs  # eq. (total) without L_task: the backbone is frozen


def refit_head(kind: str, train: StepFeatures, cfg: LossConfig,
               settings: RefitSettings = RefitSettings()) -> nn.Module:
    """A fresh head of kind ``kind`` fitted to ``train`` (the backbone's frozen outputs)."""
    if kind not in HEADS:
        raise ValueError(f"unknown head {kind!r}; known: {HEADS}")
    with torch.random.fork_rng(devices=[]):  # a seeded initialisation that leaves torch's RNG as it was
        torch.manual_seed(settings.seed)
        head = make_head(train.pooled.shape[2], norm=kind == PER_STEP_NORM)
    losses, correct = step_losses(train.logits, train.y), train.correct  # (N, T) each
    n = len(train.y)
    total = settings.epochs * max(1, math.ceil(n / settings.batch_size))  # steps of the cosine decay
    opt = torch.optim.AdamW(head.parameters(), lr=settings.lr, weight_decay=settings.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, 0, total))  # cosine, no warm-up
    gen = torch.Generator().manual_seed(settings.seed)
    head.train()
    for _ in range(settings.epochs):
        for idx in torch.randperm(n, generator=gen).split(settings.batch_size):
            if len(idx) < 2:
                continue  # a ranking needs an easy and a hard entry
            loss = head_loss(kind, head_logits(head, train.pooled[idx]), losses[idx], correct[idx], cfg)
            optimizer_step(head, opt, loss)
            sched.step()
    return head.eval()


@torch.no_grad()
def train_objective(kind: str, head: nn.Module, train: StepFeatures, cfg: LossConfig,
                    batch_size: int = 128) -> float:
    """Mean of ``head_loss`` over the consecutive batches of ``train`` (a last, partial one only if alone)."""
    z, losses, correct = head_logits(head, train.pooled), step_losses(train.logits, train.y), train.correct
    parts = [head_loss(kind, z[i:i + batch_size], losses[i:i + batch_size], correct[i:i + batch_size],
                       cfg).item() for i in range(0, max(len(train.y) - batch_size, 0) + 1, batch_size)]
    return float(np.mean(parts))


def within_step_auc(scores: Tensor, correct: Tensor) -> float:
    """Mean over steps of the AUC of ``scores`` (N, T) for "this step's prediction is correct"
    (ties count half; steps where all or none are correct are skipped)."""
    both = [t for t in range(scores.shape[1]) if 0 < int(correct[:, t].sum()) < len(correct)]
    aucs = [auroc(scores[:, t], correct[:, t]) for t in both]
    return float(np.mean(aucs)) if aucs else math.nan


def calibrate(train_logits: Tensor, val_logits: Tensor, k: int = 200) -> HaltingCalibrator:
    """A KLL sketch of sigmoid(z) on the training subsample and the held-out split (as the trainer)."""
    return HaltingCalibrator(k).update(torch.sigmoid(train_logits)).update(torch.sigmoid(val_logits))


# ---------------------------------------------------------------- curves and the margins
def refit_curves(val: FullDepthPass, test: FullDepthPass, trained: HaltingCalibrator,
                 refits: dict[str, tuple[Tensor, Tensor, HaltingCalibrator]], model: str = ""):
    """Every curve of one backbone (``rule`` names the head): the trained head, each refit ``name ->
    (val logits, test logits, calibrator)``, fixed depth, confidence and the oracle."""
    def with_head(traj: FullDepthPass, z: Tensor) -> FullDepthPass:  # a refit's logits (N, T) and scores
        return dataclasses.replace(traj, halt_logits=z.float(), scores=torch.sigmoid(z.float()))

    heads = {TRAINED: (val, test, trained), **{name: (with_head(val, zv), with_head(test, zt), cal)
                                                 for name, (zv, zt, cal) in refits.items()}}
    parts = [curve(t, val=v, calibrator=cal, quantiles=FROST_QUANTILES, model=model).assign(rule=name)
             for name, (v, t, cal) in heads.items()]
    parts += [curve(test, CONFIDENCE, val=val, count=THRESHOLDS, model=model),
              curve(test, FIXED, val=val, model=model), oracle_curve(test, model)]
    return pd.concat(parts, ignore_index=True)


def margins(table) -> dict:
    """What the design's rule (docs/fidelity.md section 3) reads of a ``summary`` table: per backbone,
    the per-step head's gain over the global refit and the correctness head's margin over the better of
    fixed depth and confidence."""
    auc = table.pivot(index="model", columns="rule", values="auc")
    gain = auc[PER_STEP_NORM] - auc[GLOBAL]  # per backbone
    margin = auc[CORRECTNESS] - np.maximum(auc[FIXED], auc[CONFIDENCE])
    return {"mean_gain_per_step_layernorm_over_global": float(gain.mean()),
            "mean_margin_correctness_over_best_of_fixed_and_confidence": float(margin.mean()),
            "gain_per_backbone": {k: float(v) for k, v in gain.items()},
            "margin_per_backbone": {k: float(v) for k, v in margin.items()}}


# ---------------------------------------------------------------- driver
def subsample(dataset, count: int, seed: int = 0):
    """``count`` images of an in-memory ImageData split, drawn without replacement (seeded),
    in their original order; the whole split when it has no more."""
    if dataset.x is None:
        raise ValueError(f"{dataset.name} is a folder set: subsampling needs an in-memory split")
    if len(dataset) <= count:
        return dataset
    idx = torch.from_numpy(np.sort(np.random.default_rng(seed).choice(len(dataset), count, replace=False)))
    coarse = None if dataset.coarse_y is None else dataset.coarse_y[idx]  # CIFAR-100's superclasses
    return dataclasses.replace(dataset, x=dataset.x[idx], y=dataset.y[idx], coarse_y=coarse)


def refit_backbone(result, label: str, train_samples: int = TRAIN_SAMPLES,
                   settings: RefitSettings = RefitSettings()):
    """All four refits of one trained run (on a seeded subsample of its training split): (curves, {head:
    module}, diagnostics: per score, its test AUCs and, for the refits, the final objective)."""
    cfg = result.config
    splits = {"train": subsample(load_split(cfg, "train"), train_samples, cfg.data.split_seed),
              "val": load_split(cfg, "val"), "test": load_split(cfg, "test")}
    traj = {k: evaluate(result.model, ds, batch_size=cfg.train.eval_batch_size, trajectories=True)
            for k, ds in splits.items()}
    feats = {k: StepFeatures.of(v) for k, v in traj.items()}
    refits, heads, objective = {}, {}, {}
    correct = feats["test"].correct
    scores = {TRAINED: traj["test"].halt_logits.float(), CONFIDENCE: confidence_signal(traj["test"]).float()}
    for kind in HEADS:
        heads[kind] = head = refit_head(kind, feats["train"], cfg.loss, settings)
        with torch.no_grad():  # (N, T) halting logits of the refitted head on each split
            z = {k: head_logits(head, f.pooled).float() for k, f in feats.items()}
        refits[kind] = (z["val"], z["test"], calibrate(z["train"], z["val"], cfg.halting.sketch_k))
        scores[kind] = z["test"]
        objective[kind] = train_objective(kind, head, feats["train"], cfg.loss, settings.batch_size)
    diagnostics = [{"model": label, "score": name, "within_step_auc": within_step_auc(z, correct),
                    "pooled_auc": within_step_auc(z.reshape(-1, 1), correct.reshape(-1, 1)),
                    "train_objective": objective.get(name, math.nan)} for name, z in scores.items()]
    return refit_curves(traj["val"], traj["test"], result.calibrator, refits, label), heads, diagnostics


