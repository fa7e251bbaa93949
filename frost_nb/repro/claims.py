"""The paper's claims as rules: every verdict of the project is decided here, and only here.

FROST (Yu and Hwang, ICML 2026, arXiv 2601.19551) makes the claims in ``CLAIMS``; 14, 15 and 16 are
ours, as are those in docs/results.md only (``BENCHMARK_CLAIMS``, ``EXTENSION_CLAIMS``). Each rule
takes numbers (per seed for trained models) and returns a ``Verdict``; ``repro.verdicts`` finds the
numbers. How a verdict is decided (margins, seeds, Welch's interval for separate runs, the test
images' bootstrap, parts and guards): docs/method.md section 9.8. Deterministic and benchmark rows
compare one number with the paper's against a relative tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
from .. import paper
from ..paper import TABLE1_STEP
from ..analysis.stats import interval, welch, with_images
from ..analysis.halting_rules import COLLAPSE_ACCURACY_RATIO, COLLAPSE_ONE_STEP_SHARE, FROST, REFERENCES
from ..analysis.ladder import KEPT_AT, TABLE1_AT

REPRODUCED, PARTLY, NOT = "reproduced", "partly reproduced", "not reproduced"
INCONCLUSIVE = "inconclusive (95% interval spans the margin)"
IMAGE_NOISE = "inconclusive (test images)"  # fewer than MIN_SEEDS seeds: the test images' interval spans the margin
SUGGESTED, NOT_SUGGESTED = "suggested", "not suggested"
NOT_TESTABLE, PROTOCOL_DEPENDENT, GUARD_FAILED = "not testable", "protocol-dependent", "guard failed"
MIN_SEEDS = 3  # seeds needed for "reproduced" or "not reproduced" on a trained-model claim


class Verdict(str):
    """A verdict as the tables print it (a ``str``), with what ``combine`` needs carried as data:
    ``status`` (one of the constants above), ``seeds`` (the runs behind it; None for a
    deterministic number), ``reasons`` (why parts are not testable) and ``note`` (GUARD_FAILED)."""

    status: str
    seeds: int | None
    reasons: tuple[str, ...]
    note: str

    def __new__(cls, status: str, seeds: int | None = None, reasons: Sequence[str] = (), note: str = ""):
        text = status
        if status in (SUGGESTED, NOT_SUGGESTED, IMAGE_NOISE):
            text += f" ({seeds} seed{'s' if seeds != 1 else ''}{'; ' + note if note else ''})"
        elif note:
            text += f" ({note})"
        if reasons:
            why = f"{NOT_TESTABLE}: " + "; ".join(reasons)
            text = why if status == NOT_TESTABLE else f"{text}; {why}"
        self = super().__new__(cls, text)
        self.status, self.seeds, self.reasons, self.note = status, seeds, tuple(reasons), note
        return self


def suggested(n: int, holds: bool) -> Verdict:
    return Verdict(SUGGESTED if holds else NOT_SUGGESTED, n)


def untestable(why: str) -> Verdict:
    return Verdict(NOT_TESTABLE, reasons=(why,))


def _finite_values(values: Iterable[float]) -> list[float]:
    return [float(x) for x in values if x is not None and not math.isnan(x)]


def _verdict(d: float, n: int, image_half: float, half: Callable[[], float]) -> Verdict:
    """The verdict of a difference ``d`` of seed means from the margin, over ``n`` seeds: against ``half()``,
    its interval's half-width, widened by the test images' ``image_half`` (``with_images``); with fewer
    than MIN_SEEDS seeds, suggested by the mean's side of the margin, unless the test images' interval
    (``image_half`` > 0, measured) spans the margin."""
    if n < MIN_SEEDS:
        return Verdict(IMAGE_NOISE, n) if image_half > 0 and abs(d) <= image_half else suggested(n, d > 0)
    width = with_images(half(), image_half)
    return Verdict(INCONCLUSIVE if abs(d) <= width else REPRODUCED if d > 0 else NOT, n)


def decide(values: Iterable[float], margin: float = 0.0, image_half: float = 0.0) -> Verdict:
    """The verdict of one part: ``values`` one number per seed, the claim holding when their
    mean exceeds ``margin`` (see the module docstring); ``image_half``, the test images' bootstrap
    half-width of that mean (0: not measured), widens the interval (``with_images``)."""
    if not (v := _finite_values(values)):
        return untestable("no runs")
    return _verdict(float(np.mean(v)) - margin, len(v), image_half, lambda: interval(v)[1])


def decide_between(a: Iterable[float], b: Iterable[float], margin: float = 0.0) -> Verdict:
    """The verdict of one part that compares separately trained models: mean(a) - mean(b) against
    ``margin`` by Welch's interval (``welch``); with fewer than MIN_SEEDS seeds on either side,
    suggested (on the fewer)."""
    a, b = _finite_values(a), _finite_values(b)
    if not a or not b:
        return untestable("no runs")
    return _verdict(float(np.mean(a) - np.mean(b)) - margin, min(len(a), len(b)), 0.0,
                    lambda: welch(a, b)[1])


def combine(parts: Sequence[Verdict], guard: Verdict | None = None) -> Verdict:
    """One verdict from the verdicts of a claim's parts (``decide``'s, ``untestable``'s or
    ``combine``'s): reproduced when every tested part is; partly when one is and another is not;
    not reproduced when one is not and none is; else inconclusive. Its seeds are the fewest of
    any tested part. ``guard``, a precondition and never a part: when it fails ("not reproduced"
    or "not suggested") the claim is not reproduced (not suggested on fewer seeds) with the note
    GUARD_FAILED; when it is inconclusive, a claim whose parts hold reads inconclusive; when only
    suggested (fewer than MIN_SEEDS seeds), a reproduced claim reads suggested."""
    tested = [p for p in parts if p.status != NOT_TESTABLE]
    reasons = list(dict.fromkeys(r for p in parts for r in p.reasons))  # each reason once
    if guard is not None and guard.status in (NOT, NOT_SUGGESTED):
        seeds = min((p.seeds for p in (*tested, guard) if p.seeds is not None), default=None)
        few = guard.status == NOT_SUGGESTED or any(p.status in (SUGGESTED, NOT_SUGGESTED) for p in tested)
        return Verdict(NOT_SUGGESTED if few else NOT, seeds, reasons, note=GUARD_FAILED)
    if not tested:
        return Verdict(NOT_TESTABLE, reasons=reasons)
    seeds = min((p.seeds for p in tested if p.seeds is not None), default=None)
    status = [p.status for p in tested]
    fewer = [p.seeds for p in tested if p.status in (SUGGESTED, NOT_SUGGESTED, IMAGE_NOISE)]  # < MIN_SEEDS
    main = (SUGGESTED if fewer and all(s in (SUGGESTED, REPRODUCED) for s in status) else
            NOT_SUGGESTED if fewer and (NOT_SUGGESTED in status or NOT in status) else
            IMAGE_NOISE if IMAGE_NOISE in status else REPRODUCED if all(s == REPRODUCED for s in status) else
            PARTLY if PARTLY in status or (REPRODUCED in status and NOT in status) else
            NOT if NOT in status else INCONCLUSIVE)  # not reproduced when a part fails and none holds
    seeds = min(fewer, default=seeds)
    if guard is not None and guard.status == INCONCLUSIVE and main in (REPRODUCED, PARTLY):
        main = INCONCLUSIVE  # the parts hold, but whether their precondition does is open
    if guard is not None and guard.status == SUGGESTED and main == REPRODUCED:
        main, seeds = SUGGESTED, guard.seeds  # the precondition rests on fewer seeds
    return Verdict(main, seeds, reasons)


def by_seed(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """a - b seed by seed (two lists over the same seeds, in the same order)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} seeds against {len(b)}: pair them by seed first")
    return [x - y for x, y in zip(a, b)]


@dataclass(frozen=True)
class Claim:
    """One row of the README's table: what the paper says (quoted or paraphrased from
    docs/method.md) and what the rule tests, with its margin."""
    number: int
    title: str
    wording: str  # the paper's wording the rule tests
    test: str  # the rule, with its margin


# ------------------------------------------------------------------------------------------------
# 1. Table 1: scale consistency
TABLE1_MARGIN = 0.0  # the paper states no margin: frost's cosine above basic_ssm's


def table1(frost: Sequence[float], basic_ssm: Sequence[float]) -> Verdict:
    """frost's cosine to its final state at TABLE1_STEP minus basic_ssm's, on the seed means of
    separately trained runs (``decide_between``, Welch), against TABLE1_MARGIN: FROST is more
    scale-consistent than the SSM."""
    return decide_between(frost, basic_ssm, TABLE1_MARGIN)


def table1_update(control: Sequence[float], basic_ssm: Sequence[float]) -> Verdict:
    """Ours, beside claim 1 and never a veto of it: does FROST's update carry the gap without
    the ranking losses? frost trained on the task loss alone minus basic_ssm (Welch), against 0."""
    return decide_between(control, basic_ssm)


# 2. Appendix B: contraction. The appendix bounds products of step Jacobians by kappa^k with
# kappa < 1, so the rule reads the growth rate per step of k-step products along the trajectory.
# The one-step norm bounds a product from above only (a norm above 1 allows a contracting
# product), so it is shown, never decisive; the step ratio is descriptive (an interpolating step
# with a normalised branch shrinks its steps by construction).
CONTRACTION_MARGIN = 0.0  # the paper's bound is the claim itself: a rate below 1


def product_rate(norm: float, steps: int) -> float:
    """The growth rate per step of a k-step Jacobian product: ||J_{t+k-1} ... J_t||_2 ** (1 / k)."""
    if steps < 1 or not norm >= 0:
        raise ValueError(f"a product over {steps} steps with norm {norm}: need steps >= 1 and a norm >= 0")
    return norm ** (1.0 / steps)


def contraction(rate: Sequence[float] | None) -> Verdict:
    """Per seed, 1 minus the median (over samples) growth rate per step of the product of the
    step Jacobians over the late steps (``product_rate``), against CONTRACTION_MARGIN; "not
    testable" while the products are not measured."""
    return decide([1.0 - r for r in rate], CONTRACTION_MARGIN) if rate else \
        untestable("k-step Jacobian products not measured")


# 3. Minkowski dimension
DIMENSION_MARGIN = 0.05  # ours: the estimators' validated error on sets of known dimension;
# a smaller difference is not a measurement ("significantly higher" states no number)
# The estimator's resolution at the states a trajectory has (T + 1 = 17): the Koch curve after two
# refinements (exactly 17 vertices, dimension log 4 / log 3) against a 17-point straight line (1.0),
# each under the trajectories' protocol (fractal.trajectory_dimensions). Estimates closer than half
# the true difference cannot tell the Koch curve's dimension from a line's on 17 points
RESOLUTION_SHARE = 0.5  # of the true difference, log 4 / log 3 - 1 = 0.262


def resolves(koch: float, line: float) -> bool:
    """Whether the estimator tells the 17-vertex Koch curve (estimate ``koch``) from the 17-point
    line (``line``): their estimates at least RESOLUTION_SHARE of the true difference apart."""
    return koch - line >= RESOLUTION_SHARE * (math.log(4) / math.log(3) - 1.0)


def minkowski(frost: Sequence[float], baselines: dict[str, Sequence[float]],
              resolution: tuple[float, float] | None = None) -> Verdict:
    """frost's box dimension minus each baseline's (vanilla, basic_ssm), on the seed means of
    separate runs (Welch), against DIMENSION_MARGIN ("significantly higher"): one part a baseline.
    ``resolution``: (Koch, line) estimates at the trajectories' number of states; where the estimator
    does not resolve them (``resolves``) the claim is not testable, both estimates named."""
    if resolution is not None and not resolves(*resolution):
        return untestable(f"17 states do not resolve it: the estimator reads the Koch curve's 17 vertices "
                          f"{resolution[0]:.2f} and a 17-point line {resolution[1]:.2f}")
    return combine([decide_between(frost, b, DIMENSION_MARGIN) for b in baselines.values()])


def minkowski_protocols(per_protocol: dict[str, str]) -> Verdict:
    """``minkowski`` under each protocol of experiment 3(d): the same verdict under every
    protocol -> that verdict; else "protocol-dependent" (the paper gives no protocol, and picking
    the one that agrees would be a choice made after seeing the numbers)."""
    verdicts = list(per_protocol.values())
    return verdicts[0] if len(set(verdicts)) == 1 else Verdict(PROTOCOL_DEPENDENT)


# 4. Figure 1: alpha falls, recovers, stays below 1. A minimum is at or below both the start
# and the end by definition, so "drops" and "recovers" need margins; both are ours:
ALPHA_FALL = 0.05  # ours: the minimum at least this far below the start (a tenth of alpha's 0.5 start)
ALPHA_RECOVERY = 0.25  # ours: the end at least this share of the fall above the minimum
# cosine decay to zero: at a fraction f of training the step size is (1 + cos(pi f)) / 2 of its
# peak; a minimum reached after half of training leaves too little step size to recover
ALPHA_RECOVERY_BY = 0.5


def alpha(start: Sequence[float], low: Sequence[float], end: Sequence[float], high: Sequence[float],
          low_at: Sequence[float], alpha_param: str) -> Verdict:
    """Three parts, per seed: (a) start - min above ALPHA_FALL; (b) end - min above ALPHA_RECOVERY of the
    fall, testable only when every minimum comes before ALPHA_RECOVERY_BY of training (the learning rate
    decays to zero); (c) max below 1, testable only when alpha's map can exceed 1 (not "sigmoid")."""
    fall = decide(by_seed(start, low), ALPHA_FALL)
    recovery = (untestable(f"alpha's minimum at {max(low_at):.0%} of training, under a learning rate "
                           "decaying to 0") if max(low_at) > ALPHA_RECOVERY_BY else
                decide([e - m - ALPHA_RECOVERY * (s - m) for s, m, e in zip(start, low, end)]))
    below = untestable("alpha = sigmoid(.) < 1 by construction") if alpha_param == "sigmoid" \
        else decide([1.0 - h for h in high])
    return combine([fall, recovery, below])


# 5. H sweep
HURST_ALPHA_MARGIN = 0.0  # the paper states no margin: alpha at the smallest H above every other H's


def hurst(alpha_by_h: dict[float, Sequence[float]], learned_h: Sequence[float] | None,
          hurst_param: str | None) -> Verdict:
    """Two parts: (a) per seed, the final alpha at the smallest fixed H minus the largest at any other H,
    against HURST_ALPHA_MARGIN ("small H drives alpha up"); (b) per seed, the learned H minus 1, against 0
    ("runs away above 1"), testable only with ``hurst_param="free"`` (a sigmoid H cannot leave (0, 1))."""
    hs = sorted(alpha_by_h)
    small = combine([decide_between(alpha_by_h[hs[0]], alpha_by_h[h], HURST_ALPHA_MARGIN) for h in hs[1:]])
    runaway = (untestable("no learnable-H run") if not learned_h else
               decide([h - 1.0 for h in learned_h]) if hurst_param == "free" else
               untestable(f"learnable H is {hurst_param}(.), inside (0, 1) by construction"))
    return combine([small, runaway])


# 6. Loss ablation (the paper's on CIFAR-100)
RANK_NARROW = 0.0  # the paper states no width: L_rel alone's easy - hard score gap below both losses'
# "L_abs alone collapses (scores saturate at once, accuracy falls)": collapse as halting_rules
# defines it for claim 8 (accuracy below COLLAPSE_ACCURACY_RATIO of the reference's, here both
# losses' at the same strength), or scores saturating:
COLLAPSE_GAP = COLLAPSE_ACCURACY_RATIO  # ours: an easy - hard gap below this share of both losses'


def loss_ablation(both_gap: Sequence[float], both_accuracy: Sequence[float], rel_gap: Sequence[float] | None,
                  abs_gap: Sequence[float] | None, abs_accuracy: Sequence[float] | None) -> Verdict:
    """Two parts against both losses at the same lambda_abs (equal strength, or the comparison
    measures the strength): (a) per seed, both's gap minus L_rel alone's, against RANK_NARROW;
    (b) per seed, how far L_abs alone passes the collapse line (the larger of its accuracy below
    COLLAPSE_ACCURACY_RATIO of both's and its gap below COLLAPSE_GAP of both's), against 0."""
    narrow = decide_between(both_gap, rel_gap, RANK_NARROW) if rel_gap else untestable("no L_rel-only run")
    collapse_ = (decide([max(COLLAPSE_ACCURACY_RATIO - aa / ba, COLLAPSE_GAP * bg - ag)
                         for ba, aa, bg, ag in zip(both_accuracy, abs_accuracy, both_gap, abs_gap)])
                 if abs_gap else untestable("no L_abs-only run at the strength of both losses"))
    return combine([narrow, collapse_])


# 7. Appendix D: gradient conflict ("positive for FROST, negative for the baselines")
CONFLICT_MARGIN = 0.0  # the sign is the claim


def gradient_conflict(frost: Sequence[float], baselines: dict[str, Sequence[float]]) -> Verdict:
    """Two parts: (a) per seed, frost's task-ranking gradient cosine above CONFLICT_MARGIN (the gradients
    agree); (b) per baseline, minus its cosine above CONFLICT_MARGIN on its own seeds (every baseline's
    conflict). One part holding is "partly reproduced"."""
    return combine([decide(frost, CONFLICT_MARGIN),
                    combine([decide([-c for c in v], CONFLICT_MARGIN) for v in baselines.values()])])


# 8. Appendix D: training the non-fractal baselines with the ranking losses "consistently resulted
# in unstable training and frequent collapse". Collapse as halting_rules defines it, fixed before
# any run: full-depth accuracy below COLLAPSE_ACCURACY_RATIO of the task-only twin's, or more than
# COLLAPSE_ONE_STEP_SHARE exit at one step. "Unstable training" is not measured.
COLLAPSE_FREQUENT = 0.5  # ours: "frequent" states no number; more than half of a baseline's seeds


def collapse_score(accuracy: float, reference_accuracy: float, one_step_share: float) -> float:
    """How far one run passes the collapse line (positive: collapsed)."""
    return max(COLLAPSE_ACCURACY_RATIO - accuracy / reference_accuracy, one_step_share - COLLAPSE_ONE_STEP_SHARE)


def collapse(scores: dict[str, Sequence[float]]) -> Verdict:
    """Per baseline ("consistently": every one), whether more than COLLAPSE_FREQUENT of its
    seeds collapse (``collapse_score`` > 0; "frequent"): every baseline -> reproduced, none -> not
    reproduced, some -> partly; a baseline on fewer than MIN_SEEDS seeds only suggests."""
    frequent = lambda runs: sum(s > 0 for s in runs) / len(runs) > COLLAPSE_FREQUENT
    return combine([untestable("no runs") if not runs else
                    suggested(len(runs), frequent(runs)) if len(runs) < MIN_SEEDS else
                    Verdict(REPRODUCED if frequent(runs) else NOT, len(runs)) for runs in scores.values()])


# 9, 10. Table 2: accuracy kept at q and at the paper's depths
KEPT_CLOSE = 0.05  # ours: the paper reports one run without a spread; a share of full-depth
# accuracy 5 points below its own still reads as the same halting curve
KEPT_SHOWN = (0.25, 0.5)
PAPER_KEPT = dict(zip(paper.TABLE2["quantile"], KEPT_AT.values()))  # Table 2's share kept, by quantile
PAPER_DEPTH = dict(zip(paper.TABLE2["quantile"], paper.TABLE2["mean_depth"]))


def kept(shares: dict[float, Sequence[float]], image_half: dict[float, float] | None = None) -> Verdict:
    """Per quantile shown (KEPT_SHOWN) and seed, our share of full-depth accuracy minus the
    paper's, against -KEPT_CLOSE; every quantile must hold. ``image_half``: per quantile, the test
    images' bootstrap half-width of the seed mean (``decide``), where it was measured."""
    return combine([decide([s - PAPER_KEPT[q] for s in shares[q]], -KEPT_CLOSE,
                           (image_half or {}).get(q, 0.0)) for q in KEPT_SHOWN])


# 11, 12. Table 3: cost ratios to vanilla (deterministic or benchmark numbers)
RATIO_CLOSE, RATIO_NEAR = 0.2, 0.5  # ours: relative error of our ratio against the paper's; the
# blocks are rebuilt from the text (no code), so their per-step costs differ by a few tens of percent


def ratio(errors: Sequence[float]) -> Verdict:
    """The largest relative error over the non-vanilla rows: within RATIO_CLOSE -> reproduced;
    within RATIO_NEAR -> partly; else -> not."""
    worst_ = max(abs(e) for e in errors)
    return Verdict(REPRODUCED if worst_ <= RATIO_CLOSE else PARTLY if worst_ <= RATIO_NEAR else NOT)


GPU_TABLE = "bench_table3_regime_cuda"  # benchmarks/table3_regime.py --device cuda --metrics


def throughput(errors: Sequence[float], device: str) -> Verdict:
    """Claim 12 at one batch size: ``ratio`` of a GPU's measurement. The paper's throughput ratios
    follow its mean depths as an overhead-bound device's do (benchmarks/table3_regime.py); a CPU's
    are compute-bound, so they decide nothing."""
    return ratio(errors) if device.startswith("cuda") else untestable(
        f"measured on a {device.upper() or 'unnamed device'} only; needs a GPU's "
        f"outputs/metrics/{GPU_TABLE}.json")


def throughput_batches(errors_by_batch: dict[int, Sequence[float]], device: str) -> Verdict:
    """Claim 12 over every batch size measured, each its own part (``throughput``; ``combine``): the
    paper does not state its batch size, so none is chosen, and the order of the rows decides nothing."""
    return combine([throughput(errors_by_batch[b], device) for b in sorted(errors_by_batch)])


# 13. Table 3: ViT frost exits earlier
VIT_DEPTH_CLOSE = 1.0  # ours: steps, ours within this of the paper's mean depth (as the same share
# of T); the paper's own spread of the depth is 2.34 steps
VIT_EARLIER = 0.0  # the paper states no margin: ViT's depth / T below ResNet's
VIT_QUANTILE = 0.5  # the quantile read (the paper does not say which one Table 3 used)


def vit_depth(vit_depth_: Sequence[float], vit_steps: int, vit_fraction: Sequence[float],
              resnet_fraction: Sequence[float]) -> Verdict:
    """Two parts per seed: (a) VIT_DEPTH_CLOSE minus the distance of the ViT frost's mean depth
    from the paper's (as the same share of its T), against 0; (b) ResNet's depth / T minus ViT's (separate models: Welch),
    against VIT_EARLIER."""
    target = paper.table3_frost_depth("vit")["depth_fraction"] * vit_steps
    return combine([decide([VIT_DEPTH_CLOSE - abs(d - target) for d in vit_depth_]),
                    decide_between(resnet_fraction, vit_fraction, VIT_EARLIER)])


# 14 (ours). Halting beats a fixed depth
FIXED_GAIN = 0.005  # ours: half a point of accuracy above a fixed depth at the same mean depth,
# what a halting rule must add to be worth its calibration


def fixed_depth(gain: Sequence[float], image_half: float = 0.0) -> Verdict:
    """Per seed, the mean over q < 1 of (accuracy at q - fixed-depth accuracy at that mean
    depth), against FIXED_GAIN (``image_half``: as in ``decide``)."""
    return decide(gain, FIXED_GAIN, image_half)


# 15 (ours). FROST's score against the other halting rules
AREA_TIE = 0.005  # ours: areas under accuracy-depth closer than this are a tie (half a point)
# FROST's rivals are the rules one could run: never FROST itself nor one of halting_rules.REFERENCES,
# curves that are no rule of their own (the fixed depth is claim 14's comparison; the oracle needs the
# label; the hindsight exit needs the final step's prediction)


def rivals(areas: dict[str, float]) -> dict[str, float]:
    """rule -> area of FROST's rivals among ``areas`` (rule -> area of one model)."""
    return {rule: a for rule, a in areas.items() if rule != FROST and rule not in REFERENCES}


def best_rival(areas: dict[str, float]) -> tuple[str, float]:
    """(rule, area) of FROST's best rival among ``areas`` (``rivals``); the first named in a tie."""
    if not (found := rivals(areas)):
        raise ValueError(f"no rival among {sorted(areas)}: the references {REFERENCES} are none")
    return max(found.items(), key=lambda kv: kv[1])


def halting_rules(own: Sequence[float], best_other: Sequence[float], image_half: float = 0.0) -> Verdict:
    """Per seed, the area of FROST's rule minus its best rival's (``best_rival``; each the mean
    accuracy over the mean depths every rule of the model reaches, never extended), against -AREA_TIE
    (at least as good, within a tie). Both are the same run read two ways: a real pair (by seed);
    ``image_half``, the test images' bootstrap half-width of the mean difference."""
    return decide(by_seed(own, best_other), -AREA_TIE, image_half)


HEAD_MARGIN = 0.01  # ours, fixed before the refit ran: area of the correctness head above the
# better of fixed depth and confidence


def head_refit(margin: Sequence[float]) -> Verdict:
    """Per frozen backbone, the best linear halting head's area (trained on "this step is
    correct") minus the better of fixed depth's and confidence's, against HEAD_MARGIN: can any
    learned score beat them on these backbones?"""
    return decide(margin, HEAD_MARGIN)


# 16 (ours). Beyond the paper: the variant's halting (docs/method.md section 14; notebook 08). Its
# targets were restated after the first decision (docs/method.md section 14 records both): each on
# the mean over the budgets, never the minimum; full depth a guard, not a part
VARIANT_QUANTILES = (0.25, 0.375, 0.5, 0.625, 0.75, 0.875)  # the budgets: quantiles of its own score
VARIANT_RANKING = 0.0  # ours: its exits beat random exits of the same depths (the ranking term above 0)
VARIANT_STEPS_SAVED = 0.0  # ours: fewer mean steps than its fixed depth to come within WITHIN of full depth
VARIANT_CLOSED = 0.5  # ours: at least half of the fixed-depth-to-hindsight-exit gap in area
VARIANT_FULL_DEPTH = 0.01  # ours: the guard, full-depth accuracy at most one point below FROST's of the seed


def variant(ranking: Sequence[float], steps_saved: Sequence[float], closed: Sequence[float],
            full_depth: Sequence[float], frost_full_depth: Sequence[float], same_runs: bool = False) -> Verdict:
    """Three parts, each per seed: the ranking term (accuracy - random exits of its depths), mean over
    VARIANT_QUANTILES, above VARIANT_RANKING; the mean steps a fixed depth needs to come within
    halting_rules.WITHIN of full-depth accuracy minus the rule's, above VARIANT_STEPS_SAVED; the share of the
    fixed-depth-to-hindsight-exit gap in area closed over mean depths up to the hindsight exit's full-accuracy
    depth, above VARIANT_CLOSED. Guard: full-depth accuracy minus FROST's above -VARIANT_FULL_DEPTH: Welch's
    on separate runs, by seed where ``same_runs`` (a rule of ours read on FROST's own models)."""
    guard = (decide(by_seed(full_depth, frost_full_depth), -VARIANT_FULL_DEPTH) if same_runs else
             decide_between(full_depth, frost_full_depth, -VARIANT_FULL_DEPTH))
    return combine([decide(ranking, VARIANT_RANKING), decide(steps_saved, VARIANT_STEPS_SAVED),
                    decide(closed, VARIANT_CLOSED)], guard=guard)


# 19 (ours, after Raptor). The block-recurrent rewrite of the trained vanilla (docs/method.md section 16;
# notebook 10). Raptor (Jacobs et al., "Block-Recurrent Dynamics in Vision Transformers", arXiv
# 2512.19941) recovers 96% of DINOv2's ImageNet-1k linear-probe accuracy with 2 blocks (its abstract,
# ../shared/papers/raptor-abstract.txt). Theirs is a linear probe on a distilled ViT's features, ours
# the student's own classifier against its teacher's: the claim is after Raptor's, not Raptor's number
RECOVERED_MARGIN = 0.96  # the abstract's share at k = 2
# Raptor's premise: the teacher's step similarity shows contiguous phases. Here the phases are the
# ranges chosen by analysis.block_recurrent's search; they are "absent" where the chosen ranges' score
# exceeds equal ranges' by less than PHASE_MARGIN (relative) on at least PHASE_TEACHERS teachers
PHASE_MARGIN = 0.05  # ours: a 5% better score than equal ranges is structure a search found
PHASE_TEACHERS = 2


def phase_structure(chosen: Sequence[float], equal: Sequence[float]) -> bool:
    """Whether the teachers show phases: per teacher the chosen ranges' score over equal ranges' (the
    search's objective, higher is better), at least 1 + PHASE_MARGIN on more than
    len - PHASE_TEACHERS of them (absent when PHASE_TEACHERS or more fall short)."""
    return sum(c < (1 + PHASE_MARGIN) * e for c, e in zip(chosen, equal, strict=True)) < PHASE_TEACHERS


def block_recurrent(recovered: Sequence[float], chosen: Sequence[float] | None = None,
                    equal: Sequence[float] | None = None) -> Verdict:
    """Per teacher seed, the k = 2 student's test accuracy over its vanilla teacher's (accuracy
    recovered; the student is distilled from that teacher: a real pair), against RECOVERED_MARGIN.
    Its premise first: with the range scores (``chosen``, ``equal``, per teacher) and no phase
    structure (``phase_structure``), the claim is not testable here, with the numbers."""
    if chosen is not None and equal is not None and not phase_structure(chosen, equal):
        shown = ", ".join(f"{c:.2f} vs {e:.2f}" for c, e in zip(chosen, equal))
        return untestable(f"no phase structure here (chosen vs equal ranges' score per teacher: {shown})")
    return decide(recovered, RECOVERED_MARGIN)


# 20-22 (the sources' system, DF-Mamba: Fang, Sun and Zhou, "Dynamic Fractal Mamba", ICML 2026;
# docs/df-mamba.md; notebook 11), on ETTh2 (the paper's ablations and zero-shot table are on ETTm2,
# which is not here). Fixed before any DF-Mamba result. An MSE is lower-is-better: each rule orients it
CANNOT_TELL = "cannot tell"
HOLDS, REVERSED, NOT_SHOWN = "holds", "reversed", "not shown"
_ORIENTED = {REPRODUCED: HOLDS, NOT: REVERSED, INCONCLUSIVE: NOT_SHOWN}  # claims 21 and 22's words for a side
_oriented = lambda v: Verdict(_ORIENTED[v.status], v.seeds, v.reasons) if v.status in _ORIENTED else v
FORECAST_CLOSE = 0.02  # ours: our mean MSE at most this above the paper's reads as its number


def forecast_against_paper(mse: Sequence[float], paper_mse: float,
                           bootstrap: tuple[float, float] | None = None) -> Verdict:
    """Claim 20, ours against the paper at one horizon: "reproduced" where the 95% interval of our mean
    MSE lies wholly below the paper's + FORECAST_CLOSE, "not reproduced" where wholly above it, else
    "cannot tell". The interval: over 3+ seeds Student's t; over one, ``bootstrap``, the (mean, half-width)
    of ``analysis.stats.block_bootstrap`` over that run's per-window MSEs (test windows overlap: blocks of
    them are resampled; notebook 11 computes it, its metrics keep it); none without it."""
    v = _finite_values(mse)
    if not v:
        return untestable("no runs")
    if len(v) >= MIN_SEEDS:
        mean, half = interval(v)
    elif len(v) == 1 and bootstrap is not None:
        mean, half = bootstrap
    else:
        return untestable("1 seed without its test windows' bootstrap: no interval" if len(v) == 1 else
                          f"{len(v)} seeds: no interval under {MIN_SEEDS}")
    d = paper_mse + FORECAST_CLOSE - mean
    return Verdict(CANNOT_TELL if abs(d) <= half else REPRODUCED if d > 0 else NOT, len(v))


def forecast_against_baseline(dfmamba: Sequence[float], baseline: Sequence[float]) -> Verdict:
    """Claim 20, DF-Mamba against one of our baselines at one horizon (separate runs): baseline MSE minus
    DF-Mamba's by Welch's interval against 0 (reproduced: DF-Mamba lower); fewer than MIN_SEEDS a side:
    suggested."""
    return decide_between(baseline, dfmamba)


def ablation(variant_mse: Sequence[float], full_mse: Sequence[float]) -> Verdict:
    """Claim 21 (Table 2's S3: no sharing; T3: no 2^k step), one variant against the full model, each over
    its seeds: "holds" where Welch's 95% interval of variant minus full MSE lies wholly above 0,
    "reversed" wholly below, "not shown" otherwise; with fewer than MIN_SEEDS a side, suggested."""
    return _oriented(decide_between(variant_mse, full_mse))


def zero_shot(dfmamba_ratio: Sequence[float], baselines: dict[str, Sequence[float]]) -> Verdict:
    """Claim 22 (Table 14): r = MSE at inputs coarsened x4 over MSE at the native scale, per seed;
    "holds" where Welch's interval of r_DF-Mamba minus r_baseline lies wholly below 0 for every baseline
    (each a part; DLinear and RLinear together; the flat stack S2 in a row of its own)."""
    return _oriented(combine([decide_between(r, dfmamba_ratio) for r in baselines.values()]))


# Benchmarks beside the tables (ours)
SPEED_CLOSE, SPEED_NEAR = 0.9, 0.75  # ours: measured / ideal speed-up
KLL_CHEAP, KLL_NOTICEABLE = 0.01, 0.05  # ours: share of a training step


def speed(worst_ratio: float) -> Verdict:
    return Verdict(REPRODUCED if worst_ratio >= SPEED_CLOSE else PARTLY if worst_ratio >= SPEED_NEAR else NOT)


def kll_overhead(share: float) -> Verdict:
    return Verdict(REPRODUCED if share < KLL_CHEAP else PARTLY if share < KLL_NOTICEABLE else NOT)


_VIT, _RESNET = paper.table3_frost_depth("vit"), paper.table3_frost_depth("resnet")
NO_CLAIM = "no such claim in the paper"
CLAIMS = (
    Claim(1, "Table 1 scale-consistency", f"FROST's GAP(h_t) is close to GAP(h_T) early "
          f"({TABLE1_AT['frost']} at t = {TABLE1_STEP}), basic_ssm's is not "
          f"({TABLE1_AT['basic_ssm']})",
          f"frost - basic_ssm cosine at t = {TABLE1_STEP} > 0 (Welch's 95% interval of the seed means)"),
    Claim(2, "Appendix B contraction", "products of step Jacobians are bounded by kappa^t, kappa < 1",
          "growth rate per step of the late steps' Jacobian product < 1 (one-step norm shown, not deciding)"),
    Claim(3, "Minkowski dimension", f"vanilla and basic_ssm close to the Koch curve's "
          f"{paper.KOCH_DIMENSION:.2f}, FROST significantly higher",
          f"frost - each baseline > {DIMENSION_MARGIN} (ours: the estimators' error; Welch), where the "
          "estimator resolves the Koch curve from a line at 17 states"),
    Claim(4, "Figure 1 alpha", "alpha first drops, then recovers, and stays below 1",
          f"fall > {ALPHA_FALL}; recovery > {ALPHA_RECOVERY} of the fall (both ours); max < 1"),
    Claim(5, "H sweep", "a small H drives alpha up; a learnable H runs away above 1",
          "alpha at the smallest H above the others'; learned H > 1"),
    Claim(6, "Loss ablation", "L_rel alone compresses the scores into a narrow band; L_abs alone "
          "collapses", f"gap narrower than both losses'; L_abs at equal strength: accuracy or gap below "
          f"{COLLAPSE_GAP} of both's (ours)"),
    Claim(7, "Gradient conflict", "task and ranking gradients agree for FROST, conflict for the baselines",
          "frost's cosine > 0; every baseline's < 0 (two parts)"),
    Claim(8, "Collapse of the baselines", "with the ranking loss the baselines \"consistently resulted in "
          "unstable training and frequent collapse\" (appendix D)",
          f"every baseline collapses (accuracy < {COLLAPSE_ACCURACY_RATIO} x task-only, or > "
          f"{COLLAPSE_ONE_STEP_SHARE} exit at one step) on more than {COLLAPSE_FREQUENT:.0%} of its seeds (ours)"),
    Claim(9, "Table 2 accuracy kept at q", "the halting sweep of Table 2 (paper.TABLE2)",
          f"share of full-depth accuracy at q = 0.25, 0.5 at most {KEPT_CLOSE} below the paper's (ours)"),
    Claim(10, "Table 2 at the paper's depths", "the same sweep, read at the paper's mean depths",
          f"share kept at those depths at most {KEPT_CLOSE} below the paper's (ours)"),
    Claim(11, "Table 3 GFLOPs", "GFLOPs per image at the mean depth",
          f"every family's ratio to vanilla within {RATIO_CLOSE} (ours)"),
    Claim(12, "Table 3 throughput", "images/s", f"ratios to vanilla within {RATIO_CLOSE} (ours), on a GPU"),
    Claim(13, "ViT exits earlier (Table 3 depths)", f"ViT frost exits at {_VIT['mean_depth']} of {_VIT['steps']} "
          f"steps, ResNet's at {_RESNET['mean_depth']} of {_RESNET['steps']}",
          f"depth within {VIT_DEPTH_CLOSE} step (ours); depth / T below ResNet's"),
    Claim(14, "Halting beats a fixed depth (ours)", NO_CLAIM, f"mean gain over q < 1 above {FIXED_GAIN}"),
    Claim(15, "FROST's score against other halting rules (ours)", NO_CLAIM, f"area within {AREA_TIE} "
          "of its best rival (a rule one can run; fixed depth, oracle and hindsight exit are references)"),
    Claim(16, "Beyond the paper: a variant's halting beats a fixed depth (ours)", NO_CLAIM,
          f"mean over q = {VARIANT_QUANTILES[0]:g}..{VARIANT_QUANTILES[-1]:g}: ranking above random exits of its "
          f"depths; fewer steps than its fixed depth to come within half a point of full depth; closes > "
          f"{VARIANT_CLOSED:g} of its fixed-depth-to-hindsight-exit area gap (three parts); guard: full "
          f"depth within {VARIANT_FULL_DEPTH} of FROST's"),
)
# beside the 16, in docs/results.md only: the benchmarks of our adaptive inference
BENCHMARK_CLAIMS = (
    Claim(17, "Adaptive inference speed-up (ours)", NO_CLAIM,
          f"measured / ideal speed-up at least {SPEED_CLOSE}"),
    Claim(18, "KLL threshold cost (ours)", NO_CLAIM, f"sketch updates below {KLL_CHEAP} of a training step"),
)
# and after them, in docs/results.md only: claims of ours that test the paper's premise after another paper
EXTENSION_CLAIMS = (
    Claim(19, "Block-recurrent rewrite: k = 2 recovers its teacher (ours, after Raptor)",
          f"{NO_CLAIM}; Raptor's 2 blocks recover {RECOVERED_MARGIN:.0%} of DINOv2's linear-probe accuracy "
          "(its abstract)",
          f"k = 2 student's test accuracy / its vanilla teacher's above {RECOVERED_MARGIN}, per teacher "
          f"seed, where the teachers show phases (chosen ranges at least {PHASE_MARGIN:.0%} above equal)"),
)
# DF-Mamba's, after FROST's: claim 20 is a row of the README's table, 21 and 22 of docs/results.md's
_DF, _T2, _T14 = paper.DFMAMBA_TABLE1_ETTH2, paper.DFMAMBA_TABLE2_ETTM2, paper.DFMAMBA_TABLE14_ETTM2
DFMAMBA_CLAIMS = (
    Claim(20, "DF-Mamba Table 1 (ETTh2)", "DF-Mamba-TS MSE " + " / ".join(
          f"{_DF['dfmamba'][h][0]:.3f}" for h in paper.DFMAMBA_HORIZONS) + " at horizons "
          + " / ".join(map(str, paper.DFMAMBA_HORIZONS)) + ", below DLinear's and RLinear's",
          f"our mean MSE within {FORECAST_CLOSE} of the paper's (95% interval; t over seeds, else a moving-block "
          "bootstrap of the test windows); below our DLinear and RLinear (Welch)"),
    Claim(21, "DF-Mamba Table 2: sharing and the 2^k step (ETTh2)", f"unshared levels (S3) {_T2['S3'][0]:.3f} and a "
          f"constant step (T3) {_T2['T3'][0]} against the full model's {_T2['full'][0]} (ETTm2, horizon 96)",
          "variant minus full MSE, Welch's 95% interval wholly above 0: holds; wholly below: reversed"),
    Claim(22, "DF-Mamba Table 14: zero-shot coarser inputs (ETTh2)", f"MSE x4 / native {_T14['dfmamba'][4]} / "
          f"{_T14['dfmamba'][1]} against Affirm's {_T14['affirm'][4]} / {_T14['affirm'][1]} (ETTm2)",
          "r = MSE(x4) / MSE(native): r_DF-Mamba - r_baseline wholly below 0 (Welch) for DLinear and RLinear"),
)
CLAIM = {c.number: c for c in CLAIMS + BENCHMARK_CLAIMS + EXTENSION_CLAIMS + DFMAMBA_CLAIMS}
