"""The scale ladder's read-out (docs/method.md section 15, fixed before any ladder run): the quantities,
their OLS fits against ln(parameters) and ``reading``, and the precision check of the bf16 rungs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import paper
from ..paper import TABLE1_STEP
from .stats import t_quantile, welch

PAPER_DEPTHS = (4.37, 6.06, 8.30)  # Table 2's mean depths at q = 12.5%, 25%, 50%
TOWARD, AWAY, FLAT, UNRESOLVED, NO_FIT = "toward", "away", "flat", "unresolved", "no fit"
MEETS = "meets"  # the band holds the paper's value within the span (``Fit.meets_from`` says from where)
RISES, FALLS = "rises", "falls"  # quantities without a paper value: the direction alone


@dataclass(frozen=True)
class Quantity:
    label: str
    paper: float | None  # the paper's value, or its bound or sign's threshold; None: no paper value
    direction: str  # "value" (toward the value), "up" or "down" (a bound or sign), "" (none)
    band: float  # the flat band: a change across the ladder smaller than this does not matter


KEPT_AT = {depth: accuracy / paper.TABLE2["accuracy"][-1]  # Table 2's share of full-depth accuracy by depth
           for depth, accuracy in zip(paper.TABLE2["mean_depth"], paper.TABLE2["accuracy"])}
TABLE1_AT = {m: cells[paper.TABLE1_STEPS.index(TABLE1_STEP)][0] for m, cells in paper.TABLE1.items()}  # mean
QUANTITIES: dict[str, Quantity] = {
    "full_depth": Quantity("full-depth accuracy", paper.TABLE2["accuracy"][-1], "value", 0.01),
    "depth_99": Quantity("first fixed depth with 99% of full-depth accuracy", None, "", 1.0),
    **{f"fixed_kept_{d}": Quantity(f"share kept at mean depth {d}, fixed depth", None, "", 0.02)
       for d in PAPER_DEPTHS},
    **{f"halting_kept_{d}": Quantity(f"share kept at mean depth {d}, FROST's halting", KEPT_AT[d], "value",
                                     0.02) for d in PAPER_DEPTHS},
    "gap": Quantity("claim 14's gap: halting minus fixed depth", 0.0, "up", 0.005),
    "spread": Quantity("its spread: random exits of the same depths minus fixed depth", 0.0, "up", 0.005),
    "ranking": Quantity("its ranking: halting minus random exits of the same depths", 0.0, "up", 0.005),
    "table1": Quantity(f"Table 1: frost minus basic_ssm cosine at t = {TABLE1_STEP}",
                       TABLE1_AT["frost"] - TABLE1_AT["basic_ssm"], "value", 0.02),
    "product_rate": Quantity("claim 2: 8-step Jacobian product rate of frost", 1.0, "down", 0.02),
    "minkowski": Quantity("claim 3: frost minus basic_ssm Minkowski estimate", 0.0, "up", 0.05),
}


FROST_SIDE = {"cosine": "table1", "box_dimension": "minkowski"}  # frost's side -> the paired quantity


@dataclass(frozen=True)
class Fit:
    n: int  # runs
    rungs: int  # distinct sizes
    intercept: float
    slope: float  # per e-fold of parameters
    slope_low: float
    slope_high: float
    span: tuple[float, float]  # the smallest and largest size among the runs fitted
    x_mean: float  # mean of ln N over the runs
    sxx: float  # sum of (ln N - x_mean)^2
    residual_sd: float  # sqrt(residual sum of squares / (n - 2))
    t: float  # the two-sided CONFIDENCE t quantile at n - 2 degrees of freedom

    @property
    def delta(self) -> tuple[float, float, float]:
        """(change, low, high) across the span of the runs fitted."""
        width = math.log(self.span[1] / self.span[0])
        return self.slope * width, self.slope_low * width, self.slope_high * width

    def at(self, params: float) -> float:
        return self.intercept + self.slope * math.log(params)

    def meets_from(self, value: float) -> float | None:
        """The smallest size in the span where the band holds ``value`` (None: nowhere), solving
        (c + b u)^2 <= (t s)^2 (1/n + u^2 / Sxx) in u = ln N - mean exactly."""
        c, b, k = self.intercept + self.slope * self.x_mean - value, self.slope, (self.t * self.residual_sd) ** 2
        quad, lin, const = b * b - k / self.sxx, 2 * c * b, c * c - k / self.n
        f = lambda u: (quad * u + lin) * u + const
        low, high = (math.log(p) - self.x_mean for p in self.span)
        if f(low) <= 0:
            return self.span[0]
        inside = sorted(float(r.real) for r in np.roots([quad, lin, const])  # leading zeros dropped
                        if abs(r.imag) < 1e-12 and low <= r.real <= high)
        return math.exp(inside[0] + self.x_mean) if inside else None

    def crossing(self, value: float) -> float:
        """The size at which the line reaches ``value`` (inf where it is flat or beyond a float's range)."""
        try:
            return math.exp((value - self.intercept) / self.slope) if self.slope else math.inf
        except OverflowError:
            return math.inf


def fit(params: Sequence[float], values: Sequence[float]) -> Fit | None:
    """OLS of values on ln(params) with the slope's two-sided CONFIDENCE t interval (n - 2 degrees
    of freedom); None with fewer than three distinct sizes (or no degree of freedom left)."""
    x, y = np.log(np.asarray(params, dtype=float)), np.asarray(values, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    rungs = len(np.unique(x))
    if rungs < 3:  # (three runs at least, so a degree of freedom is left)
        return None
    xc = x - x.mean()
    sxx = float((xc ** 2).sum())
    slope = float((xc * (y - y.mean())).sum() / sxx)
    intercept = float(y.mean() - slope * x.mean())
    sd = math.sqrt(float(((y - (intercept + slope * x)) ** 2).sum()) / (len(x) - 2))
    t = t_quantile(len(x) - 2)
    half = t * sd / math.sqrt(sxx)
    span = (float(math.exp(x.min())), float(math.exp(x.max())))
    return Fit(len(x), rungs, intercept, slope, slope - half, slope + half, span, float(x.mean()), sxx, sd, t)


def reading(quantity: Quantity, result: Fit | None) -> str:
    """Section 15's reading of one quantity's fit: "meets", "toward" or "away" (the paper's value),
    "rises" or "falls" (none), "flat" inside the quantity's band, else "unresolved"."""
    if result is None:
        return NO_FIT
    if quantity.direction == "value" and result.meets_from(quantity.paper) is not None:
        return MEETS
    _, low, high = result.delta
    if low > 0 or high < 0:
        up = low > 0
        if quantity.direction == "":
            return RISES if up else FALLS
        value = quantity.direction == "value"  # the band at the top lies wholly below or above the value
        wanted_up = quantity.paper > result.at(result.span[1]) if value else quantity.direction == "up"
        return TOWARD if up == wanted_up else AWAY
    return FLAT if -quantity.band <= low and high <= quantity.band else UNRESOLVED


def quantity_points(rows: list[dict]) -> dict[str, list[dict]]:
    """Per quantity, its points (size, seed, params, value): frost's own, or frost minus basic_ssm
    (per size and seed where both runs exist); a point without a value (NaN) is left out."""
    frost = [r for r in rows if r["model"] == "frost"]
    points = {name: [{**r, "value": r[name]} for r in frost if name in r]
              for name in QUANTITIES if name not in FROST_SIDE.values()}
    for side, paired in FROST_SIDE.items():
        other = {(r["size"], r["seed"]): r[side] for r in rows if r["model"] == "basic_ssm" and side in r}
        points[paired] = [{**r, "value": r[side] - other[r["size"], r["seed"]]} for r in frost
                          if side in r and (r["size"], r["seed"]) in other]
    return {name: [p for p in ps if math.isfinite(p["value"])] for name, ps in points.items()}


def quantity_means(rows: list[dict]) -> dict[str, float]:
    """Per quantity, the mean of ``rows``' points (``quantity_points``: a control's, beside the fit)."""
    return {name: _mean([p["value"] for p in points]) for name, points in quantity_points(rows).items()}


def read_out(rows: list[dict]) -> list[dict]:
    """One row per quantity: its fit over the ladder runs ``rows`` (dicts of measures), the change
    across the ladder with its interval, the reading, and where the paper's value is met or crossed."""
    out = []
    for name, points in quantity_points(rows).items():
        q = QUANTITIES[name]
        result = fit([p["params"] for p in points], [p["value"] for p in points])
        verdict = reading(q, result)
        delta = result.delta if result else (math.nan,) * 3
        crossing = result.crossing(q.paper) if verdict == TOWARD and q.direction == "value" else math.nan
        out.append({"quantity": name, "label": q.label, "paper": q.paper, "runs": len(points),
                    "rungs": result.rungs if result else len({p["size"] for p in points}),
                    "intercept": result.intercept if result else math.nan,
                    "slope": result.slope if result else math.nan, "change": delta[0], "change_low": delta[1],
                    "change_high": delta[2], "band": q.band, "reading": verdict, "crossing_params": crossing,
                    "meets_params": result.meets_from(q.paper) if verdict == MEETS else math.nan})
    return out


# the precision check (section 15): the fp32 twin of ladder32 frost seed 0 against the bf16 seeds'
# spread; Table 1 and claim 3 by frost's side (its cosine and box dimension: basic_ssm has 1 seed)
PRECISION_SDS = 3.0
PRECISION_QUANTITIES = (*(n for n in QUANTITIES if n not in FROST_SIDE.values()), *FROST_SIDE)


def _finite(rows: Sequence[dict], name: str) -> list[float]:
    """``name``'s finite values among ``rows`` (a NaN: no value there, e.g. a depth the sweep misses)."""
    return [float(r[name]) for r in rows if name in r and math.isfinite(r[name])]


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def _sd(values: Sequence[float]) -> float:
    """The seeds' standard deviation (n - 1), NaN below two seeds."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def _band(name: str) -> float:
    """The flat band of a quantity (of the paired quantity for frost's side)."""
    return QUANTITIES[FROST_SIDE.get(name, name)].band


def precision_check(bf16: Sequence[dict], fp32: dict, seed: int = 0) -> list[dict]:
    """One row per PRECISION_QUANTITIES entry: the fp32 run's value, its bf16 twin's, their difference
    and whether it is within PRECISION_SDS bf16 sds (None below two seeds); its flat band as context."""
    twin = next((r for r in bf16 if r["seed"] == seed), None)
    if twin is None:
        raise ValueError(f"no bf16 run of seed {seed} among seeds {sorted(r['seed'] for r in bf16)}: "
                         "the precision check compares the fp32 run with its bf16 twin")
    out = []
    for name in PRECISION_QUANTITIES:
        values, diff = _finite(bf16, name), fp32[name] - twin[name]  # NaN where either has no value
        sd, band = _sd(values), _band(name)
        out.append({"quantity": name, "label": QUANTITIES[name].label if name in QUANTITIES else
                    {"cosine": f"frost's cosine at t = {TABLE1_STEP} (Table 1's frost side)",
                     "box_dimension": "frost's Minkowski estimate (claim 3's frost side)"}[name],
                    "bf16": twin[name], "fp32": fp32[name], "difference": diff, "seeds": len(values),
                    "seed_sd": sd, "limit": PRECISION_SDS * sd,
                    "within": None if math.isnan(sd) or math.isnan(diff) else bool(abs(diff) <= PRECISION_SDS * sd),
                    "band": band, "within_band": None if math.isnan(diff) else bool(abs(diff) <= band)})
    return out


def precision_reading(rows: Sequence[dict]) -> tuple[bool | None, str]:
    """(adequate, one line) of ``precision_check``'s rows (None while undecided), naming the quantities
    outside the limit."""
    if undecided := [r["quantity"] for r in rows if r["within"] is None]:
        return None, (f"precision check undecided: {min(r['seeds'] for r in rows)} bf16 seed(s) (it needs 2) "
                      f"or no value for {', '.join(undecided)}")
    outside = [r for r in rows if not r["within"]]
    if not outside:
        return True, f"precision adequate: every quantity within {PRECISION_SDS:g} bf16 seed sd of its bf16 twin"
    small = [r["quantity"] for r in outside if r["within_band"]]
    return False, (f"precision not adequate, outside {PRECISION_SDS:g} bf16 seed sd: "
                   f"{', '.join(r['quantity'] for r in outside)}; of these inside the quantity's flat band "
                   f"(context, not the rule): {', '.join(small) or 'none'}")


SHIFTED, NOT_SHIFTED, CANNOT_TELL = "shifted", "not shifted", "cannot tell"


def precision_shift(bf16: Sequence[dict], fp32: Sequence[dict]) -> list[dict]:
    """After the check (added once it failed, not section 15's rule): per PRECISION_QUANTITIES entry, the
    fp32 seeds' mean minus the bf16 seeds' with its Welch interval, and ``precision``: "shifted", "not
    shifted" or "cannot tell" (the detectable shift exceeds the quantity's flat band)."""
    out = []
    for name in PRECISION_QUANTITIES:
        a, b = _finite(bf16, name), _finite(fp32, name)
        diff, half = welch(b, a) if len(a) > 1 and len(b) > 1 else (_mean(b) - _mean(a), math.nan)
        shifted = None if math.isnan(half) else bool(diff - half > 0 or diff + half < 0)
        out.append({"quantity": name, "bf16_mean": _mean(a), "bf16_seeds": len(a), "bf16_sd": _sd(a),
                    "fp32_mean": _mean(b), "fp32_seeds": len(b), "fp32_sd": _sd(b), "shift": diff,
                    "shift_low": diff - half, "shift_high": diff + half, "shifted": shifted,
                    "detectable": half, "margin": _band(name), "precision": None if shifted is None else
                    SHIFTED if shifted else CANNOT_TELL if half > _band(name) else NOT_SHIFTED})
    return out


def precision_sensitive(shift: Sequence[dict]) -> dict[str, bool | None]:
    """read-out quantity -> whether ``precision_shift`` found it shifted (None: it cannot tell, or
    fewer than two seeds a side)."""
    return {FROST_SIDE.get(r["quantity"], r["quantity"]): None if r.get("precision") == CANNOT_TELL
            else r["shifted"] for r in shift}


PAPER_PARAMS = 1484518  # the paper's CIFAR model (the cifar and ladder256 sizes), where its values are marked
