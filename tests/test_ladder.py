"""The scale ladder's read-out (frost_nb/analysis/ladder.py; docs/method.md section 15): the fit
against an independent regression, each reading on constructed points where the answer is known,
and the halting measures on a constructed pass whose exits are known."""

import math

import numpy as np
import pytest
import torch
from scipy.stats import linregress
from scipy.stats import t as student_t

from frost_nb.analysis import ladder
from frost_nb.repro import ladder as measures
from frost_nb.halting import HaltingCalibrator
from frost_nb.training import FullDepthPass

SIZES = 27510, 100102, 380838  # the CPU rungs' frost


def points(values_by_size, seeds=1):
    params = [n for n in values_by_size for _ in range(seeds)]
    return params, [v for vs in values_by_size.values() for v in vs]


def _band(result, params):
    """The half-width of a fit's pointwise confidence band at ``params`` (docs/method.md section 15):
    t s sqrt(1/n + (ln N - mean)^2 / Sxx)."""
    x = np.log(np.asarray(params, dtype=float))
    return result.t * result.residual_sd * np.sqrt(1.0 / result.n + (x - result.x_mean) ** 2 / result.sxx)


def test_the_fit_agrees_with_scipy_linregress():
    rng = np.random.default_rng(0)
    params = [n for n in SIZES for _ in range(3)]
    values = [0.3 + 0.02 * math.log(n) + rng.normal(0, 0.01) for n in params]
    result = ladder.fit(params, values)
    ref = linregress(np.log(params), values)
    half = student_t.ppf(0.975, len(params) - 2) * ref.stderr
    assert result.slope == pytest.approx(ref.slope) and result.intercept == pytest.approx(ref.intercept)
    assert (result.slope_low, result.slope_high) == pytest.approx((ref.slope - half, ref.slope + half))
    assert result.delta[0] == pytest.approx(ref.slope * math.log(SIZES[2] / SIZES[0]))
    # the band at the mean of ln N is the mean's own interval: t s / sqrt(n)
    s = math.sqrt(np.sum((np.asarray(values) - ref.intercept - ref.slope * np.log(params)) ** 2) / (len(params) - 2))
    centre = math.exp(np.mean(np.log(params)))
    half = student_t.ppf(0.975, len(params) - 2) * s / math.sqrt(len(params))
    assert _band(result, centre) == pytest.approx(half)


def test_the_span_is_the_fitted_rows_own():
    params = [n for n in (*SIZES, 1484518) for _ in range(2)]  # a fourth rung
    values = [0.3 + 0.02 * math.log(n) + (1e-3 if i % 2 else -1e-3) for i, n in enumerate(params)]
    result = ladder.fit(params, values)
    assert result.span == pytest.approx((SIZES[0], 1484518))
    assert result.delta[0] == pytest.approx(result.slope * math.log(1484518 / SIZES[0]))


def test_meets_where_the_band_holds_the_value_and_says_from_which_size():
    q = ladder.QUANTITIES["halting_kept_6.06"]  # the paper's 0.845
    params = [n for n in SIZES for _ in range(3)]
    noise = [-0.01, 0.0, 0.01] * 3
    b = 0.2 / math.log(SIZES[2] / SIZES[0])
    line = lambda n: 0.70 + b * math.log(n / SIZES[0])  # 0.70 at the bottom rung, 0.90 at the top
    result = ladder.fit(params, [line(n) + e for n, e in zip(params, noise)])
    assert ladder.reading(q, result) == ladder.MEETS
    first = result.meets_from(q.paper)
    # the first size where |line - 0.845| <= band: just below the crossing of the line itself
    assert first < result.crossing(q.paper) and abs(result.at(first) - q.paper) == pytest.approx(
        float(_band(result, first)), abs=2e-3)
    # the same points without noise: the band is almost 0, so the value is met only at the crossing
    exact = ladder.fit(params, [line(n) + e * 1e-6 for n, e in zip(params, noise)])
    assert exact.meets_from(q.paper) == pytest.approx(exact.crossing(q.paper), rel=2e-3)
    # a value beyond the span's band: no longer met, and the line rises toward it
    far = ladder.fit(params, [line(n) - 0.3 + e for n, e in zip(params, noise)])
    assert far.meets_from(q.paper) is None and ladder.reading(q, far) == ladder.TOWARD
    # a sign or bound never "meets"
    assert ladder.reading(ladder.QUANTITIES["gap"], ladder.fit(params, [v - 0.8 for v in (line(n) for n in params)])) \
        != ladder.MEETS


def test_no_fit_below_three_rungs():
    assert ladder.fit([SIZES[0], SIZES[0], SIZES[2]], [0.1, 0.2, 0.3]) is None
    assert ladder.reading(ladder.QUANTITIES["gap"], None) == ladder.NO_FIT


@pytest.mark.parametrize("name,slope,want", [
    ("gap", +0.01, ladder.TOWARD),  # a sign claimed "up": rising is toward it
    ("gap", -0.01, ladder.AWAY),
    ("product_rate", -0.05, ladder.TOWARD),  # a bound below 1: falling is toward it
    ("product_rate", +0.05, ladder.AWAY),
    ("depth_99", +1.0, ladder.RISES),  # no paper value: the direction alone
    ("depth_99", -1.0, ladder.FALLS),
])
def test_a_clear_slope_reads_by_its_direction(name, slope, want):
    params = [n for n in SIZES for _ in range(2)]
    values = [0.5 + slope * math.log(n) + (1e-4 if i % 2 else -1e-4) for i, n in enumerate(params)]
    assert ladder.reading(ladder.QUANTITIES[name], ladder.fit(params, values)) == want


def test_a_value_target_is_toward_when_the_line_heads_for_it_and_away_when_it_leaves_it():
    q = ladder.QUANTITIES["full_depth"]  # the paper's 61.99%
    params = [n for n in SIZES for _ in range(2)]
    jitter = [(1e-4 if i % 2 else -1e-4) for i in range(len(params))]
    rising_below = ladder.fit(params, [0.2 + 0.02 * math.log(n) + j for n, j in zip(params, jitter)])
    assert rising_below.at(SIZES[2]) < q.paper and ladder.reading(q, rising_below) == ladder.TOWARD
    falling_below = ladder.fit(params, [0.6 - 0.02 * math.log(n) + j for n, j in zip(params, jitter)])
    assert falling_below.at(SIZES[2]) < q.paper and ladder.reading(q, falling_below) == ladder.AWAY
    # the crossing: where the line a + b ln N reaches the paper's value
    n_star = rising_below.crossing(q.paper)
    assert rising_below.at(n_star) == pytest.approx(q.paper)


def test_flat_needs_the_whole_interval_inside_the_band_else_unresolved():
    q = ladder.QUANTITIES["full_depth"]  # band 0.01 across the ladder
    params = [n for n in SIZES for _ in range(3)]
    quiet = [0.33 + (0.0005 if i % 3 == 0 else -0.0005 if i % 3 == 1 else 0.0) for i in range(len(params))]
    assert ladder.reading(q, ladder.fit(params, quiet)) == ladder.FLAT
    noisy = [0.33 + (0.05 if i % 3 == 0 else -0.05 if i % 3 == 1 else 0.0) for i in range(len(params))]
    assert ladder.reading(q, ladder.fit(params, noisy)) == ladder.UNRESOLVED


def test_depth_to_keep_is_the_first_step_at_99_percent():
    assert measures.depth_to_keep([0.1, 0.2, 0.296, 0.298, 0.3]) == 4  # 0.99 x 0.3 = 0.297: not at step 3
    assert measures.depth_to_keep([0.1, 0.3, 0.29, 0.3]) == 2


def _pass(correct, scores):
    """A FullDepthPass whose step t predicts class 1 where ``correct`` holds, else class 0 (labels 1)."""
    n, steps = correct.shape
    logits = torch.zeros(n, steps, 2)
    logits[..., 1] = torch.where(correct, 1.0, -1.0)
    return FullDepthPass(scores=scores, halt_logits=torch.logit(scores), logits=logits,
                         y=torch.ones(n, dtype=torch.long))


def test_halting_measures_split_the_gap_into_spread_and_ranking():
    # 4 steps, 400 samples; accuracy by step 0.25, 0.5, 0.75, 1.0 (each sample correct from its own
    # step on); scores make half the samples exit at step 1 and half at step 4 at every q < 1 below
    n, steps = 400, 4
    first_right = torch.arange(n) % steps  # 0..3: correct from step first_right + 1 on
    correct = torch.arange(steps)[None, :] >= first_right[:, None]  # (N, T)
    early = torch.arange(n) % 2 == 0
    scores = torch.full((n, steps), 0.1)
    scores[early, 0] = 0.9
    calibrator = HaltingCalibrator().update(torch.tensor([0.5] * 100))  # every q < 1: tau = 0.5
    m = measures.halting_measures(_pass(correct, scores), calibrator, quantiles=[0.25, 0.5])
    acc = correct.float().mean(0)  # 0.25, 0.5, 0.75, 1.0
    assert m["full_depth"] == pytest.approx(1.0) and m["depth_99"] == 4
    # exits at 1 and 4 in equal shares: mean depth 2.5; random exits of that histogram score
    # (acc(1) + acc(4)) / 2, a fixed depth at 2.5 the straight line between acc(2) and acc(3)
    random, fixed = (acc[0] + acc[3]) / 2, (acc[1] + acc[2]) / 2
    own = (correct[early, 0].float().sum() + correct[~early, 3].float().sum()) / n  # the samples' own exits
    # by hand: random = (0.25 + 1) / 2 = 0.625 = fixed = (0.5 + 0.75) / 2; the early half (even i,
    # first_right 0 or 2) is right at step 1 for i % 4 == 0 alone (100 of 200), the late half always
    # at step 4 (200): own = 300 / 400 = 0.75. So the gap, halting minus fixed depth, is
    # 0.75 - 0.625 = 0.125: spread 0, ranking 0.125
    assert (m["gap"], m["spread"], m["ranking"]) == pytest.approx((0.125, 0.0, 0.125), abs=1e-9)
    assert m["spread"] == pytest.approx(float(random - fixed))
    assert m["ranking"] == pytest.approx(float(own - random))
    # the sweep reaches mean depth 2.5 alone: the paper's depths lie beyond it, so no share is read
    # there (read_at would hold the curve's end value)
    assert all(math.isnan(m[f"halting_kept_{d}"]) for d in ladder.PAPER_DEPTHS)


def test_a_crossing_beyond_a_floats_range_is_infinite():
    tiny = ladder.Fit(n=3, rungs=3, intercept=0.3, slope=1e-4, slope_low=5e-5, slope_high=2e-4,
                      span=(SIZES[0], SIZES[2]), x_mean=11.0, sxx=1.0, residual_sd=0.01, t=12.7)
    assert tiny.crossing(0.62) == math.inf and tiny.crossing(0.3) == pytest.approx(1.0)


def test_a_controls_means_pair_frost_with_basic_ssm_as_the_fit_does():
    rows = [{"size": "demo", "model": m, "seed": s, "params": 1, "cosine": c, "full_depth": 0.3 + 0.01 * s}
            for s in (0, 1) for m, c in (("frost", 0.9 + 0.02 * s), ("basic_ssm", 0.5))]
    means = ladder.quantity_means(rows)
    assert means["table1"] == pytest.approx(0.41) and means["full_depth"] == pytest.approx(0.305)
    assert math.isnan(means["gap"])  # no run has it
    # defect: a point without a value (NaN, a depth the sweep misses) made the mean NaN and counted in the
    # read-out's runs, though the fit leaves it out
    rows += [{"size": s, "model": "frost", "seed": 0, "params": p, "full_depth": v}
             for s, p, v in zip(("ladder32", "ladder64", "ladder128"), SIZES, (0.2, 0.4, 0.6))]
    rows += [{"size": "ladder128", "model": "frost", "seed": 1, "params": SIZES[2], "full_depth": math.nan}]
    assert ladder.quantity_means(rows)["full_depth"] == pytest.approx((0.3 + 0.31 + 0.2 + 0.4 + 0.6) / 5)
    out = next(r for r in ladder.read_out(rows) if r["quantity"] == "full_depth")
    assert out["runs"] == 5 and out["rungs"] == 4


def test_read_out_pairs_frost_with_basic_ssm_by_size_and_seed():
    """Table 1's and claim 3's quantities are frost minus basic_ssm of the same size and seed: both
    sides vary with size and seed (so a sum, or a pairing across seeds, reads another line), and a
    frost run without its basic_ssm twin is left out of the pairs (not of frost's own quantities)."""
    rows = []
    for i, (size, params) in enumerate(zip(("ladder32", "ladder64", "ladder128"), SIZES)):
        for seed in (0, 1):
            rows.append({"size": size, "model": "frost", "seed": seed, "params": params,
                         "cosine": 0.5 + 0.1 * i + 0.01 * seed, "box_dimension": 1.0 + 0.2 * i, "full_depth": 0.3})
            rows.append({"size": size, "model": "basic_ssm", "seed": seed, "params": params - 1,
                         "cosine": 0.3 + 0.15 * i - 0.02 * seed, "box_dimension": 1.1 + 0.1 * i})
    rows.append({"size": "ladder32", "model": "frost", "seed": 2, "params": SIZES[0], "cosine": 0.9,
                 "box_dimension": 3.0, "full_depth": 0.3})  # no basic_ssm of seed 2: no pair
    table = {r["quantity"]: r for r in ladder.read_out(rows)}
    x = np.log([n for n in SIZES for _ in (0, 1)])  # frost's parameters, by size then seed
    # by hand, frost minus basic_ssm: cosine 0.2 - 0.05 i + 0.03 seed, box dimension -0.1 + 0.1 i
    cosine = [0.20, 0.23, 0.15, 0.18, 0.10, 0.13]
    box = [-0.1, -0.1, 0.0, 0.0, 0.1, 0.1]
    for name, diffs in (("table1", cosine), ("minkowski", box)):
        slope, intercept = np.polyfit(x, diffs, 1)
        assert table[name]["runs"] == 6 and table[name]["rungs"] == 3
        assert (table[name]["slope"], table[name]["intercept"]) == pytest.approx((slope, intercept), abs=1e-12)
    assert table["table1"]["slope"] < 0 < table["minkowski"]["slope"]  # a sum would rise in both
    assert table["full_depth"]["runs"] == 7 and table["gap"]["runs"] == 0


def test_each_verdict_row_reads_its_quantities_trend():
    from frost_nb.repro.verdicts import NOT_YET, ladder_trends

    assert ladder_trends(None)[14] == NOT_YET and ladder_trends(None)[4] == "-"  # alpha: no ladder quantity
    record = {"read_out": [{"quantity": "gap", "reading": ladder.AWAY},
                           {"quantity": "halting_kept_6.06", "reading": ladder.TOWARD},
                           {"quantity": "halting_kept_8.3", "reading": ladder.FLAT}]}
    trends = ladder_trends(record)
    assert trends[14] == ladder.AWAY and trends[10] == f"{ladder.TOWARD} / {ladder.FLAT}" and trends[2] == "no fit"
    record["read_out"][0]["precision_sensitive"] = True  # notebook 09's column: the reading says so
    record["read_out"][1]["precision_sensitive"] = None  # undecided: nothing added
    trends = ladder_trends(record)
    assert trends[14] == f"{ladder.AWAY} (precision-sensitive)" and trends[10].startswith(f"{ladder.TOWARD} / ")
    assert ladder_trends({"runs": {}})[14] == NOT_YET  # the measures kept before the read-out: not yet read


def test_meets_shows_from_which_size_in_the_trend_column():
    from frost_nb.repro.verdicts import ladder_trends

    row = {"quantity": "halting_kept_6.06", "reading": ladder.MEETS, "meets_params": 108877.0}
    assert ladder_trends({"read_out": [row]})[10].startswith("meets (from 0.11 M parameters) / ")
    assert ladder_trends({"read_out": [{**row, "reading": ladder.AWAY}]})[10].startswith(f"{ladder.AWAY} / ")


def test_cached_measures_read_as_measured_and_a_runs_hardware_comes_from_its_folder(tmp_path):
    import json
    from types import SimpleNamespace

    from frost_nb.repro.ladder import _hardware, measured

    result = SimpleNamespace(metrics={"test_accuracy": 0.4, "device": "cpu"}, checkpoint=None)
    row = {"stored_accuracy": 0.4, "gap": math.nan, "seed": 0, "measured_with": "code-a"}
    cache = {"g/a": json.loads(json.dumps(row))}  # NaN -> null
    runs = {"ladder32 frost seed 0": ("g/a", result)}
    rows, fresh = measured(runs, cache, lambda r: pytest.fail("measured again"), code="code-a")
    assert math.isnan(rows[0]["gap"]) and rows[0]["size"] == "ladder32" and fresh["g/a"]["measured_with"] == "code-a"
    # defect: a row was reused whenever the run's accuracy matched, so a change in how a measure is computed
    # was never measured again; a row measured by other code is measured again
    again = measured(runs, cache, lambda r: {"gap": 0.1, "seed": 0}, code="code-b")[0]
    assert again[0]["gap"] == 0.1
    from frost_nb.repro.ladder import measure_code
    assert len(measure_code()) == 16 and measure_code() == measure_code()
    assert _hardware(result) == "cpu"  # no folder: the device
    (tmp_path / "metrics.json").write_text(json.dumps({"hardware": "cpu (x86_64, 1 threads)"}))
    assert _hardware(SimpleNamespace(metrics={"device": "cpu"}, checkpoint=tmp_path / "model.pt")) == \
        "cpu (x86_64, 1 threads)"


def _measures(seed, shift=0.0):
    """A frost run's measures for the precision check: every quantity it reads, ``shift`` added."""
    return {"seed": seed, **{name: 0.5 + 0.01 * seed + shift for name in ladder.PRECISION_QUANTITIES}}


def test_the_precision_check_compares_the_fp32_twin_with_three_bf16_seed_sds():
    bf16 = [_measures(s) for s in (0, 1, 2)]  # values 0.50, 0.51, 0.52: sd 0.01 (n - 1), limit 0.03
    rows = {r["quantity"]: r for r in ladder.precision_check(bf16, _measures(0, shift=0.029))}
    assert set(rows) == set(ladder.PRECISION_QUANTITIES) and "table1" not in rows and "cosine" in rows
    r = rows["full_depth"]
    assert r["seed_sd"] == pytest.approx(0.01) and r["limit"] == pytest.approx(0.03)
    assert r["difference"] == pytest.approx(0.029) and r["within"] is True and r["seeds"] == 3
    assert r["bf16"] == pytest.approx(0.5)  # the twin is seed 0's run, not the seeds' mean
    outside = ladder.precision_check(bf16, {**_measures(0), "gap": 0.5 - 0.031})
    assert [r["quantity"] for r in outside if not r["within"]] == ["gap"]  # either side of the twin
    # the flat band beside it (context, not the rule): gap's is 0.005; frost's side takes its pair's
    gap = next(r for r in outside if r["quantity"] == "gap")
    assert gap["band"] == ladder.QUANTITIES["gap"].band and gap["within_band"] is False
    assert rows["box_dimension"]["band"] == ladder.QUANTITIES["minkowski"].band
    assert rows["box_dimension"]["within_band"] is True and rows["cosine"]["band"] == ladder.QUANTITIES["table1"].band


def test_the_precision_reading_names_what_fails_and_which_of_it_is_inside_its_band():
    bf16 = [_measures(s) for s in (0, 1, 2)]
    adequate, line = ladder.precision_reading(ladder.precision_check(bf16, _measures(0, shift=0.029)))
    assert adequate is True and line.startswith("precision adequate")
    fp32 = {**_measures(0), "gap": 0.5 + 0.04, "box_dimension": 0.5 + 0.04}  # bands 0.005 and 0.05
    adequate, line = ladder.precision_reading(ladder.precision_check(bf16, fp32))
    assert adequate is False and "outside 3 bf16 seed sd: gap, box_dimension;" in line
    assert line.endswith("(context, not the rule): box_dimension")
    adequate, line = ladder.precision_reading(ladder.precision_check(bf16[:1], fp32))
    assert adequate is None and "undecided: 1 bf16 seed(s)" in line
    fp32["gap"] = math.nan  # no value (a depth the sweep misses): that quantity is undecided
    rows = ladder.precision_check(bf16, fp32)
    assert next(r for r in rows if r["quantity"] == "gap")["within"] is None
    assert next(r for r in rows if r["quantity"] == "gap")["within_band"] is None  # was False
    adequate, line = ladder.precision_reading(rows)
    assert adequate is None and line.endswith("or no value for gap")


def test_the_precision_check_is_undecided_with_one_bf16_seed_and_needs_the_twin():
    rows = ladder.precision_check([_measures(0)], _measures(0, shift=0.5))
    assert all(r["within"] is None and math.isnan(r["seed_sd"]) for r in rows)
    with pytest.raises(ValueError, match="no bf16 run of seed 0"):
        ladder.precision_check([_measures(1), _measures(2)], _measures(0))


def test_the_precision_shift_compares_the_fp32_seeds_mean_with_the_bf16_seeds_mean():
    bf16 = [_measures(s) for s in (0, 1, 2)]  # 0.50, 0.51, 0.52 per quantity
    fp32 = [{**_measures(s, shift=0.1), "gap": 0.51 + 0.001 * s} for s in (0, 1, 2)]
    rows = {r["quantity"]: r for r in ladder.precision_shift(bf16, fp32)}
    r = rows["cosine"]  # shifted by 0.1, both sd 0.01: Welch df 4, half-width t(0.975, 4) * 0.01 * sqrt(2/3)
    half = student_t.ppf(0.975, 4) * 0.01 * math.sqrt(2 / 3)
    assert r["shift"] == pytest.approx(0.1) and r["shift_low"] == pytest.approx(0.1 - half)
    assert r["shifted"] is True and r["bf16_seeds"] == r["fp32_seeds"] == 3
    assert r["bf16_sd"] == pytest.approx(0.01) and rows["gap"]["fp32_sd"] == pytest.approx(0.001)
    assert rows["gap"]["shift"] == pytest.approx(0.001) and rows["gap"]["shifted"] is False  # same mean, within
    # the smallest shift the test sees is its half-width: gap's (about 0.025) exceeds its margin (the flat
    # band, 0.005), so "not shifted" cannot be told there
    assert rows["gap"]["detectable"] == pytest.approx(rows["gap"]["shift_high"] - rows["gap"]["shift"])
    assert rows["gap"]["margin"] == ladder.QUANTITIES["gap"].band and rows["gap"]["precision"] == ladder.CANNOT_TELL
    assert rows["cosine"]["precision"] == ladder.SHIFTED
    sensitive = ladder.precision_sensitive([rows["cosine"], rows["gap"], rows["box_dimension"]])
    assert sensitive == {"table1": True, "gap": None, "minkowski": True}
    # the same means with spreads ten times smaller: the test now resolves the margin, and reads "not shifted"
    tight = lambda rows_, f: [{**r, "gap": 0.51 + f * (r["gap"] - 0.51)} for r in rows_]
    quiet = {r["quantity"]: r for r in ladder.precision_shift(tight(bf16, 0.1), tight(fp32, 0.1))}
    assert quiet["gap"]["detectable"] < quiet["gap"]["margin"] and quiet["gap"]["precision"] == ladder.NOT_SHIFTED
    assert ladder.precision_sensitive([quiet["gap"]]) == {"gap": False}
    one = ladder.precision_shift(bf16, fp32[:1])  # one fp32 seed: no interval, undecided
    assert all(r["shifted"] is None and r["fp32_seeds"] == 1 for r in one)


def test_the_precision_runs_are_the_rungs_frost_seeds_in_fp32_and_find_the_committed_run():
    from frost_nb.repro.ladder import PRECISION, PRECISION_SEEDS, ladder_runs, precision_run
    from frost_nb.runs import find_run

    size, seed = PRECISION
    (label, (name, cfg)), = precision_run("cifar100").items()
    _, bf16 = ladder_runs("cifar100")[f"{size} frost seed {seed}"]
    assert cfg.train.amp == "off" and bf16.train.amp == "bf16"
    assert cfg.replace(**{"train.amp": "bf16"}) == bf16  # the one difference
    found = find_run(cfg)  # the committed fp32 run (FROST_CACHE is empty here)
    assert found is not None and found.name == name == "cifar100-ladder32-precision/frost-fp32-seed0"
    every = precision_run("cifar100", seeds=3)
    assert list(every) == [f"{size} frost fp32 seed {s}" for s in PRECISION_SEEDS]  # the rule's twin first
    assert [c.train.seed for _, c in every.values()] == list(PRECISION_SEEDS)
    assert every[f"{size} frost fp32 seed 2"][0] == "cifar100-ladder32-precision/frost-fp32-seed2"
    (_, (smoke_name, smoke)), = precision_run("digits", smoke=True).items()
    assert smoke.train.amp == "off" and smoke.data.name == "digits" and "-smoke-ladder32-precision/" in smoke_name


def test_a_gpu_rung_is_read_once_its_runs_are_stored(monkeypatch):
    import frost_nb.runs
    from frost_nb.repro import ladder as repro_ladder

    assert not [k for k in repro_ladder.ladder_runs("cifar100") if k.startswith("ladder256")]  # none stored
    real = frost_nb.runs.find_run
    monkeypatch.setattr(repro_ladder, "find_run",
                        lambda cfg, **kw: object() if cfg.size == "ladder256" and cfg.model.name == "frost" else real(cfg, **kw))
    runs = repro_ladder.ladder_runs("cifar100")
    assert [k for k in runs if k.startswith("ladder256")] == ["ladder256 frost seed 0"]  # basic_ssm not stored
    assert not [k for k in repro_ladder.ladder_runs("digits", 1, smoke=True) if k.startswith("ladder256")]
