"""Tests of frost_nb.halting: the KLL calibrator in rank, exits, compacted inference, and the curve
read off cached outputs (``analysis.curves.curve``) against it."""

from __future__ import annotations

import copy
import math
import pickle
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from datasketches import kll_floats_sketch
from torch import nn

from frost_nb.analysis.curves import SWEEP_COLUMNS, curve
from frost_nb.halting import (
    AdaptiveResult,
    HaltingCalibrator,
    adaptive_predict,
    exit_steps,
    stream_predict,
)
from frost_nb.training import FullDepthPass

QS = np.linspace(0.01, 0.99, 50)


def _rank_of(data: np.ndarray, tau: float) -> float:
    return float(np.mean(data <= tau))


# --- calibrator: thresholds in rank -------------------------------------------------------------

@pytest.mark.parametrize("dist", ["uniform", "beta", "clumped"])
def test_thresholds_match_np_quantile_in_rank(dist):
    rng = np.random.default_rng(0)
    data = {"uniform": lambda: rng.uniform(size=100_000),
            "beta": lambda: rng.beta(0.3, 2.0, size=100_000),  # most mass near 0, long tail
            "clumped": lambda: np.concatenate([rng.beta(50, 2, 60_000), rng.beta(2, 50, 40_000)]),
            }[dist]().astype(np.float32)
    cal = HaltingCalibrator(200)
    for chunk in np.array_split(rng.permutation(data), 37):  # streamed in batches
        cal.update(chunk)
    assert cal.n == data.size and not cal.is_empty
    assert 0.005 < kll_floats_sketch.get_normalized_rank_error(cal.k, False) < 0.02
    errors = [abs(_rank_of(data, cal.threshold(q)) - q) for q in QS]
    assert max(errors) < 0.02, max(errors)
    # and against np.quantile: the sketch's threshold and numpy's sit at nearly the same rank
    for q in (0.1, 0.25, 0.5, 0.75, 0.9):
        assert abs(_rank_of(data, cal.threshold(q)) - _rank_of(data, np.quantile(data, q))) < 0.02


def test_q_one_is_infinite_and_gives_full_depth():
    cal = HaltingCalibrator().update(np.linspace(0.0, 0.5, 1000))
    assert cal.threshold(1) == math.inf and cal.threshold(1.0) == math.inf
    assert cal.threshold(np.float64(1.0)) == math.inf
    scores = torch.full((7, 5), 0.99)  # above every calibration score
    assert cal.threshold(0.999) <= 0.5  # the sketch's own estimate would let these exit at once
    assert torch.equal(exit_steps(scores, cal.threshold(1.0)), torch.full((7,), 5))


@pytest.mark.parametrize("q", [1.5, -0.1, float("nan"), float("inf"), "0.5", None, True, [0.5]])
def test_bad_quantile_raises_naming_q(q):
    cal = HaltingCalibrator().update(np.random.default_rng(0).uniform(size=100))
    with pytest.raises(ValueError,
                       match=r"quantile q=.* (is outside|is not a number|must be a real number in)"):
        cal.threshold(q)


def test_quantile_error_message_shows_value():
    with pytest.raises(ValueError, match=r"q=1\.5 is outside \[0, 1\]"):
        HaltingCalibrator().threshold(1.5)
    with pytest.raises(ValueError, match=r"q='0\.5' must be a real number"):
        HaltingCalibrator().threshold("0.5")
    assert HaltingCalibrator().update([0.25, 0.5]).threshold(torch.tensor(0.0)) == 0.25


def test_empty_sketch_raises_clear_error():
    cal = HaltingCalibrator()
    assert cal.is_empty and cal.n == 0
    with pytest.raises(ValueError, match="no halting scores were fed.*train the model"):
        cal.threshold(0.5)
    cal.update(torch.empty(0))  # an empty batch is a no-op
    assert cal.is_empty
    assert repr(cal) == "HaltingCalibrator(k=200, n=0)"


def test_nan_scores_are_rejected_and_nothing_is_added():
    cal = HaltingCalibrator().update([0.1, 0.2])
    with pytest.raises(ValueError, match="NaN"):
        cal.update(torch.tensor([0.3, float("nan"), 0.4]))
    assert cal.n == 2


@pytest.mark.parametrize("bad, kind", [(math.inf, "1 infinite"), (-math.inf, "1 infinite"),
                                       (1.5, "1 finite but outside"), (-0.01, "1 finite but outside")])
def test_infinite_or_out_of_range_scores_are_rejected_and_nothing_is_added(bad, kind):
    cal = HaltingCalibrator().update([0.1, 0.2])
    with pytest.raises(ValueError, match=f"added nothing: the scores hold {kind}.*sigmoid"):
        cal.update(torch.tensor([0.3, bad, 0.4]))
    assert cal.n == 2 and cal.threshold(0.99) == np.float32(0.2)  # one +inf used to make this inf
    cal.update(np.array([0.0, 1.0]))  # the ends of [0, 1] are scores (a saturated sigmoid)
    assert cal.n == 4 and cal.threshold(0.99) == 1.0


def test_thresholds_of_identical_runs_differ_by_at_most_twice_the_rank_error():
    # the KLL sketch compacts with unseeded coin flips: the same scores fed to two fresh
    # calibrators give slightly different thresholds (the HaltingCalibrator docstring says so).
    # Each lies within rank_error of its quantile (the 99th percentile of the sketch's maximum
    # error over all queries), so at most 2 * rank_error of the scores lie between the two.
    # 100 000 scores: many compactions, so a real difference; 300 repetitions of this test
    # gave at most 0.54 of the bound (median 0.2).
    rng = np.random.default_rng(4)
    scores = rng.beta(2, 5, size=100_000).astype(np.float32)
    a, b = HaltingCalibrator(), HaltingCalibrator()
    for chunk in np.array_split(scores, 50):  # streamed in batches, as the trainer feeds it
        a.update(chunk)
        b.update(chunk)
    bound = 2 * kll_floats_sketch.get_normalized_rank_error(a.k, False)
    assert a.k == 200

    def between(t1, t2):  # fraction of the scores lying between two thresholds
        return float(np.mean((scores > min(t1, t2)) & (scores <= max(t1, t2))))

    for q in (0.125, 0.25, 0.5, 0.75, 0.875):
        assert between(a.threshold(q), b.threshold(q)) <= bound, q
    # the measure can fail: thresholds 3 rank errors apart have more than the bound between them
    far = 1.5 * bound  # three rank errors
    assert between(a.threshold(0.5), float(np.quantile(scores, 0.5 + far))) > bound


def test_bad_k_raises():
    for k in (4, 70000, 2.5, True):
        with pytest.raises(ValueError, match="k="):
            HaltingCalibrator(k)


def test_inputs_of_any_shape_and_dtype_are_flattened():
    rng = np.random.default_rng(1)
    cal = HaltingCalibrator()
    cal.update(torch.rand(4, 5, 6, dtype=torch.bfloat16))  # bf16 (no numpy equivalent)
    cal.update(torch.rand(3, 7, dtype=torch.float16))
    cal.update(torch.rand(8, 2, dtype=torch.float64).t())  # non-contiguous
    cal.update(rng.uniform(size=(2, 3, 4)))  # float64 numpy
    cal.update(rng.uniform(size=(10, 10)).astype(np.float32)[:, ::2])  # strided numpy
    cal.update([0.5, 0.25])
    x = torch.rand(5, 3, requires_grad=True)
    cal.update(torch.sigmoid(x))  # attached to a graph
    assert cal.n == 120 + 21 + 16 + 24 + 50 + 2 + 15
    assert 0.0 <= cal.threshold(0.0) <= cal.threshold(0.5) <= cal.threshold(0.99) <= 1.0


def test_exact_below_k_and_monotone():
    # fewer than k items: the sketch is exact
    data = np.arange(100, dtype=np.float32) / 100
    cal = HaltingCalibrator(200).update(data)
    assert cal.threshold(0.0) == 0.0
    assert math.isclose(cal.threshold(0.5), 0.5, abs_tol=0.011)
    taus = [cal.threshold(q) for q in np.linspace(0, 0.99, 30)]
    assert all(a <= b for a, b in zip(taus, taus[1:]))


def test_serialise_round_trip_gives_identical_thresholds():
    rng = np.random.default_rng(2)
    cal = HaltingCalibrator(128).update(rng.beta(2, 5, size=50_000))
    blob = cal.to_bytes()
    assert isinstance(blob, bytes)
    back = HaltingCalibrator.from_bytes(blob)
    assert back.k == 128 and back.n == cal.n
    assert back.thresholds(QS) == cal.thresholds(QS)
    for other in (pickle.loads(pickle.dumps(cal)), copy.deepcopy(cal)):
        assert other.k == 128 and other.thresholds(QS) == cal.thresholds(QS)
    assert HaltingCalibrator.from_bytes(HaltingCalibrator().to_bytes()).is_empty


def test_merge_counts_each_score_once_and_approximates_the_union():
    rng = np.random.default_rng(3)
    a_data = rng.uniform(0.0, 0.6, size=40_000).astype(np.float32)
    b_data = rng.beta(5, 1, size=60_000).astype(np.float32)
    a, b = HaltingCalibrator().update(a_data), HaltingCalibrator().update(b_data)
    b_before = b.thresholds(QS)
    assert a.merge(b) is a
    assert a.n == 100_000 and b.n == 60_000
    assert b.thresholds(QS) == b_before  # the other sketch is left alone
    union = np.concatenate([a_data, b_data])
    errors = [abs(_rank_of(union, a.threshold(q)) - q) for q in QS]
    assert max(errors) < 0.02, max(errors)
    with pytest.raises(TypeError):
        a.merge(b_data)


def test_reset_and_repr():
    cal = HaltingCalibrator(64).update(np.full(10, 0.25))
    assert repr(cal) == "HaltingCalibrator(k=64, n=10, median=0.25)"
    assert cal.reset() is cal and cal.is_empty and cal.k == 64


# --- exit steps -------------------------------------------------------------------------------

def test_exit_steps_known_answers():
    scores = torch.tensor([[0.9, 0.1, 0.1, 0.1],   # exits at once
                           [0.1, 0.2, 0.8, 0.9],   # first above 0.5 at t = 3
                           [0.1, 0.2, 0.3, 0.4],   # never: T
                           [0.5, 0.5, 0.5, 0.51],  # strict >: only the last
                           [0.1, 0.7, 0.1, 0.7]])  # first one counts
    assert exit_steps(scores, 0.5).tolist() == [1, 3, 4, 4, 2]
    assert exit_steps(scores, 0.5).dtype == torch.int64
    assert exit_steps(scores, math.inf).tolist() == [4] * 5
    assert exit_steps(scores, -math.inf).tolist() == [1] * 5
    assert exit_steps(scores, 0.0).tolist() == [1] * 5
    assert exit_steps(scores.numpy(), 0.85).tolist() == [1, 4, 4, 4, 4]
    with pytest.raises(ValueError, match=r"\(N, T\)"):
        exit_steps(scores[0], 0.5)
    # bf16 scores are compared with tau in float32 (bf16(0.5004) would round tau to 0.5)
    half = torch.full((2, 3), 0.5, dtype=torch.bfloat16)
    assert exit_steps(half, 0.4999).tolist() == [1, 1]
    assert exit_steps(half, 0.5001).tolist() == [3, 3]


# --- adaptive inference on a stand-in with the models' step-wise API ------------------------------

@dataclass
class _Context:
    """What the model precomputes from e once: here B(e); per-sample tensors, as the models' StepContext."""

    e: torch.Tensor
    be: torch.Tensor


class StandIn(nn.Module):
    """Weight-tied residual recurrence with the step-wise API of frost_nb.models."""

    def __init__(self, d_in=6, d=16, k=5, steps=6, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.config = SimpleNamespace(steps=steps)
        self.stem, self.a, self.b = nn.Linear(d_in, d), nn.Linear(d, d), nn.Linear(d, d)
        self.cls, self.halt = nn.Linear(d, k), nn.Linear(d, 1)
        self.batch_sizes: list[int] = []

    def embed(self, x):
        return torch.tanh(self.stem(x))

    def context(self, e):
        return _Context(e, self.b(e))

    def init_state(self, ctx):
        return ctx.e

    def prologue(self, x):  # as FrostNet's: embed, context, init_state
        ctx = self.context(self.embed(x))
        return self.init_state(ctx), ctx

    def step(self, h, ctx, t):
        self.batch_sizes.append(h.shape[0])
        return h + 0.5 * torch.tanh(self.a(h)) + 0.2 * ctx.be

    def readout(self, h, ctx):
        pooled = h + ctx.e
        return self.cls(pooled), 4.0 * self.halt(pooled).squeeze(-1), pooled

    def forward(self, x):
        ctx = self.context(self.embed(x))
        h, logits, halts = self.init_state(ctx), [], []
        for t in range(self.config.steps):
            h = self.step(h, ctx, t)
            lg, hl, _ = self.readout(h, ctx)
            logits.append(lg)
            halts.append(hl)
        return SimpleNamespace(logits=torch.stack(logits, 1), halt_logits=torch.stack(halts, 1))


@pytest.fixture(scope="module")
def standin():
    model = StandIn().eval()
    x = torch.randn(300, 6, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(x)
    scores = torch.sigmoid(out.halt_logits)
    return model, x, out, scores


def _check_adaptive(model, x, out, scores, tau):
    res = adaptive_predict(model, x, tau, return_scores=True)
    assert isinstance(res, AdaptiveResult)
    depth = exit_steps(scores, tau)
    assert torch.equal(res.depth, depth)
    at_exit = out.logits[torch.arange(len(x)), depth - 1]  # (N, K)
    assert torch.allclose(res.logits, at_exit, atol=1e-5)
    assert torch.allclose(res.halt_scores, scores[torch.arange(len(x)), depth - 1], atol=1e-6)
    return res


def test_adaptive_predict_matches_full_depth(standin):
    model, x, out, scores = standin
    taus = [float(torch.quantile(scores, q)) for q in (0.1, 0.3, 0.5, 0.7, 0.9)]
    for tau in taus:
        _check_adaptive(model, x, out, scores, tau)
    depth = exit_steps(scores, taus[2])
    assert len(depth.unique()) >= 4  # the median threshold spreads exits over many steps


def test_adaptive_predict_extremes(standin):
    model, x, out, scores = standin
    t = model.config.steps
    res = _check_adaptive(model, x, out, scores, math.inf)
    assert (res.depth == t).all()
    assert torch.allclose(res.logits, out.logits[:, -1], atol=1e-5)
    for tau in (-math.inf, float(scores.min()) - 1e-3):
        res = _check_adaptive(model, x, out, scores, tau)
        assert (res.depth == 1).all()
    model.batch_sizes.clear()
    adaptive_predict(model, x, -math.inf)
    assert model.batch_sizes == [len(x)]  # everyone left after one step: no more work


@pytest.mark.parametrize("compact_below", [0.0, 0.5, 0.9])
def test_lazy_compaction_keeps_every_exit_and_carries_the_exited_rows_until_it_pays(standin, compact_below):
    """compact_below < 1: the same exits, logits and scores as compacting at every exit; the
    exited rows ride along until the running share falls to compact_below (0: to the end)."""
    model, x, out, scores = standin
    tau = float(torch.quantile(scores, 0.5))
    model.batch_sizes.clear()
    res = adaptive_predict(model, x, tau, return_scores=True, compact_below=compact_below)
    depth = exit_steps(scores, tau)
    assert torch.equal(res.depth, depth)
    assert torch.allclose(res.logits, out.logits[torch.arange(len(x)), depth - 1], atol=1e-5)
    assert torch.allclose(res.halt_scores, scores[torch.arange(len(x)), depth - 1], atol=1e-6)
    running = [int((depth >= t + 1).sum()) for t in range(len(model.batch_sizes))]
    assert all(c >= r for c, r in zip(model.batch_sizes, running))  # never fewer rows than running
    if compact_below == 0.0:
        assert set(model.batch_sizes) == {len(x)}  # never compacted
    else:
        assert sum(model.batch_sizes) > int(depth.sum())  # some exited rows were carried
        assert model.batch_sizes[-1] < len(x)  # and dropped once enough had exited
    with pytest.raises(ValueError, match="compact_below"):
        adaptive_predict(model, x, tau, compact_below=1.5)


def test_adaptive_predict_really_compacts(standin):
    model, x, out, scores = standin
    tau = float(torch.quantile(scores, 0.5))
    model.batch_sizes.clear()
    res = adaptive_predict(model, x, tau)
    sizes = model.batch_sizes
    # batch size at step t is the number of samples with depth >= t+1
    expected = [int((exit_steps(scores, tau) >= t + 1).sum()) for t in range(len(sizes))]
    assert sizes == expected
    assert sizes[0] == len(x) and sizes[-1] < len(x) // 2
    assert all(a >= b for a, b in zip(sizes, sizes[1:]))
    assert sum(sizes) == int(res.depth.sum())  # work done = total depth, not N * T
    assert res.halt_scores is None


def test_adaptive_predict_handles_plain_tensor_context():
    """A model without context(): its prologue gives the embedding itself as the per-sample context."""
    class NoContext(StandIn):
        context = None  # no context(): step and readout take e

        def prologue(self, x):
            e = self.embed(x)
            return e, e

        def step(self, h, e, t):
            return h + 0.5 * torch.tanh(self.a(h)) + 0.2 * self.b(e)

        def readout(self, h, e):
            return self.cls(h + e), 4.0 * self.halt(h + e).squeeze(-1), h

    model = NoContext().eval()
    x = torch.randn(50, 6)
    with torch.no_grad():
        e = model.embed(x)
        h, logits, halts = e, [], []
        for t in range(model.config.steps):
            h = model.step(h, e, t)
            lg, hl, _ = model.readout(h, e)
            logits.append(lg)
            halts.append(hl)
    out = SimpleNamespace(logits=torch.stack(logits, 1), halt_logits=torch.stack(halts, 1))
    scores = torch.sigmoid(out.halt_logits)
    _check_adaptive(model, x, out, scores, float(scores.median()))


def test_adaptive_predict_under_bf16_autocast(standin):
    model, x, _, _ = standin
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        out = model(x)
        scores = torch.sigmoid(out.halt_logits.float())
        res = adaptive_predict(model, x, float(scores.median()), return_scores=True)
    assert res.logits.shape == (len(x), 5) and res.halt_scores.dtype == torch.float32
    assert ((res.depth >= 1) & (res.depth <= model.config.steps)).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_inputs_and_adaptive_predict():
    cal = HaltingCalibrator().update(torch.rand(64, 16, device="cuda", dtype=torch.bfloat16))
    assert cal.n == 1024
    model = StandIn().eval().cuda()
    x = torch.randn(500, 6, device="cuda")
    with torch.no_grad():
        out = model(x)
    scores = torch.sigmoid(out.halt_logits)
    tau = float(scores.median())
    res = adaptive_predict(model, x, tau)
    depth = exit_steps(scores, tau)
    assert res.depth.is_cuda and res.logits.is_cuda
    # batch-size-dependent kernels may move a score across tau by an ulp: allow a few flips
    same = res.depth == depth
    assert same.float().mean() > 0.99
    at_exit = out.logits[torch.arange(len(x), device="cuda"), depth - 1]
    assert torch.allclose(res.logits[same], at_exit[same], atol=1e-4)
    cal.update(scores)
    y = torch.zeros(500, dtype=torch.int64, device="cuda")
    df = curve(_pass(out, scores, y), calibrator=cal, quantiles=[0.5, 1.0])
    assert df.mean_depth.iloc[1] == model.config.steps


# --- the curve read off cached outputs (analysis.curves.curve) -------------------------------------

def _pass(out, scores, y):
    """The full-depth pass (on the CPU) of the stand-in's outputs with labels ``y``."""
    return FullDepthPass(scores.cpu(), out.halt_logits.cpu(), out.logits.cpu(), y.cpu())


def test_frost_curve_agrees_with_adaptive_predict(standin):
    model, x, out, scores = standin
    y = torch.randint(0, 5, (len(x),), generator=torch.Generator().manual_seed(1))
    cal = HaltingCalibrator().update(scores)
    qs = [0.125, 0.25, 0.5, 0.75, 0.875, 1.0]
    df = curve(_pass(out, scores, y), calibrator=cal, quantiles=qs)
    assert df["quantile"].tolist() == qs and set(SWEEP_COLUMNS) <= set(df.columns)
    assert df[["val_mean_depth", "val_accuracy"]].isna().all().all()  # no held-out pass given
    for row in df.itertuples():
        res = adaptive_predict(model, x, row.threshold)
        d = res.depth.double()
        assert math.isclose(row.mean_depth, d.mean().item(), rel_tol=1e-12)
        assert math.isclose(row.std_depth, d.std(unbiased=False).item(), abs_tol=1e-12)
        assert math.isclose(row.accuracy, (res.logits.argmax(1) == y).double().mean().item())
    last = df.iloc[-1]
    assert last.threshold == math.inf and last.mean_depth == model.config.steps
    assert last.std_depth == 0.0
    assert math.isclose(last.accuracy, (out.logits[:, -1].argmax(1) == y).double().mean().item())
    assert df["mean_depth"].is_monotonic_increasing
    with pytest.raises(TypeError, match="calibrator must be a HaltingCalibrator"):
        curve(_pass(out, scores, y), calibrator=object(), quantiles=qs)
    with pytest.raises(TypeError, match="full-depth passes"):
        curve((scores, out.logits, y), calibrator=cal, quantiles=qs)  # tensors, not a pass


# --- the real models, once frost_nb.models provides the step-wise API ---------------------------

def _real_model(name, backbone, **overrides):
    models = pytest.importorskip("frost_nb.models")
    if not hasattr(models, "create_model"):
        pytest.skip("frost_nb.models has no create_model yet")
    from frost_nb.config import make_config

    cfg = make_config("smoke", "digits", name, backbone, **overrides).model
    model = models.create_model(cfg).eval()
    for attr in ("embed", "init_state", "step", "readout"):
        if not hasattr(model, attr):
            pytest.skip(f"the model has no step-wise {attr}() yet")
    return model, cfg


REAL = [(m, b, {}) for m in ("vanilla", "recurrent", "basic_ssm", "frost")
        for b in ("resnet", "vit")]
REAL += [("frost", b, {"model.update": u}) for u in ("convex", "gated") for b in ("resnet", "vit")]
REAL += [("frost", "resnet", {"model.init_state": "zeros"})]
REAL += [("frost", b, {"model.update": u, "model.halt_norm": True}) for u in ("leaky", "leaky_gated")
         for b in ("resnet", "vit")]
REAL += [("frost", "vit", {"model.update": "leaky", "model.scaled_inside": True, "model.learn_hurst": True,
                           "model.hurst_param": "free"})]


@pytest.mark.parametrize("name,backbone,overrides", REAL)
def test_adaptive_predict_on_real_models(name, backbone, overrides):
    model, cfg = _real_model(name, backbone, **overrides)
    torch.manual_seed(0)
    x = torch.randn(40, cfg.in_channels, cfg.image_size, cfg.image_size)
    with torch.no_grad():
        out = model(x)
    scores = torch.sigmoid(out.halt_logits.float())
    sizes: list[int] = []
    step = model.step

    def counting_step(h, ctx, t):
        sizes.append(h.shape[0])
        return step(h, ctx, t)

    model.step = counting_step  # instance attribute: records the active batch per step
    for tau in (float(scores.median()), math.inf, -math.inf):
        sizes.clear()
        res = adaptive_predict(model, x, tau)
        depth = exit_steps(scores, tau)
        assert torch.equal(res.depth, depth)
        assert sum(sizes) == int(depth.sum())  # work done = total depth
        at_exit = out.logits[torch.arange(len(x)), depth - 1]
        assert torch.allclose(res.logits, at_exit, atol=1e-4, rtol=1e-4)


# --- compaction: dataclass contexts are copied row by row with index_select -------------------

@dataclass
class _DataContext:
    """A dataclass context like the models' StepContext; ``shared`` is not per sample."""

    e: torch.Tensor
    be: torch.Tensor
    shared: torch.Tensor | None = None


class _DataStandIn(StandIn):
    def __init__(self, shared: bool):
        super().__init__()
        self.shared = torch.ones(1, 16) if shared else None

    def context(self, e):
        return _DataContext(e, self.b(e), self.shared)

    def step(self, h, ctx, t):
        extra = 0.0 if ctx.shared is None else 0.01 * ctx.shared
        return super().step(h, ctx, t) + extra


@pytest.mark.parametrize("shared", [False, True])
def test_adaptive_predict_with_dataclass_context(shared):
    model = _DataStandIn(shared).eval()
    x = torch.randn(120, 6, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        out = model(x)
    scores = torch.sigmoid(out.halt_logits)
    if shared:  # a field that is not per sample: its rows cannot be taken, so it is refused
        with pytest.raises(TypeError, match="cannot take rows of a _DataContext context"):
            adaptive_predict(model, x, float(scores.median()))
        return
    res = _check_adaptive(model, x, out, scores, float(scores.median()))
    assert (res.depth < model.config.steps).any()  # some compaction happened: rows copied field by field


@pytest.mark.parametrize("name", ["vanilla", "recurrent", "basic_ssm", "frost"])
@pytest.mark.parametrize("backbone", ["resnet", "vit"])
def test_compaction_copies_no_stem_output(name, backbone):
    # the models' StepContext keeps the stem output e for init_state only: once the active
    # batch is compacted the context holds B(e) and GAP(D(e)) of the active rows, no e
    # (nothing for vanilla and recurrent), and the exits are those of the full forward
    model, cfg = _real_model(name, backbone, **{"model.stem_stride": 4} if backbone == "resnet"
                             else {})
    torch.manual_seed(1)
    x = torch.randn(48, cfg.in_channels, cfg.image_size, cfg.image_size)
    with torch.no_grad():
        out = model(x)
    scores = torch.sigmoid(out.halt_logits.float())
    seen = []
    step = model.step

    def recording_step(h, ctx, t):
        fields = {k: v for k, v in vars(ctx).items() if v is not None}
        seen.append((h.shape[0], sorted(fields), {v.shape[0] for v in fields.values()}))
        return step(h, ctx, t)

    model.step = recording_step
    _check_adaptive(model, x, out, scores, float(scores.quantile(0.5)))
    bcd = ["be", "d_pooled"] if name in ("basic_ssm", "frost") else []
    assert seen[0] == (48, sorted(["e", *bcd]), {48})
    compacted = [s for s in seen if s[0] < 48]
    assert compacted  # some samples exited before T
    for n_active, fields, rows in compacted:
        assert fields == bcd and rows <= {n_active}


# --- bad input at the entry points (issue 18) ----------------------------------------------------

@pytest.fixture(scope="module")
def smoke_model():
    """The smoke FROST (ResNet, 1 x 8 x 8 images, T = 4), untrained, and a batch of images."""
    from frost_nb.config import make_config
    from frost_nb.models import create_model

    torch.manual_seed(0)
    model = create_model(make_config("smoke").model).eval()
    return model, torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_adaptive_predict_refuses_non_finite_pixels(smoke_model, bad):
    model, x = smoke_model
    x = x.clone()
    x[2, 0, 3, 4] = bad  # used to give NaN logits for that image, at full depth
    with pytest.raises(ValueError, match=r"x has 1 NaN or infinite pixel value\(s\) out of 384"):
        adaptive_predict(model, x, 0.5)


@pytest.mark.parametrize("tau", [float("nan"), np.float32("nan"), torch.tensor(float("nan")),
                                 "0.5", None, True])
def test_adaptive_predict_and_exit_steps_refuse_a_tau_that_is_not_a_number(smoke_model, tau):
    # a NaN tau used to run every sample to full depth: p > NaN is False
    model, x = smoke_model
    with pytest.raises(ValueError, match=r"threshold tau=.* (is not a number|must be a real number)"):
        adaptive_predict(model, x, tau)
    with pytest.raises(ValueError, match=r"threshold tau="):
        exit_steps(torch.rand(3, 4), tau)
    # +inf and a one-element tensor are thresholds (threshold(1.0) is +inf)
    assert (adaptive_predict(model, x, math.inf).depth == 4).all()
    assert exit_steps(torch.full((2, 4), 0.7), torch.tensor(0.5)).tolist() == [1, 1]


def test_adaptive_predict_refuses_integer_images_saying_how_to_normalise(smoke_model):
    model, x = smoke_model
    pixels = (x * 60 + 128).clamp(0, 255).to(torch.uint8)
    with pytest.raises(TypeError, match=r"torch.uint8 .*div\(255\)\.sub\(mean\)\.div\(std\).*DATASETS"):
        adaptive_predict(model, pixels, 0.5)  # was "expected scalar type Byte but found Float"
    with pytest.raises(TypeError, match="int64"):
        adaptive_predict(model, pixels.numpy().astype(np.int64), 0.5)
    with pytest.raises(TypeError, match="list"):
        adaptive_predict(model, x.tolist(), 0.5)


def test_adaptive_predict_converts_float_numpy_images(smoke_model):
    # a numpy array used to fail in conv2d with torch's long list of signatures
    model, x = smoke_model
    ref = adaptive_predict(model, x, 0.5, return_scores=True)
    for arr in (x.numpy(), x.numpy().astype(np.float64)):
        res = adaptive_predict(model, arr, 0.5, return_scores=True)
        assert res.logits.dtype == torch.float32 and torch.equal(res.depth, ref.depth)
        assert torch.allclose(res.logits, ref.logits, atol=1e-6)
    res = adaptive_predict(model, x.double(), 0.5)  # a float64 tensor too
    assert torch.allclose(res.logits, ref.logits, atol=1e-6)


def test_adaptive_predict_refuses_a_missing_batch_dimension_and_wrong_channels(smoke_model):
    model, x = smoke_model
    with pytest.raises(ValueError, match=r"shape \(1, 8, 8\), no batch dimension.*x\[None\]"):
        adaptive_predict(model, x[0], 0.5)  # was a GroupNorm shape error
    with pytest.raises(ValueError, match=r"shape \(6, 8, 8\), no batch dimension.*x\[:, None\]"):
        adaptive_predict(model, x[:, 0], 0.5)  # one-channel images without their channel axis
    with pytest.raises(ValueError, match=r"x has 3 channel\(s\) .*takes 1"):
        adaptive_predict(model, x.expand(6, 3, 8, 8), 0.5)
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        adaptive_predict(model, x[None], 0.5)


def test_adaptive_predict_other_image_size_only_for_resnet_when_allowed(smoke_model):
    model, x = smoke_model
    big = torch.nn.functional.interpolate(x, size=(12, 12))
    with pytest.raises(ValueError, match=r"12x12, the model was built for 8x8.*allow_other_size"):
        adaptive_predict(model, big, 0.5)  # ran silently before
    res = adaptive_predict(model, big, 0.5, allow_other_size=True)  # fully convolutional
    assert res.logits.shape == (6, 10) and ((res.depth >= 1) & (res.depth <= 4)).all()

    vit, _ = _real_model("frost", "vit")
    with pytest.raises(ValueError, match=r"12x12, the ViT model takes 8x8.*position embedding"):
        adaptive_predict(vit, big, 0.5, allow_other_size=True)  # was a broadcast error


def test_curve_refuses_bad_scores_and_mismatched_labels(standin):
    _, _, out, scores = standin
    y = torch.randint(0, 5, (len(scores),), generator=torch.Generator().manual_seed(1))
    cal = HaltingCalibrator().update(scores)
    for bad, kind in ((float("nan"), "1 NaN"), (float("inf"), "1 infinite"),
                      (1.5, "1 finite but outside")):
        broken = scores.clone()
        broken[7, 2] = bad  # a NaN score used to count as "never exits"
        with pytest.raises(ValueError, match=f"curve: the scores hold {kind}"):
            curve(_pass(out, broken, y), calibrator=cal, quantiles=[0.5])
    with pytest.raises(ValueError, match=r"halt_logits"):
        curve(_pass(out, torch.logit(scores), y), calibrator=cal, quantiles=[0.5])  # logits, not probabilities
    shape = r"a full-depth pass holds scores and halt_logits \(N, T\), logits \(N, T, K\) and labels y \(N,\)"
    with pytest.raises(ValueError, match=shape):
        _pass(out, scores, y[:1])  # used to broadcast one label to all
    with pytest.raises(ValueError, match=shape):
        FullDepthPass(scores, out.halt_logits, out.logits[:, :, 0], y)  # step logits without K
    with pytest.raises(ValueError, match=shape):
        FullDepthPass(scores[:, 0], out.halt_logits, out.logits, y)


# --- continuous batching: stream_predict against adaptive_predict (issue 33) -----------------------

# Exits may differ only where a sample's score (or a rule's signal) lies within float noise of the
# threshold: a row stepped beside other rows goes through kernels blocked for another batch
# size, which moves its logits by up to about 5e-7 here (float32, smoke models). A score within
# SCORE_TIE of tau, or a signal within SIGNAL_TIE (relative) of a rule's threshold, at a step
# between the two exit depths, may flip; logits are compared within LOGIT_TOL.
SCORE_TIE, SIGNAL_TIE, LOGIT_TOL = 1e-5, 1e-4, dict(rtol=1e-4, atol=1e-5)
WEIGHT_TIED = ("recurrent", "basic_ssm", "frost")


def _stream_model(name, backbone="resnet", n=70, steps=6, seed=0):
    from frost_nb.config import make_config
    from frost_nb.models import create_model

    torch.manual_seed(seed)
    cfg = make_config("smoke", None, name, backbone, **{"model.steps": steps}).model
    model = create_model(cfg).eval()
    x = torch.randn(n, cfg.in_channels, cfg.image_size, cfg.image_size,
                    generator=torch.Generator().manual_seed(seed + 1))
    return model, x


def _assert_same_exits(res, ref, near_threshold):
    """Equal depths but where ``near_threshold(row, d1, d2)``; logits within LOGIT_TOL where equal."""
    differ = (res.depth != ref.depth).nonzero().squeeze(1).tolist()
    for i in differ:
        assert near_threshold(i, int(res.depth[i]), int(ref.depth[i])), (i, res.depth[i], ref.depth[i])
    same = res.depth == ref.depth
    torch.testing.assert_close(res.logits[same], ref.logits[same], **LOGIT_TOL)
    return len(differ)


@pytest.mark.parametrize("name", WEIGHT_TIED)
@pytest.mark.parametrize("backbone", ["resnet", "vit"])
def test_stream_predict_exits_as_adaptive_predict_does(name, backbone, monkeypatch):
    """FROST's threshold at three quantiles; slot counts of 1, one that divides nothing (7), one
    that leaves a short last refill (16) and one larger than the whole stream (100); images
    embedded stream_ahead(slots) ahead (the default), exactly as admitted (1), or in other counts,
    in prologue calls of EMBED_CHUNK images or of 16 (several a look-ahead)."""
    from frost_nb import halting

    model, x = _stream_model(name, backbone)
    with torch.no_grad():
        scores = torch.sigmoid(model(x).halt_logits.float())  # (N, T) full depth
    flips = 0
    for q in (0.2, 0.5, 0.8):
        tau = float(scores.quantile(q))
        ref = adaptive_predict(model, x, tau, return_scores=True)
        assert len(ref.depth.unique()) >= 2  # the exits spread over several steps

        def near(i, d1, d2):
            return bool((scores[i, min(d1, d2) - 1:max(d1, d2)] - tau).abs().min() < SCORE_TIE)

        for slots, embed, chunk in ((1, None, 128), (7, None, 128), (7, 1, 128), (7, 5, 128), (16, None, 128),
                                    (16, 40, 16), (100, None, 16)):
            monkeypatch.setattr(halting, "EMBED_CHUNK", chunk)
            res = stream_predict(model, x, tau, slots=slots, embed_batch=embed, return_scores=True)
            assert isinstance(res, AdaptiveResult) and res.logits.shape == ref.logits.shape
            flips += _assert_same_exits(res, ref, near)
            same = res.depth == ref.depth
            torch.testing.assert_close(res.halt_scores[same], ref.halt_scores[same], rtol=1e-5, atol=1e-6)
    assert flips <= 2  # a tie is rare: the exits are the same almost everywhere


@pytest.mark.parametrize("backbone", ["resnet", "vit"])
def test_stream_predict_exits_as_adaptive_predict_does_for_every_online_rule(backbone):
    """Every OnlineRule (the two-hit rule among them: its per-row count of hits moves with the
    rows), at thresholds inside each signal's range, with 3 and 16 slots (70 images)."""
    from frost_nb.analysis.halting_rules import FIXED, FIXED_RULE, RULES, OnlineRule, candidate_thresholds
    from frost_nb.training import full_depth_pass

    model, x = _stream_model("frost", backbone)
    traj = full_depth_pass(model, [(x, torch.zeros(len(x), dtype=torch.int64))], trajectories=True)
    for rule in (*RULES.values(), FIXED_RULE):
        signal = rule.signal(traj)  # (N, T)
        thresholds = [2.5, 4.5] if rule.name == FIXED else candidate_thresholds(signal, 4)[1:-1]
        for threshold in map(float, thresholds):
            ref = adaptive_predict(model, x, rule=OnlineRule(rule.name, threshold))

            def near(i, d1, d2):
                window = signal[i, max(min(d1, d2) - rule.hits, 0):max(d1, d2)]
                return bool(((window - threshold).abs() <= SIGNAL_TIE * max(1.0, abs(threshold))).any())

            for slots in (3, 16):
                res = stream_predict(model, x, rule=OnlineRule(rule.name, threshold), slots=slots)
                _assert_same_exits(res, ref, near)


class _Counting:
    """Wraps a model's step: the rows of every call."""

    def __init__(self, model):
        self.sizes: list[int] = []
        step = model.step

        def counting(h, ctx, t):
            self.sizes.append(h.shape[0])
            return step(h, ctx, t)

        model.step = counting


def test_stream_keeps_the_slots_full_and_does_the_work_of_the_exits_only(monkeypatch):
    import frost_nb.halting as halting

    model, x = _stream_model("frost", n=100)
    with torch.no_grad():
        tau = float(torch.sigmoid(model(x).halt_logits.float()).quantile(0.4))
    steps = model.config.steps
    counter = _Counting(model)
    copies: list[int] = []  # the step count at each row move of the running rows
    compact = halting._compact
    monkeypatch.setattr(halting, "_compact", lambda *a: copies.append(len(counter.sizes)) or compact(*a))
    res = stream_predict(model, x, tau, slots=16)
    sizes = list(counter.sizes)
    assert sum(sizes) == int(res.depth.sum())  # every step call is on running samples only
    tail = next((i for i, s in enumerate(sizes) if s < 16), len(sizes))  # the feed has run dry
    assert tail > 0 and set(sizes[:tail]) == {16}  # until then every call has all 16 slots full
    assert sizes[tail:] == sorted(sizes[tail:], reverse=True) and len(sizes) - tail <= steps
    # new images took the exited rows in place: the running rows are copied only in the tail
    assert copies and min(copies) >= tail
    # batch-at-a-time does the same work in more calls: each batch drains on fewer rows
    counter.sizes.clear()
    for b in range(0, len(x), 16):
        adaptive_predict(model, x[b:b + 16], tau)
    assert sum(counter.sizes) == sum(sizes) and len(counter.sizes) > len(sizes)


@pytest.mark.parametrize("refill_at", [1, 4, 16])
def test_stream_refill_at_changes_when_slots_refill_not_the_exits(refill_at):
    model, x = _stream_model("basic_ssm", n=60)
    with torch.no_grad():
        scores = torch.sigmoid(model(x).halt_logits.float())
    tau = float(scores.quantile(0.5))
    ref = adaptive_predict(model, x, tau)
    counter = _Counting(model)
    res = stream_predict(model, x, tau, slots=16, refill_at=refill_at)
    near = lambda i, d1, d2: bool((scores[i, min(d1, d2) - 1:max(d1, d2)] - tau).abs().min() < SCORE_TIE)
    _assert_same_exits(res, ref, near)
    # slots are refilled only once refill_at of them are free (never more than 16 rows at once)
    assert max(counter.sizes) == 16 and sum(counter.sizes) == int(res.depth.sum())
    if refill_at == 16:  # a new slot batch starts only when the last has drained: batch-at-a-time
        stream_sizes = list(counter.sizes)
        counter.sizes.clear()
        for b in range(0, len(x), 16):
            adaptive_predict(model, x[b:b + 16], tau)
        assert stream_sizes == counter.sizes


def test_stream_embeds_the_next_images_ahead_in_batches(monkeypatch):
    """The stem runs on stream_ahead(slots) images (default) or embed_batch ahead of their admission, so
    admitting the few rows that exits free is a row copy; embed_batch = 1 runs it on the rows admitted."""
    from frost_nb import halting
    from frost_nb.halting import stream_steps

    model, x = _stream_model("frost", n=100)
    with torch.no_grad():
        tau = float(torch.sigmoid(model(x).halt_logits.float()).quantile(0.4))
    calls: list[int] = []
    real = model.prologue
    monkeypatch.setattr(model, "prologue", lambda xb: calls.append(xb.shape[0]) or real(xb))
    monkeypatch.setattr(halting, "stream_ahead", lambda slots: 40)
    sizes = {}
    for embed in (None, 1, 16, 64):
        calls.clear()
        events = list(stream_steps(model, x, tau, slots=16, embed_batch=embed))
        entered = [e.rows.numel() for e in events if e.kind == "admit"]
        assert calls == entered and sum(calls) == 100  # an "admit" event for each stem call
        sizes[embed] = list(calls)
    assert sizes[None][0] == 40 and sizes[16][0] == 16 and sizes[64][0] == 64  # topped up to the look-ahead
    assert len(sizes[64]) <= 3 and len(sizes[None]) <= 4
    assert len(sizes[1]) >= len(sizes[16]) > len(sizes[None]) >= len(sizes[64])
    assert max(sizes[1][1:]) < 16  # embed_batch = 1: the stem on the rows that exits freed only
    monkeypatch.setattr(halting, "EMBED_CHUNK", 16)  # what is taken ahead is embedded 16 images a call
    calls.clear()
    entered = [e.rows.numel() for e in stream_steps(model, x, tau, slots=16) if e.kind == "admit"]
    assert entered == sizes[None] and calls[:3] == [16, 16, 8] and sum(calls) == 100 and max(calls) == 16


def test_put_writes_the_same_rows_whether_or_not_they_are_copied_as_16_byte_elements(monkeypatch):
    from frost_nb.halting import _put

    wide = []  # the dtypes index_copy_ writes in
    real = torch.Tensor.index_copy_
    monkeypatch.setattr(torch.Tensor, "index_copy_", lambda u, *a: wide.append(u.dtype) or real(u, *a))
    gen = torch.Generator().manual_seed(0)
    for shape, dtype in (((12, 8), torch.complex128), ((12, 2, 3, 2), torch.complex128),
                         ((12, 3), torch.float32), ((12,), torch.float32)):  # rows of 32, 48, 12 bytes; 1-d
        rows, new = torch.randn(shape, generator=gen), torch.randn((7, *shape[1:]), generator=gen)
        pos = torch.tensor([1, 4, 5, 10])
        expected = rows.clone().index_copy_(0, pos, new[2:6])
        wide.clear()
        _put([rows], pos, [new], 2)
        assert torch.equal(rows, expected) and wide == [dtype], shape
    rows, new = torch.randn(12, 9)[:, :8], torch.randn(7, 8)  # not contiguous: written as floats
    expected = rows.clone().index_copy_(0, torch.tensor([3]), new[:1])
    wide.clear()
    _put([rows], torch.tensor([3]), [new], 0)
    assert torch.equal(rows, expected) and wide == [torch.float32]


def test_a_stream_of_one_tensor_is_checked_an_embedding_at_a_time_naming_the_images():
    model, x = _stream_model("frost", n=100)
    bad = x.clone()
    bad[70, 0, 1, 1] = float("inf")
    with pytest.raises(ValueError, match=r"images\[64:96\] has 1 NaN or infinite pixel"):
        stream_predict(model, bad, 0.5, slots=8, embed_batch=32)


def test_stream_of_uneven_batches_returns_input_order_and_reports_admissions_and_exits():
    from frost_nb.halting import stream_steps

    model, x = _stream_model("recurrent", n=45)
    with torch.no_grad():
        scores = torch.sigmoid(model(x).halt_logits.float())
    tau = float(scores.quantile(0.5))
    ref = adaptive_predict(model, x, tau, return_scores=True)
    parts = [x[:5], x[5:5], x[5:18], x[18:20], x[20:].numpy()]  # an empty batch and a numpy one
    near = lambda i, d1, d2: bool((scores[i, min(d1, d2) - 1:max(d1, d2)] - tau).abs().min() < SCORE_TIE)
    for slots in (4, 10, 64):  # shorter than one slot batch, and not a multiple of the batches
        res = stream_predict(model, iter(parts), tau, slots=slots, return_scores=True)
        _assert_same_exits(res, ref, near)
    events = list(stream_steps(model, parts, tau, slots=10))
    admitted = torch.cat([e.rows for e in events if e.kind == "admit"])
    exited = torch.cat([e.rows for e in events if e.kind == "exit"])
    assert admitted.tolist() == list(range(45))  # in input order, each once
    assert sorted(exited.tolist()) == list(range(45))
    seen: set[int] = set()
    for e in events:  # nothing exits before it was admitted
        if e.kind == "admit":
            seen |= set(e.rows.tolist())
        else:
            assert set(e.rows.tolist()) <= seen and e.depth.shape == e.rows.shape


def test_an_empty_stream_gives_an_empty_result():
    model, x = _stream_model("frost", n=4)
    for empty in ([], x[:0], iter([x[:0], x[:0]])):
        res = stream_predict(model, empty, 0.5, return_scores=True)
        assert res.logits.shape == (0, model.config.num_classes) and res.depth.shape == (0,)
        assert res.depth.dtype == torch.int64 and res.halt_scores.shape == (0,)


def test_stream_predict_refuses_bad_input_naming_the_batch_and_the_fix():
    from frost_nb.analysis.halting_rules import OnlineRule

    model, x = _stream_model("frost", n=12)
    bad = x[8:].clone()
    bad[1, 0, 2, 2] = float("nan")
    with pytest.raises(ValueError, match=r"batch 2 of the stream has 1 NaN or infinite pixel"):
        stream_predict(model, [x[:4], x[4:8], bad], 0.5)
    with pytest.raises(ValueError, match=r"batch 1 of the stream holds images of shape \(1, 4, 4\), "
                                         r"the first batch \(1, 8, 8\)"):
        stream_predict(model, [x[:4], x[4:8, :, :4, :4]], 0.5, allow_other_size=True)
    with pytest.raises(ValueError, match=r"batch 1 of the stream has images of 4x4"):
        stream_predict(model, [x[:4], x[4:8, :, :4, :4]], 0.5)
    for slots in (0, -3, 2.5):
        with pytest.raises(ValueError, match=r"slots=.*the number of samples stepped together"):
            stream_predict(model, x, 0.5, slots=slots)
    with pytest.raises(ValueError, match=r"refill_at=9(\.0)? is outside \[1, 8\].*slots are free"):
        stream_predict(model, x, 0.5, slots=8, refill_at=9)
    with pytest.raises(ValueError, match=r"embed_batch=0(\.0)? is outside .*images embedded together, ahead"):
        stream_predict(model, x, 0.5, slots=8, embed_batch=0)
    with pytest.raises(ValueError, match=r"threshold tau=nan (is not a number|must be a real number)"):
        stream_predict(model, x, float("nan"))
    with pytest.raises(TypeError, match="either tau"):
        stream_predict(model, x, 0.5, rule=OnlineRule("confidence", 0.9))
    vanilla, _ = _stream_model("vanilla", n=2)
    with pytest.raises(ValueError, match=r"weight-tied step.*vanilla's step depends on t.*use adaptive_predict"):
        stream_predict(vanilla, x, 0.5)
