"""The rules of frost_nb.repro.claims: the seed rule (a 95% t interval), verdicts carrying their
seeds as data, and every claim's rule decided right on both sides of its margin (a flip test:
one case where the claim holds, one where it does not)."""

import math

import numpy as np
import pytest
from scipy import stats

from frost_nb import paper
from frost_nb.analysis.stats import image_bootstrap
from frost_nb.repro import claims as C

R, N, P, I = C.REPRODUCED, C.NOT, C.PARTLY, C.INCONCLUSIVE
UP, DOWN = [0.10, 0.11, 0.12], [-0.10, -0.11, -0.12]


# ---------------------------------------------------------------------------------------- the seed rule
def test_the_interval_is_students_t_at_95_percent():
    values = [0.042, 0.089, 0.097]  # claim 1's per-seed gaps on CIFAR-100
    mean, half = C.interval(values)
    assert mean == pytest.approx(0.076, abs=5e-4)
    assert half == pytest.approx(4.3027 * np.std(values, ddof=1) / math.sqrt(3), rel=1e-4)  # t(0.975, 2)
    low, high = stats.t.interval(0.95, 2, loc=np.mean(values), scale=stats.sem(values))
    assert (mean - half, mean + half) == pytest.approx((low, high))
    with pytest.raises(ValueError, match="two values"):
        C.interval([0.1])


def test_welch_is_scipys_unequal_variance_interval():
    a, b = [0.91, 0.87, 0.89], [0.80, 0.86, 0.77]
    diff, half = C.welch(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (diff - half, diff + half) == pytest.approx((ref.low, ref.high))
    assert C.welch([0.5, 0.5], [0.4, 0.4]) == (pytest.approx(0.1), 0.0)  # no spread on either side
    with pytest.raises(ValueError, match="two values or more a side"):
        C.welch([0.1], [0.2, 0.3])


def test_separately_trained_models_are_decided_unpaired():
    """Claim 1's demo seeds (frost - basic_ssm cosine): seed i of one is no pair of seed i of the other.
    Flip: a pairing that puts frost's best seed against basic_ssm's best spans 0 by seed; the seed means'
    Welch interval, the same for every pairing, does not."""
    frost, basic = [0.842, 0.874, 0.905], [0.800, 0.785, 0.816]
    pairings = [[f - b for f, b in zip(frost, perm)] for perm in
                ([0.800, 0.785, 0.816], [0.785, 0.800, 0.816], [0.816, 0.785, 0.800])]
    assert {C.decide(p).status for p in pairings} == {R, I}  # the arbitrary pairing decides
    assert C.decide_between(frost, basic) == R == C.table1(frost, basic)
    assert C.decide_between(basic, frost) == N and C.decide_between(frost, basic, 0.2) == N
    assert C.decide_between([0.9, 0.7, 0.8], basic) == I  # a wide side: Welch spans 0
    assert C.decide_between(frost, basic[:1]) == "suggested (1 seed)"


def test_the_test_images_widen_an_interval():
    """A seed mean's interval adds the test images' bootstrap half-width in quadrature; where one model
    decides, the images alone decide between suggested and inconclusive. Flip: 0.0006 past a margin is
    "reproduced" on seeds that agree, "inconclusive" once 10,000 images' noise (about 0.01) is added."""
    assert C.with_images(0.03, 0.04) == pytest.approx(0.05)
    close = [-0.0494 + 0.05 + d for d in (0.0002, 0.0006, 0.0010)]  # means 0.0006 above the margin
    assert C.decide(close) == R and C.decide(close, image_half=0.01) == I
    assert C.decide([0.02], image_half=0.01) == "suggested (1 seed)"
    assert C.decide([0.005], image_half=0.01) == "inconclusive (test images) (1 seed)"
    assert C.decide([-0.02], image_half=0.01) == "not suggested (1 seed)"
    assert C.combine([C.decide([0.005], image_half=0.01), C.decide([0.3])]).status == C.IMAGE_NOISE
    # defect: a part on three seeds left open (or partly holding) beside one suggested on one seed read as
    # the test images' noise, which no part measured; it reads as that part does
    open_ = C.decide([-0.1, 0.0, 0.1])
    partly = C.combine([C.decide([0.2, 0.21, 0.22]), C.decide([-0.22, -0.21, -0.2])])
    assert (open_.status, partly.status) == (C.INCONCLUSIVE, C.PARTLY)
    assert C.combine([open_, C.decide([0.2])]).status == C.INCONCLUSIVE
    assert C.combine([partly, C.decide([0.2])]).status == C.PARTLY


def test_the_image_bootstrap_of_an_accuracy_is_the_binomial_interval():
    rng = np.random.default_rng(1)
    correct = rng.random(10000) < 0.5
    value, half = image_bootstrap(lambda idx: correct[idx].mean(), len(correct))
    assert value == correct.mean()
    assert half == pytest.approx(1.96 * math.sqrt(0.25 / 10000), rel=0.08)  # 0.0098
    # a seed mean resamples the same images for every seed: two identical seeds, no narrower interval
    joint = image_bootstrap(lambda idx: (correct[idx].mean() + correct[idx].mean()) / 2, 10000)
    assert joint[1] == pytest.approx(half, rel=1e-9)


def test_claim_3_is_not_testable_where_17_states_do_not_resolve_the_koch_curve():
    """Flip: estimates 1.05 (Koch) and 1.00 (line) are 0.05 apart, under half of 0.26 -> not testable,
    both named; 1.20 and 1.00 resolve -> the Welch rule decides."""
    frost, base = [1.40, 1.42, 1.41], {"vanilla": [1.0, 1.01, 0.99], "basic_ssm": [1.1, 1.12, 1.08]}
    assert C.minkowski(frost, base) == R
    blind = C.minkowski(frost, base, (1.05, 1.00))
    assert blind.status == C.NOT_TESTABLE and "17 states do not resolve it" in blind and "1.05" in blind
    assert C.minkowski(frost, base, (1.20, 1.00)) == R
    assert C.resolves(1.14, 1.0) and not C.resolves(1.13, 1.0)  # half of log 4 / log 3 - 1 = 0.131
    # each baseline is its own part: above one and not the other is "partly"
    assert C.minkowski(frost, {"vanilla": [1.0, 1.01, 0.99], "basic_ssm": [1.6, 1.62, 1.61]}) == P


def test_claim_15_rivals_are_rules_one_can_run():
    """The fixed depth, the oracle and the hindsight exit are references, never rivals. Flip: KL 0.3261
    against the fixed depth 0.3265 (seed 1): with the fixed depth a rival it would be the best."""
    from frost_nb.analysis.halting_rules import FIXED, ORACLE, REFERENCES

    areas = {"frost": 0.28, "KL between steps": 0.3261, FIXED: 0.3265, ORACLE: 0.5, REFERENCES[-1]: 0.33}
    assert C.rivals(areas) == {"KL between steps": 0.3261}
    assert C.best_rival(areas) == ("KL between steps", 0.3261)
    with pytest.raises(ValueError, match="no rival"):
        C.best_rival({"frost": 0.3, FIXED: 0.3})


def test_decide_needs_three_seeds_and_the_whole_interval_past_the_margin():
    assert C.decide([0.3]) == "suggested (1 seed)" and C.decide([-0.3, -0.1]) == "not suggested (2 seeds)"
    assert C.decide(UP) == R and C.decide(DOWN) == N
    assert C.decide([0.10, -0.05, 0.02]) == I
    assert C.decide(UP, 0.2) == N and C.decide(UP, 0.05) == R
    # two standard errors (an 82% interval at 3 seeds) would call this reproduced; the t interval does not
    gaps = [0.042, 0.089, 0.097]
    se = np.std(gaps, ddof=1) / math.sqrt(3)
    assert np.mean(gaps) - 0.05 > 0 and np.mean(gaps) - 0.05 < 4.30 * se
    assert C.decide(gaps, 0.05) == I and C.decide(gaps) == R
    assert C.decide([]) == f"{C.NOT_TESTABLE}: no runs" and C.decide([float("nan")] * 3).status == C.NOT_TESTABLE


def test_verdicts_carry_their_seeds_as_data():
    v = C.decide([0.3, 0.2])
    assert (v.status, v.seeds, v.reasons) == (C.SUGGESTED, 2, ())
    why = C.untestable("no such run")
    both = C.combine([C.decide(UP), C.decide([0.2]), why])
    assert both == f"suggested (1 seed); {C.NOT_TESTABLE}: no such run"
    assert (both.status, both.seeds, both.reasons) == (C.SUGGESTED, 1, ("no such run",))
    # a verdict whose reason mentions seeds is not parsed back: its count comes from the data
    odd = C.untestable("the 2 seeds (of 5) were lost")
    assert C.combine([C.decide([0.1] * 4), odd]).seeds == 4
    assert C.combine([C.combine([C.decide(UP), C.decide(DOWN)]), C.decide(UP)]) == P
    assert C.combine([why]).status == C.NOT_TESTABLE and C.combine([why]) == f"{C.NOT_TESTABLE}: no such run"


def test_combine_is_a_conjunction_of_parts():
    assert C.combine([C.decide(UP), C.decide(UP)]) == R
    assert C.combine([C.decide(UP), C.decide(DOWN)]) == P
    assert C.combine([C.decide(DOWN), C.decide([0.10, -0.05, 0.02])]) == N  # a part fails, none holds
    assert C.combine([C.decide(UP), C.decide([0.10, -0.05, 0.02])]) == I
    assert C.combine([C.decide(UP), C.decide([-0.3])]) == "not suggested (1 seed)"


# ---------------------------------------------------------------------------------------- one flip test per rule
def test_claim_1_frost_against_basic_ssm_alone():
    basic = [0.80, 0.79, 0.81]
    assert C.table1([0.842, 0.879, 0.907], basic) == R  # CIFAR-100's gaps (0.042 / 0.089 / 0.097)
    assert C.table1([0.75, 0.76, 0.74], basic) == N
    assert C.table1([0.93], [0.81]) == "suggested (1 seed)"  # one seed only suggests
    assert C.TABLE1_MARGIN == 0  # the paper states none


def test_claim_1s_update_question_is_its_own_part():
    assert C.table1_update([0.45], [0.80]) == "not suggested (1 seed)"
    assert C.table1_update([0.85, 0.86, 0.84], [0.80, 0.79, 0.81]) == R
    assert C.table1_update([0.45, 0.5, 0.4], [0.80, 0.79, 0.81]) == N


def test_claim_2_reads_the_growth_rate_of_jacobian_products():
    assert C.product_rate(0.5 ** 8, 8) == pytest.approx(0.5)
    assert C.contraction([0.80, 0.82, 0.78]) == R
    assert C.contraction([1.05, 1.06, 1.04]) == N  # above 1, beyond the interval
    assert C.contraction([0.9, 1.1, 1.0]) == I
    v = C.contraction(None)
    assert v.status == C.NOT_TESTABLE and "not measured" in v
    with pytest.raises(ValueError):
        C.product_rate(1.0, 0)


def test_claim_3_minkowski_and_its_protocols():
    base = {"vanilla": [1.1, 1.1, 1.12], "basic_ssm": [1.0, 1.05, 1.02]}
    assert C.minkowski([1.3, 1.31, 1.29], base) == R and C.minkowski([1.0, 1.01, 1.0], base) == N
    assert C.minkowski_protocols({"a": R, "b": R}) == R
    assert C.minkowski_protocols({"a": R, "b": N}) == C.PROTOCOL_DEPENDENT


def test_claim_4_alpha():
    start, low, end, high = [0.5] * 3, [0.40, 0.41, 0.39], [0.45, 0.46, 0.44], [0.52, 0.5, 0.51]
    assert C.alpha(start, low, end, high, [0.3, 0.35, 0.4], "softplus") == R
    flat = [0.49] * 3  # no fall, no recovery, above 1: every part fails
    assert C.alpha(start, flat, flat, [1.2, 1.3, 1.1], [0.3, 0.35, 0.4], "softplus") == N
    assert C.alpha(start, low, end, [1.2, 1.21, 1.22], [0.3, 0.35, 0.4], "softplus") == P
    v = C.alpha(start, low, end, high, [0.7, 0.8, 0.9], "sigmoid")
    assert "decaying to 0" in v and "by construction" in v


def test_claim_5_hurst():
    alphas = {0.1: [0.7, 0.71, 0.72], 0.5: [0.5, 0.5, 0.51], 0.9: [0.4, 0.41, 0.4]}
    assert C.hurst(alphas, [1.5, 1.6, 1.4], "free") == R
    assert C.hurst({0.1: [0.4, 0.41, 0.4], 0.5: [0.6, 0.6, 0.61]}, [0.6, 0.7, 0.5], "free") == N
    assert C.NOT_TESTABLE in C.hurst(alphas, [0.99, 0.98, 0.97], "sigmoid")


def test_claim_6_loss_ablation():
    both, acc = [0.7, 0.7, 0.7], [0.87, 0.87, 0.87]
    assert C.loss_ablation(both, acc, [0.5, 0.5, 0.5], [0.7, 0.7, 0.7], [0.30, 0.31, 0.29]) == R  # accuracy halves
    assert C.loss_ablation(both, acc, [0.5, 0.5, 0.5], [0.7, 0.7, 0.7], [0.80, 0.81, 0.79]) == P  # falls, no collapse
    assert C.loss_ablation(both, acc, [0.8, 0.81, 0.8], [0.7, 0.7, 0.7], [0.9, 0.91, 0.9]) == N
    assert C.loss_ablation(both, acc, [0.5, 0.5, 0.5], [0.2, 0.2, 0.2], [0.88, 0.88, 0.88]) == R  # scores saturate


def test_claim_7_gradient_conflict_has_two_parts():
    assert C.gradient_conflict(UP, {"vanilla": DOWN, "basic_ssm": DOWN}) == R
    assert C.gradient_conflict(UP, {"vanilla": DOWN, "recurrent": UP}) == P  # one baseline agrees
    assert C.gradient_conflict(DOWN, {"vanilla": UP}) == N
    # digits at the defaults: frost positive on 3 of 3 seeds, recurrent too
    frost, base = [0.078, 0.167, 0.053], {"vanilla": [-0.086, -0.037, -0.033], "recurrent": [0.068, 0.153, 0.127],
                                          "basic_ssm": [-0.016, 0.113, -0.125]}
    assert C.decide(frost) == I and C.gradient_conflict(frost, base) == N


def test_claim_8_every_baseline_collapses_on_most_seeds():
    fell, kept = [0.3, 0.35, -0.1], [-0.45, -0.44, -0.46]
    assert C.collapse({"vanilla": fell, "recurrent": fell, "basic_ssm": fell}) == R
    assert C.collapse({"vanilla": kept, "recurrent": kept, "basic_ssm": kept}) == N
    assert C.collapse({"vanilla": kept, "recurrent": fell, "basic_ssm": kept}) == P
    once = [0.3, -0.2, -0.1]  # 1 of 3 seeds: not "frequent"
    assert C.collapse({"vanilla": once, "recurrent": once}) == N
    assert C.collapse({"vanilla": [0.3]}) == "suggested (1 seed)"
    assert C.collapse_score(0.2, 1.0, 0.3) > 0 and C.collapse_score(0.9, 1.0, 0.96) > 0
    assert C.collapse_score(0.9, 1.0, 0.5) < 0


def test_claims_9_and_10_accuracy_kept():
    ok = {q: [C.PAPER_KEPT[q] + d for d in (0.01, 0.0, -0.01)] for q in C.KEPT_SHOWN}
    low = {q: [C.PAPER_KEPT[q] - d for d in (0.2, 0.21, 0.19)] for q in C.KEPT_SHOWN}
    assert C.kept(ok) == R and C.kept(low) == N


def test_claim_11_ratios_and_claim_12_needs_a_gpu():
    assert C.ratio([0.1, -0.15]) == R and C.ratio([0.3]) == P and C.ratio([0.6]) == N
    assert C.ratio([-0.14, -0.24]) == P  # frost's 4.00 against 4.67, basic_ssm's 7.53 against 9.89
    assert C.throughput([0.05], "cuda") == R and C.throughput([0.6], "cuda:0") == N
    cpu = C.throughput([0.05], "cpu")
    assert cpu.status == C.NOT_TESTABLE and f"{C.GPU_TABLE}.json" in cpu


def test_claim_13_vit_depth():
    assert C.vit_depth([4.5, 4.6, 4.4], 12, [0.37, 0.38, 0.36], [0.5, 0.5, 0.5]) == R
    assert C.vit_depth([9.0, 9.1, 8.9], 12, [0.75, 0.76, 0.74], [0.5, 0.5, 0.5]) == N


def test_our_claims_14_15_and_the_benchmarks():
    assert C.fixed_depth([0.01, 0.012, 0.011]) == R and C.fixed_depth([0.0, 0.001, -0.001]) == N
    assert C.halting_rules([0.82, 0.83, 0.82], [0.80, 0.80, 0.80]) == R
    assert C.halting_rules([0.70, 0.71, 0.70], [0.80, 0.80, 0.80]) == N
    assert C.head_refit([0.03, 0.04, 0.035]) == R and C.head_refit([-0.03, -0.04, -0.035]) == N
    assert C.speed(0.95) == R and C.speed(0.8) == P and C.speed(0.5) == N
    assert C.kll_overhead(0.001) == R and C.kll_overhead(0.02) == P and C.kll_overhead(0.2) == N


def test_claim_19_a_two_branch_rewrite_recovers_its_teacher():
    """Ours, after Raptor: per teacher seed the k = 2 student's accuracy over its teacher's, against 0.96
    (Raptor's abstract). Flips: clearly above on 3 seeds -> reproduced; clearly below -> not
    reproduced; an interval across 0.96 -> inconclusive; 1 seed above or below -> suggested, not suggested."""
    assert C.RECOVERED_MARGIN == 0.96
    assert C.block_recurrent([0.98, 0.99, 0.985]) == R
    assert C.block_recurrent([0.85, 0.86, 0.84]) == N
    straddling = [0.92, 1.01, 0.97]  # mean 0.967, half-width of its 95% t interval 0.11
    assert C.block_recurrent(straddling) == I
    assert C.block_recurrent([0.97]) == "suggested (1 seed)" and C.block_recurrent([0.90]) == "not suggested (1 seed)"
    assert C.block_recurrent([0.965, 0.97]) == "suggested (2 seeds)"
    assert C.block_recurrent([]).status == C.NOT_TESTABLE
    assert "after Raptor" in C.CLAIM[19].title and "0.96" in C.CLAIM[19].test and "96%" in C.CLAIM[19].wording


def test_claim_19_is_not_testable_without_phase_structure():
    """Raptor's premise first: phases are absent where the chosen ranges' score exceeds equal ranges' by
    less than 5% on at least 2 of 3 teachers. Flip: 11.67 vs 11.49 (1.6%) on two teachers -> not testable;
    the same with 13.0 vs 11.49 (13%) on two of them -> decided by the margin."""
    flat = ([11.67, 11.51, 13.0], [11.49, 11.51, 11.70])  # 1.6%, 0%, 11%: two short of 5%
    assert not C.phase_structure(*flat)
    verdict = C.block_recurrent([0.98, 0.99, 0.985], *flat)
    assert verdict.status == C.NOT_TESTABLE and "no phase structure" in verdict and "11.67 vs 11.49" in verdict
    phased = ([13.0, 11.51, 13.0], [11.49, 11.51, 11.70])  # one short
    assert C.phase_structure(*phased) and C.block_recurrent([0.98, 0.99, 0.985], *phased) == R
    assert C.phase_structure([12.07, 12.07, 11.0], [11.49] * 3)  # 5.05% on two: one short
    assert not C.phase_structure([12.06, 12.06, 13.0], [11.49] * 3)  # 4.96% on two: two short


def test_every_claim_states_its_wording_and_test():
    assert [c.number for c in C.CLAIMS] == list(range(1, 17))
    # beside the README's 16, in docs/results.md only: the benchmarks, then the extension after Raptor
    assert [c.number for c in C.BENCHMARK_CLAIMS] == [17, 18] and [c.number for c in C.EXTENSION_CLAIMS] == [19]
    assert [c.number for c in C.DFMAMBA_CLAIMS] == [20, 21, 22]  # DF-Mamba's, after FROST's
    assert sorted(C.CLAIM) == list(range(1, 23))
    assert all(c.title and c.wording and c.test for c in C.CLAIM.values())
    assert "frequent collapse" in C.CLAIM[8].wording
    assert f"{paper.TABLE1['frost'][1][0]}" in C.CLAIM[1].wording


def test_margins_are_the_papers_zero_or_named_as_ours():
    """Every margin constant is 0, or the source line that sets it says "ours" (with its reason)."""
    import inspect

    lines = inspect.getsource(C).splitlines()
    margins = ("TABLE1_MARGIN", "CONTRACTION_MARGIN", "DIMENSION_MARGIN", "ALPHA_FALL", "ALPHA_RECOVERY",
               "HURST_ALPHA_MARGIN", "RANK_NARROW", "COLLAPSE_GAP", "CONFLICT_MARGIN",
               "COLLAPSE_FREQUENT", "KEPT_CLOSE", "RATIO_CLOSE", "VIT_DEPTH_CLOSE", "VIT_EARLIER", "FIXED_GAIN",
               "AREA_TIE", "HEAD_MARGIN", "SPEED_CLOSE", "KLL_CHEAP", "VARIANT_RANKING", "VARIANT_STEPS_SAVED", "VARIANT_CLOSED",
               "VARIANT_FULL_DEPTH", "PHASE_MARGIN", "FORECAST_CLOSE")
    for name in margins:
        line = next(x for x in lines if x.startswith(f"{name} =") or x.startswith(f"{name}, "))
        assert getattr(C, name) == 0 or "# ours" in line, line


def test_variant_holds_only_when_all_three_targets_hold():
    """Claim 16 (ours), restated: ranking above random exits of its depths, fewer steps than its fixed
    depth to come within half a point of full depth, half the gap to the hindsight exit closed;
    each part on the seeds' 95% t interval, full depth against FROST's a guard."""
    ranks, saves, closes, keeps = [0.010, 0.012, 0.011], [1.0, 1.2, 0.9], [0.62, 0.58, 0.66], FULL_KEPT
    assert C.variant(ranks, saves, closes, *keeps).status == C.REPRODUCED
    assert C.variant([-0.010, -0.012, -0.011], saves, closes, *keeps).status == C.PARTLY  # ranks no better
    assert C.variant(ranks, saves, closes, keeps[0][:1], keeps[1]).status == C.SUGGESTED  # one variant seed
    assert C.variant(ranks[:1], saves[:1], closes[:1], keeps[0][:1], keeps[1][:1]) == "suggested (1 seed)"


# the variant's full depth and FROST's, separate runs: Welch's interval of the difference [-0.008, +0.007]
FULL_KEPT = ([0.332, 0.327, 0.333], [0.330, 0.331, 0.332])


def test_the_variant_guard_compares_separate_runs_unpaired_and_the_same_runs_by_seed():
    """Flip: FROST's own models read by a rule of ours (the same runs) pair by seed: identical full depths
    hold the guard; read as separate runs, Welch's interval of two noisy sides spans the margin."""
    ranks, saves, closes = [0.010, 0.012, 0.011], [1.0, 1.2, 0.9], [0.62, 0.58, 0.66]
    frost = [0.30, 0.33, 0.36]
    assert C.variant(ranks, saves, closes, frost, frost, same_runs=True) == C.REPRODUCED
    assert C.variant(ranks, saves, closes, frost, frost).status == C.INCONCLUSIVE  # guard open: half 0.11


def test_a_guard_that_holds_is_no_part_of_the_claim():
    """Defect: claim 16 read "partly reproduced" only because its full-depth guard held while both
    halting parts failed (least gain [-0.0088, -0.0032], oracle share [-0.058, 0.006]). Flip: the same
    failing parts with the guard counted as a part gave "partly"; with the guard a precondition, "not"."""
    fails, keeps = [-0.006, -0.005, -0.007], FULL_KEPT
    as_part = C.combine([C.decide(fails), C.decide(fails), C.decide([0.002, -0.004, 0.001], -0.01)])
    assert as_part.status == C.PARTLY  # the old reading
    assert C.variant(fails, fails, [-0.03, 0.0, -0.01], *keeps).status == C.NOT  # every own part fails
    assert C.variant(fails, fails, [-0.03, 0.0, -0.01], *keeps) == "not reproduced"


def test_a_failed_guard_reads_not_reproduced_whatever_the_parts():
    """Flip: parts that all hold, and a guard that fails (full depth 3 points below FROST's)."""
    ranks, saves, closes = [0.010, 0.012, 0.011], [1.0, 1.2, 0.9], [0.62, 0.58, 0.66]
    assert C.variant(ranks, saves, closes, *FULL_KEPT) == C.REPRODUCED
    failed = C.variant(ranks, saves, closes, [0.300, 0.301, 0.299], FULL_KEPT[1])
    assert failed.status == C.NOT and failed == "not reproduced (guard failed)" and failed.note == C.GUARD_FAILED
    one = C.combine([C.decide([0.1])], guard=C.decide([-0.1]))
    assert one == "not suggested (1 seed; guard failed)"
    open_guard = C.combine([C.decide(ranks)], guard=C.decide([0.02, -0.02, 0.001]))  # guard inconclusive
    assert open_guard.status == C.INCONCLUSIVE


def test_claim_12_each_batch_size_is_its_own_part():
    """Defect: rows came in ascending batch size and the README took the first, so the order of the
    rows decided claim 12. Flip: the same two batch sizes in either order give one verdict, partly
    when one passes and one fails."""
    good, bad = [0.05, -0.1], [0.7, -0.6]
    assert C.throughput_batches({1: good, 256: bad}, "cuda") == C.throughput_batches({256: bad, 1: good}, "cuda")
    assert C.throughput_batches({1: good, 256: bad}, "cuda").status == C.PARTLY
    assert C.throughput_batches({1: good, 256: good}, "cuda").status == C.REPRODUCED
    assert C.throughput_batches({1: bad, 256: bad}, "cuda").status == C.NOT
    assert C.throughput_batches({1: good}, "cpu").status == C.NOT_TESTABLE


# ------------------------------------------------------------------ DF-Mamba's rules (claims 20-22)
def test_the_moving_block_bootstrap_keeps_runs_of_windows_together():
    """Overlapping windows make neighbouring errors alike: resampling runs of windows keeps that, so
    on a series of long runs the interval is wider than one that resamples windows one by one."""
    from frost_nb.analysis.stats import block_bootstrap

    rng = np.random.default_rng(0)
    runs = np.repeat(rng.normal(0.3, 0.05, 20), 432)[:2785]  # 2,785 test windows, runs of 432 alike
    mean, half = block_bootstrap(runs)
    _, single = block_bootstrap(runs, block=1)
    assert mean == pytest.approx(runs.mean()) and half > 3 * single
    assert block_bootstrap(np.full(2785, 0.3))[1] == pytest.approx(0.0, abs=1e-12)  # no spread, no interval
    with pytest.raises(ValueError, match="block"):
        block_bootstrap(runs[:100])


def test_claim_20_reads_ours_against_the_papers_mse_with_its_interval():
    """Flip: 0.30 +- 0.002 over 3 seeds against the paper's 0.232 (+0.02) -> not reproduced; 0.24 ->
    reproduced; 0.252 (at the line) -> cannot tell; one seed reads the windows' block bootstrap."""
    assert C.forecast_against_paper([0.300, 0.302, 0.298], 0.232) == N
    assert C.forecast_against_paper([0.240, 0.242, 0.238], 0.232) == R
    assert C.forecast_against_paper([0.250, 0.254, 0.252], 0.232) == C.CANNOT_TELL
    from frost_nb.analysis.stats import block_bootstrap

    windows = np.random.default_rng(0).normal(0.30, 0.2, 2785)
    assert C.forecast_against_paper([0.30], 0.232, block_bootstrap(windows)) == N
    assert C.forecast_against_paper([0.30], windows.mean() - 0.02, block_bootstrap(windows)) == C.CANNOT_TELL  # at the line
    assert C.forecast_against_paper([0.30], 0.232) == "not testable: 1 seed without its test windows' bootstrap: no interval"
    assert C.forecast_against_paper([0.30, 0.31], 0.232) == "not testable: 2 seeds: no interval under 3"


def test_claim_20_against_a_baseline_is_welch_lower_is_better():
    assert C.forecast_against_baseline([0.28, 0.281, 0.279], [0.30, 0.302, 0.301]) == R
    assert C.forecast_against_baseline([0.30, 0.302, 0.301], [0.28, 0.281, 0.279]) == N
    assert C.forecast_against_baseline([0.28], [0.30, 0.302, 0.301]) == "suggested (1 seed)"


def test_claim_21_an_ablation_holds_reverses_or_is_not_shown():
    full = [0.300, 0.302, 0.298]
    assert C.ablation([0.320, 0.322, 0.318], full) == C.HOLDS  # removing sharing hurts
    assert C.ablation([0.280, 0.282, 0.278], full) == C.REVERSED
    assert C.ablation([0.29, 0.31, 0.305], full) == C.NOT_SHOWN
    assert C.ablation([0.33], full) == "suggested (1 seed)"


def test_claim_22_needs_every_baseline_and_s2_only_suggests():
    ours = [1.10, 1.12, 1.11]
    worse = {"dlinear": [1.40, 1.42, 1.41], "rlinear": [1.30, 1.29, 1.31]}
    assert C.zero_shot(ours, worse) == C.HOLDS
    assert C.zero_shot(ours, {**worse, "rlinear": [1.0, 1.01, 0.99]}) == P  # one of two
    assert C.zero_shot(ours, {**worse, "S2": [1.5]}) == "suggested (1 seed)"
    assert C.CLAIM[20].wording.startswith("DF-Mamba-TS MSE 0.232 / 0.287 / 0.329 / 0.408")


def test_table_2_and_the_fixed_depth_gain_widen_by_the_test_images():
    """Three seeds 3 points under the paper's share (2 points inside the 5-point margin, spread 0.001):
    "reproduced" on the seeds alone, "inconclusive" once the images' half-width (0.025) spans the 2
    points; the fixed-depth gain likewise (1 point over the half-point bar, images' 0.6 points)."""
    shares = {q: [C.PAPER_KEPT[q] - 0.03 + e for e in (-0.001, 0.0, 0.001)] for q in C.KEPT_SHOWN}
    assert C.kept(shares).status == C.REPRODUCED
    assert C.kept(shares, {q: 0.025 for q in C.KEPT_SHOWN}).status == C.INCONCLUSIVE
    assert C.kept(shares, {C.KEPT_SHOWN[0]: 0.01}).status == C.REPRODUCED  # within the 2 points
    gain = [C.FIXED_GAIN + 0.01 + e for e in (-0.001, 0.0, 0.001)]
    assert C.fixed_depth(gain).status == C.REPRODUCED
    assert C.fixed_depth(gain, 0.012).status == C.INCONCLUSIVE
