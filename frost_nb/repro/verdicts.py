"""The verdict tables: the paper's claims decided (``repro.claims``) from the committed metrics files.

Two tables from the same rows: the README's, one row per claim of ``claims.CLAIMS`` (then DF-Mamba's claim 20
once it has rows), its decisive evidence (``summary_rows``, ``_rank``); docs/results.md's, every row
(``verdict_rows``). A file's runs and their settings come from its ``provenance`` alone (notebook 11's
forecasting runs, which it does not hold: from the run keys of its records). A damaged file (``MissingField``,
``MissingRow``) is a ``DamagedInput`` naming it and its fix, never a table without its rows
(``--skip-damaged``: left out, and said so); any other error is a bug and surfaces as itself.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from .. import paper
from ..analysis.fractal import resolution
from ..analysis.ladder import MEETS, TABLE1_AT
from ..config import LossConfig
from ..paths import DamagedInput, one_line, repo_root, restore_hint, shown_path, skip_or_raise
from ..repro import claims as C
from .grids import CLAIM_K, family_of, slug
from ..runs import read_metrics, run_folder

COLUMNS = ("claim", "title", "bundle", "form", "dataset", "size", "seeds", "paper", "ours", "verdict", "notebook")
SUMMARY_HEADER = ("claim", "data set", "seeds", "paper", "ours", "verdict", "over the ladder", "notebook")
FULL_HEADER = ("#", "claim", "bundle", "form", "data set", "seeds", "paper", "ours", "verdict", "notebook")
NA = "n/a"
MARKERS = {"summary": ("<!-- verdicts:start -->", "<!-- verdicts:end -->"),
           "full": ("<!-- verdicts-full:start -->", "<!-- verdicts-full:end -->")}
DATASET_NAMES = {"cifar100": "CIFAR-100", "imagenet100": "ImageNet-100", "fashion-mnist": "Fashion-MNIST",
                 "cifar10": "CIFAR-10", "digits": "digits", "etth2": "ETTh2"}
# the evidence a README row shows: CIFAR-100 under the adopted bundle first, then by data set
# (the paper's first), bundle, the bundle's own frost before a variant, and seeds
DATASET_RANK = ("cifar100", "imagenet100", "fashion-mnist", "cifar10", "digits")
BUNDLE_RANK = ("adopted", "per-step", "residual", NA)
SIZE_RANK = ("ladder64", "demo")  # the paper's structure (100,102 parameters) decides; demo, its control
# where a row's numbers come from: a notebook, or the command that wrote the file
SOURCES = {**{n: n for n in ("01", "02", "03", "04", "05", "06", "07", "08", "10", "11")},
           "15": "docs/fidelity.md", "demo": "make demo", "sweep": "sweep CLI", "bench": "benchmarks/"}
DEFAULT_STRENGTH = (LossConfig().lambda_rel, LossConfig().lambda_abs)


class MissingField(KeyError):
    """A field a claim reads is absent from a metrics record: the file is damaged, not the code."""


class MissingRow(IndexError):
    """A row a claim looks for is absent from a metrics record: the file is damaged, not the code."""


class Record(dict):
    """A metrics record as read from its file (each of its JSON objects): a missing field is a
    ``MissingField`` (a KeyError of the file's, told apart from one of the code's)."""

    def __missing__(self, key):
        raise MissingField(key)


def _first(rows: Iterator) -> Any:
    """The first of ``rows``; a ``MissingRow`` when there is none (a StopIteration would leave the
    claim generators as a RuntimeError)."""
    for row in rows:
        return row
    raise MissingRow("a record lacks the row looked for")


def default_metrics_dir() -> Path:
    """The committed metrics: always the repository's, also in smoke mode."""
    return repo_root() / "outputs" / "metrics"


# ------------------------------------------------------------------------------------------------
# Reading the files

class Metrics:
    """The metrics files of one folder, read on demand; a missing file reads as ``None``, a damaged
    one is a ``DamagedInput`` naming it (inside ``paths.skip_damaged()``: ``None``, and noted there)."""

    def __init__(self, folder: str | os.PathLike | None = None):
        self.folder = Path(folder) if folder is not None else default_metrics_dir()
        self._json: dict[str, Any] = {}
        self.current: Path | None = None  # the file read last: the one a claim that fails was reading

    def damaged(self, path: Path, problem: str) -> DamagedInput:
        return DamagedInput(f"{shown_path(path)}: {problem}; {restore_hint(path, _writer(path.name))}")

    def _read(self, path: Path, parse: Callable[[str], Any]) -> Any:
        self.current = path
        try:
            return parse(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, csv.Error, RecursionError) as err:
            return skip_or_raise(self.damaged(path, f"unreadable ({one_line(err)})"))

    def json(self, name: str) -> dict[str, Any] | None:
        path = self.folder / f"{name}.json"
        self.current = path
        if name not in self._json:
            d = self._read(path, lambda t: json.loads(t, object_hook=Record)) if path.is_file() else None
            problem = (None if d is None else "not a JSON object" if not isinstance(d, dict) else
                       None if isinstance(d.get("provenance"), dict) else  # every writer's (provenance.make)
                       "no provenance record (which runs its numbers come from)")
            self._json[name] = skip_or_raise(self.damaged(path, problem)) if problem else d
        return self._json[name]

    def csv(self, path: Path) -> list[dict[str, float]] | None:
        """The rows of the CSV file ``path`` (a sweep), by header, each whole: ``Record``s of numbers."""
        number = lambda v: float(v) if isinstance(v, str) else v  # an empty or text cell: unreadable
        rows = self._read(path, lambda text: [Record({k: number(v) for k, v in r.items()})
                                              for r in csv.DictReader(text.splitlines())])
        if rows is not None and any(None in r or None in r.values() for r in rows):
            return skip_or_raise(self.damaged(path, "a row with other fields than its header (cut off?)"))
        return rows

    def names(self, pattern: str) -> list[str]:
        """Stems of the metrics JSON files matching ``pattern`` (no sidecars), sorted; each is read
        here, so a damaged one stops the tables before any row (or, skipped, is not named)."""
        return [stem for stem in sorted(p.stem for p in self.folder.glob(f"{pattern}.json"))
                if not stem.endswith(".provenance") and self.json(stem) is not None]

    def files(self, pattern: str) -> Iterator[dict]:
        return map(self.json, self.names(pattern))  # names() keeps the readable objects only


def _runs(d: dict) -> dict[str, dict]:
    """run name -> settings of every run the provenance of file ``d`` names."""
    return (d.get("provenance") or {}).get("settings", {})


def settings(d: dict, key: str | None) -> dict | None:
    """The provenance settings of run ``key`` in file ``d``; None when it names no such run."""
    return _runs(d).get(key) if key else None


def labelled(d: dict, label: str, seed: int | None = None) -> list[tuple[str, dict]]:
    """The runs of ``d`` its provenance labels ``label`` (and ``seed``), as (name, settings)."""
    return [(k, s) for k, s in _runs(d).items() if s.get("label") == label and seed in (None, s["seed"])]


def run_of(d: dict, row: dict, bundle: str | None = None) -> dict | None:
    """The settings of the run behind one record of ``d``: by its ``key``, else by its label
    (``run`` or ``model``, without a seed tag) and ``seed`` among the provenance's runs; where
    several match (a file that sets two bundles side by side), the one of bundle ``bundle``."""
    if "key" in row:
        return settings(d, row["key"])
    label = family_of(row.get("run") or row.get("model") or "")
    if not (found := labelled(d, label, row.get("seed"))):  # unlabelled run: by the name a grid gives it
        tail = f"/{slug(label)}-seed{row.get('seed', 0)}"
        found = [(k, s) for k, s in _runs(d).items() if k.endswith(tail)]
    if len(found) > 1 and bundle is not None:
        found = [(k, s) for k, s in found if s["bundle"] == bundle]
    return found[0][1] if len(found) == 1 else None


def is_frost(s: dict | None) -> bool:
    """FROST as the paper trains it: the frost model with its ranking losses."""
    return s is not None and s["model"] == "frost" and bool(s["ranking"])


def form(s: dict | None) -> str:
    return NA if s is None or s["model"] != "frost" else \
        s["update"] + ("" if s["init_state"] == "embedding" else ", h0 = 0")


def own_form(s: dict) -> bool:
    """Whether ``s`` is its bundle's own frost (not a variant of it)."""
    default = {"adopted": "leaky", "per-step": "leaky", "residual": "canonical"}.get(s["bundle"])
    return s["update"] == default and s["init_state"] == "embedding" and not s.get("learn_hurst")


def row(claim: int, bundle: str, form_: str, dataset: str, seeds: int | None, paper_: str, ours: str,
        verdict: str, notebook: str, title: str = "", primary: bool = True, size: str | None = None) -> dict[str, Any]:
    """One verdict row; ``size``, the runs' size preset where the rows of a claim come at several."""
    return {"claim": claim, "title": title or C.CLAIM[claim].title, "bundle": bundle, "form": form_,
            "dataset": dataset, "size": size or NA, "seeds": NA if seeds is None else str(seeds), "paper": paper_, "ours": ours,
            "verdict": str(verdict), "notebook": SOURCES.get(notebook, notebook), "primary": primary}


def _row(claim: int, st: dict | None, dataset: str, *cells, **kw) -> dict[str, Any]:
    """``row`` of the runs of settings ``st`` (None: no run named): their bundle, form and size."""
    kw.setdefault("size", st and st.get("size"))  # size=None: a row of no run's size
    return row(claim, st["bundle"] if st else NA, form(st), dataset, *cells, **kw)


def _mean(values) -> float:
    """The mean of ``values``, NaN if there are none or any is missing (a NaN is written as null): a cell
    averages every seed its "seeds" column counts, or shows that it cannot."""
    values = [float("nan") if v is None else v for v in values]
    return sum(values) / len(values) if values else float("nan")


def _by(rows, key) -> dict[Any, list]:
    out: dict[Any, list] = {}
    for r in rows:
        out.setdefault(r[key] if isinstance(key, str) else key(r), []).append(r)
    return out


def _source(name: str) -> str:
    return SOURCES.get(name[:2] if name[:2].isdigit() else name.split("_")[0], name)


def _writer(name: str) -> str:
    """What writes the metrics file ``name`` again: its notebook, or the command of ``SOURCES``."""
    source = _source(name)
    if source.isdigit():
        return f"run notebooks/{next(iter(_notebook_names(source)), source)} again"
    return {"sweep CLI": "python -m frost_nb sweep --csv FILE",
            "benchmarks/": "run its benchmark in benchmarks/",
            "docs/fidelity.md": "run its experiment again (docs/fidelity.md)"}.get(source, f"run {source} again")


# ------------------------------------------------------------------------------------------------
# Each claim's rows, as generators (a file a claim cannot read drops all of that claim's rows)

def _forms(d: dict) -> Iterator[tuple[list[dict], dict, bool]]:
    """A 15_update_forms file's runs per update form, with their settings and whether they count
    as primary (the bundle's own form, interpolating bundles only)."""
    for runs in _by(d["runs"], lambda r: (r["update"], r["init_state"])).values():
        if (st := run_of(d, runs[0])) is not None:
            yield runs, st, own_form(st) and st["bundle"] != "residual"


# 1. Table 1 (02: the families; 15_update_forms: every form)
TABLE1_UPDATE = "Table 1 gap without the ranking losses (ours)"  # claims.table1_update's row


def table1_rows(m: Metrics) -> Iterator[dict]:
    shown = f"{TABLE1_AT['frost']:.2f} vs {TABLE1_AT['basic_ssm']:.2f}"
    for d in m.files("02_scale_consistency*"):
        at = {(r["model"], r["seed"]): r["mean"] for r in d["table1"] if r["step"] == paper.TABLE1_STEP}
        runs = {(r["model"], r["seed"]): run_of(d, r) for r in d["runs"]}
        basic = [v for (lab, _), v in at.items() if lab == "basic_ssm"]
        control = [v for (lab, _), v in at.items() if lab == "frost (no ranking)"]
        for label in sorted({lab for lab, _ in at}):
            found = [(s, runs.get((label, s))) for (lab, s) in at if lab == label]
            if not basic or not all(is_frost(st) for _, st in found):
                continue
            frost = [at[(label, s)] for s, _ in sorted(found)]  # separate runs: every seed of each side
            st = found[0][1]
            yield _row(1, st, d["dataset"], min(len(frost), len(basic)), shown, f"{_mean(frost):.2f} vs "
                       f"{_mean(basic):.2f}", C.table1(frost, basic), "02", primary=label == "frost")
            if label == "frost" and control:  # ours, beside
                yield _row(1, st, d["dataset"], min(len(control), len(basic)), "no claim",
                           f"no ranking {_mean(control):.2f} vs {_mean(basic):.2f}",
                           C.table1_update(control, basic), "02", title=TABLE1_UPDATE, primary=False)
    for d in m.files("15_update_forms*"):
        basic = d["basic_ssm cos t=3"]
        for runs, st, primary in _forms(d):
            frost = [r["cos t=3"] for r in runs]
            yield _row(1, st, d["dataset"], min(len(runs), len(basic)), shown,
                       f"{_mean(frost):.2f} vs {_mean(basic):.2f}", C.table1(frost, basic), "15",
                       primary=primary)


# 2. Appendix B (02: FROST among the families; 15_update_forms: every form). The growth rate of
# the late steps' Jacobian product decides (a record's "product_norm", the median over samples of
# ||d h_T / d h_t0||_2, over "product_steps" steps); the one-step norm and the step ratio are shown
def _contraction_cells(rs: list[dict], kappa: list[float]) -> tuple[str, list[float] | None]:
    rates = [C.product_rate(r["product_norm"], r["product_steps"]) for r in rs if "product_norm" in r]
    rates = rates if len(rates) == len(rs) else None
    shown = f"{rs[0]['product_steps']}-step product rate {_mean(rates):.3f}" if rates else \
        "k-step product not measured"
    return (f"{shown}; one-step norm {_mean(r['jvp_norm'] for r in rs):.2f}; "
            f"step ratio {_mean(kappa):.3f}", rates)


def contraction_rows(m: Metrics) -> Iterator[dict]:
    for d in m.files("02_scale_consistency*"):
        runs = {(r["model"], r["seed"]): run_of(d, r) for r in d["runs"]}
        kappa = Record({(r["model"], r["seed"]): r["kappa"] for r in d["kappa"]})
        frost = [r for r in d.get("jacobian", []) if is_frost(runs.get((r["model"], r["seed"])))]
        if frost:
            st = runs[(frost[0]["model"], frost[0]["seed"])]
            ours, rates = _contraction_cells(frost, [kappa[(r["model"], r["seed"])] for r in frost])
            yield _row(2, st, d["dataset"], len(frost), "kappa < 1", ours, C.contraction(rates), "02")
    for d in m.files("15_update_forms*"):
        for runs, st, primary in _forms(d):
            ours, rates = _contraction_cells(runs, [r["kappa"] for r in runs])
            yield _row(2, st, d["dataset"], len(runs), "kappa < 1", ours, C.contraction(rates), "15",
                       primary=primary)


# 3. Minkowski dimension (03: one protocol; 15_minkowski_protocols: eight)
BASELINES = ("vanilla", "basic_ssm")
TRAJECTORY_STATES = 17  # h_0 .. h_16: every ResNet model of notebook 03 runs T = 16 steps
MINKOWSKI_PAPER = f"higher; baselines ~ {paper.KOCH_DIMENSION:.2f}"


def minkowski_rows(m: Metrics) -> Iterator[dict]:
    for d in m.files("03_minkowski*"):
        if any(abs(v["error"]) > C.DIMENSION_MARGIN for v in d.get("validation", [])):
            continue  # an estimator off on a set of known dimension decides nothing
        frost, base = _sides(d["runs"], "box mean")
        if not is_frost(st := run_of(d, {"model": "frost", "seed": 0})):
            continue
        yield _row(3, st, d["dataset"], min(len(v) for v in (frost, *base.values())),
                   MINKOWSKI_PAPER, f"{_mean(frost):.2f} vs {max(_mean(v) for v in base.values()):.2f}",
                   C.minkowski(frost, base, _resolution()), "03")
        if d.get("protocol_runs"):  # notebook 03 measures experiment (d)'s protocols too
            yield from _protocol_rows(d, d["protocol_runs"], "03")
    for d in m.files("15_minkowski_protocols"):
        yield from _protocol_rows(d, d["runs"], "15")


@functools.cache
def _resolution() -> tuple[float, float]:
    """The box estimator's (Koch, line) estimates at a trajectory's T + 1 = 17 states (claims.resolves):
    a property of the estimator, not of a run, so computed here once (fractal.resolution)."""
    return resolution(TRAJECTORY_STATES)


def _sides(runs: list[dict], key: str) -> tuple[list[float], dict[str, list[float]]]:
    """frost's ``key`` in ``runs`` and each baseline's (BASELINES), each side by seed (separate runs)."""
    dims = {(r["model"], r["seed"]): r[key] for r in runs}
    side = lambda model: [v for (lab, _), v in sorted(dims.items()) if lab == model]
    return side("frost"), {b: side(b) for b in BASELINES}


def _protocol_rows(d: dict, runs: list[dict], source: str) -> Iterator[dict]:
    """Experiment (d)'s row: per protocol, claims.minkowski over the seeds (one verdict where every
    protocol has the same, a reason for all said once); then how many held."""
    per = {protocol: C.minkowski(*_sides(rs, "dimension"), _resolution())  # every protocol reads 17 states
           for protocol, rs in _by(runs, "protocol").items()}
    if (st := next((run_of(d, r) for r in runs if r["model"] == "frost"), None)) is None:
        return
    seeds = {r["seed"] for r in runs if r["model"] == "frost"}
    held, protocols = sum(v == C.REPRODUCED for v in per.values()), len(per)
    yield _row(3, st, d["dataset"], len(seeds), MINKOWSKI_PAPER,
               f"reproduced under {held} of {protocols} protocols", C.minkowski_protocols(per), source,
               title="Minkowski dimension (8 protocols)", primary=False)


# 4. Figure 1: alpha
ALPHA_FIELDS = ("start", "min", "end", "max", "min at (fraction of training)")  # claims.alpha's, in order


def alpha_rows(m: Metrics) -> Iterator[dict]:
    for name in m.names("*"):
        d = m.json(name)
        if not isinstance(d.get("alpha_trajectory"), dict):  # names() reads objects only
            continue
        runs = [(r, s) for r in d["alpha_trajectory"]["summary"] if is_frost(s := run_of(d, r))]
        for group in _by(runs, lambda rs: form(rs[1])).values():
            st = group[0][1]
            v = {k: [r[k] for r, _ in group] for k in ALPHA_FIELDS}
            yield _row(4, st, d["dataset"], len(group), "drops, recovers, < 1",
                       f"{_mean(v['start']):.2f} -> {_mean(v['min']):.2f} -> {_mean(v['end']):.2f}",
                       C.alpha(*v.values(), st["alpha_param"]), _source(name))


# 5, 6, 7. notebook 04's ablations
def hurst_rows(m: Metrics) -> Iterator[dict]:
    for d in m.files("04_alpha_H_ablation*"):
        # H reaches the leaky bracket only with the scaled operators inside (the reference beside)
        runs = [(r, s) for r in d.get("hurst_sweep", []) if (s := run_of(d, r)) is not None
                and (s["scaled_inside"] or s["update"] not in ("leaky", "leaky_gated"))]
        fixed = {s["hurst"]: [r["alpha"]] for r, s in runs if not s["learn_hurst"]}
        learned = [(r["hurst"], s) for r, s in runs if s["learn_hurst"]]
        if len(fixed) < 2:
            continue
        st = runs[0][1]
        verdict = C.hurst(fixed, [h for h, _ in learned], learned[0][1]["hurst_param"] if learned else None)
        top = max(fixed, key=lambda h: fixed[h][0])
        ours = f"alpha largest at H = {top:g}" + (f"; learned H {learned[0][0]:.2f}" if learned else "")
        yield _row(5, st, d["dataset"], 1, "alpha largest at small H; learned H > 1", ours, verdict, "04")


def loss_rows(m: Metrics) -> Iterator[dict]:
    gap = lambda r: r["easy_score"] - r["hard_score"]
    for d in m.files("04_alpha_H_ablation*"):
        arms: dict[str, dict[float, dict]] = {"both": {}, "rel": {}, "abs": {}}
        st = None
        for r in d.get("loss_ablation", []):
            if not is_frost(s := run_of(d, r)):
                continue
            arm = "both" if s["lambda_rel"] and s["lambda_abs"] else "rel" if s["lambda_rel"] else "abs"
            arms[arm][s["lambda_abs"]] = Record({**r, "lambda_rel": s["lambda_rel"]})
            st = s if arm == "both" and (s["lambda_rel"], s["lambda_abs"]) == DEFAULT_STRENGTH else st
        if st is None:
            continue
        both, rel = arms["both"][DEFAULT_STRENGTH[1]], arms["rel"].get(0.0)
        alone = arms["abs"].get(DEFAULT_STRENGTH[1])  # L_abs alone at both losses' lambda_abs
        verdict = C.loss_ablation([gap(both)], [both["test_accuracy"]], [gap(rel)] if rel else None,
                                  [gap(alone)] if alone else None, [alone["test_accuracy"]] if alone else None)
        ours = f"gap {gap(rel):.2f} vs {gap(both):.2f}" if rel else "no L_rel run"
        if alone:
            ours += f"; L_abs alone {100 * alone['test_accuracy']:.2f}% vs {100 * both['test_accuracy']:.2f}%"
        yield _row(6, st, d["dataset"], 1, "narrow band; L_abs collapses", ours, verdict, "04")
        for lam, a in sorted(arms["abs"].items()):  # the other equal strengths, shown beside
            if lam == DEFAULT_STRENGTH[1] or (b := arms["both"].get(lam)) is None:
                continue
            yield _row(6, st, d["dataset"], 1, "L_abs collapses",
                       f"L_abs alone {100 * a['test_accuracy']:.2f}% vs "
                       f"both (rel {b['lambda_rel']:g}) {100 * b['test_accuracy']:.2f}%",
                       C.loss_ablation([gap(b)], [b["test_accuracy"]], None, [gap(a)], [a["test_accuracy"]]),
                       "04", title=f"Loss ablation at lambda_abs = {lam:g}", primary=False)


def conflict_rows(m: Metrics) -> Iterator[dict]:
    for d in m.files("04_alpha_H_ablation*"):
        summary = {r["model"]: r["mean cosine"] for r in d.get("gradient_conflict", {}).get("summary", [])}
        found = labelled(d, "both") or labelled(d, "frost")
        if "frost" not in summary or not found:
            continue
        st, base = found[0][1], {k: [v] for k, v in summary.items() if k != "frost"}
        yield _row(7, st, d["dataset"], 1, "> 0 vs < 0", f"{summary['frost']:+.2f} vs "
                   f"{min(v[0] for v in base.values()):+.2f}..{max(v[0] for v in base.values()):+.2f}",
                   C.gradient_conflict([summary["frost"]], base), "04", primary=False)
    for d in m.files("15_loss_strength"):
        for strength, rs in _by(d["runs"], lambda r: (r["lambda_rel"], r["lambda_abs"])).items():
            per = {k: [r["step_cosine"] for r in sorted(v, key=lambda r: r["seed"])] for k, v in _by(rs, "model").items()}
            if "frost" not in per or len(per) < 2 or strength[0] == 0:
                continue
            st = run_of(d, _first(r for r in rs if r["model"] == "frost"))
            base = {k: v for k, v in per.items() if k != "frost"}
            others = ", ".join(f"{k} {_mean(v):+.3f}" for k, v in base.items())
            yield _row(7, st, d["dataset"], len(per["frost"]), "> 0 vs < 0",
                       f"frost {_mean(per['frost']):+.3f}; {others}", C.gradient_conflict(per["frost"], base),
                       "15", title="" if strength == DEFAULT_STRENGTH else
                       f"Gradient conflict (rel {strength[0]:g}, abs {strength[1]:g})")


# 8. Collapse of the baselines
def _collapse(d: dict, runs: list[dict], run_of_: Callable[[dict, dict], dict | None],
              notebook: str) -> Iterator[dict]:
    """Claim 8's rows of file ``d``, one per (lambda_rel, lambda_abs) of ``run_of_(d, record)``: the
    run's settings, or the record itself (None: a run the provenance does not name)."""
    strength_of = lambda r: None if (s := run_of_(d, r)) is None else (s["lambda_rel"], s["lambda_abs"])
    for strength, rs in _by(runs, strength_of).items():
        if strength is None:
            continue
        scores = {k: [C.collapse_score(r["accuracy"], r["reference_accuracy"], r["one_step_share"])
                      for r in v] for k, v in _by(rs, "model").items()}
        fell = ", ".join(f"{k} {sum(s > 0 for s in v)}/{len(v)}" for k, v in scores.items())
        bundles = [s["bundle"] for s in _runs(d).values() if is_frost(s)]  # of the file's FROST runs
        bundle = max(sorted(set(bundles)), key=bundles.count) if bundles else NA  # the most common one
        yield row(8, bundle, NA, d.get("collapse_dataset", d["dataset"]), min(map(len, scores.values())),
                  "all collapse", f"seeds collapsed at rel {strength[0]:g}, abs {strength[1]:g}: {fell}",
                  C.collapse(scores), notebook, title="" if strength == DEFAULT_STRENGTH else
                  f"Collapse of the baselines (rel {strength[0]:g}, abs {strength[1]:g})")


def collapse_rows(m: Metrics) -> Iterator[dict]:
    for d in m.files("07_halting_baselines*"):
        if d.get("collapse"):  # each record's ranking run, as notebook 07 names it
            yield from _collapse(d, d["collapse"], lambda d, r: settings(d, d.get("keys", {}).get(
                f"{r['model']} (ranking) seed {r['seed']}")), "07")
    for d in m.files("15_loss_strength"):
        runs = [r for r in d["runs"] if r["model"] != "frost" and settings(d, r["key"]) is not None]
        yield from _collapse(d, runs, lambda _, r: r, "15")  # each record holds its strength


# 9, 10, 14. Table 2: the halting sweeps, per seed
def _sweeps(m: Metrics) -> Iterator[tuple]:
    """(source, settings, dataset, per-seed sweeps, per-seed fixed-depth curves, image halves or None) of
    every Table 2 sweep of FROST with its ranking losses, each run named by the file's provenance."""
    for d in m.files("05_halting*"):
        seeds = sorted({r["seed"] for r in d["sweep"]})
        # the file's own key names its seed's run; the others by label and seed, of its bundle
        # (the file may set another bundle's runs beside them: notebook 05's compare_bundle)
        sts = [run_of(d, {"key": d["key"]}) if s == d.get("seed") and d.get("key") else
               run_of(d, {"model": "frost", "seed": s}, d.get("bundle")) for s in seeds]
        if not all(is_frost(s) for s in sts):
            continue
        yield "05", _first(sts), d["dataset"], [[r for r in d["sweep"] if r["seed"] == s] for s in seeds], \
            [d.get("fixed_depth", {}).get(f"seed {s}") for s in seeds], d.get("image_halves")
    for name in m.names("01_training*") + m.names("demo_*"):
        d = m.json(name)
        runs = (d.get("provenance") or {}).get("runs", [])
        if "sweep" not in d or len(runs) != 1 or not is_frost(st := settings(d, runs[0])):
            continue
        yield _source(name), st, d["dataset"], [d["sweep"]], [d.get("accuracy_per_step") or _run_curve(runs[0])], None
    for path in sorted(m.folder.glob("sweep_*.csv")):  # its provenance: the sidecar sweep_*.provenance.json
        if (record := m.json(path.with_suffix(".provenance").name)) is None or (rows := m.csv(path)) is None:
            continue  # a CSV without its provenance names no run; a damaged one skipped (paths.skip_damaged)
        prov = record["provenance"]
        if len(prov["runs"]) != 1 or not is_frost(st := prov["settings"][prov["runs"][0]]):
            continue
        yield "sweep", st, st["dataset"], [rows], [_run_curve(prov["runs"][0])], None


def _run_curve(name: str) -> list[float] | None:
    """A committed run's test accuracy at each fixed depth (its metrics.json)."""
    if (folder := run_folder(name)) is None or not (folder / "metrics.json").is_file():
        return None
    try:
        return read_metrics(folder).get("test_accuracy_per_step")
    except DamagedInput as err:
        return skip_or_raise(err)


def table2_rows(m: Metrics) -> Iterator[dict]:
    shown = " / ".join(f"{C.PAPER_KEPT[q]:.2f}" for q in C.KEPT_SHOWN)
    for source, st, dataset, sweeps, fixed, halves in _sweeps(m):
        halves = halves or {}  # the test images' half-widths of the seed means (notebook 05), where measured
        at_q = {q: [_first(r["accuracy"] for r in s if r["quantile"] == q) / _first(
            r["accuracy"] for r in s if r["quantile"] == 1.0) for s in sweeps] for q in C.KEPT_SHOWN}
        curves = [np.array(sorted((r["mean_depth"], r["accuracy"]) for r in s)).T for s in sweeps]
        at_depth = {q: [float(np.interp(C.PAPER_DEPTH[q] * depth[-1] / 16, depth, acc)) / acc[-1]
                        for depth, acc in curves] for q in C.KEPT_SHOWN}
        for claim, kept, key in ((9, at_q, "kept_at_quantile"), (10, at_depth, "kept_at_depth")):
            image = {float(q): h for q, h in halves.get(key, {}).items()}
            ours = " / ".join(f"{_mean(kept[q]):.2f}" for q in C.KEPT_SHOWN)
            yield _row(claim, st, dataset, len(sweeps), shown, ours, C.kept(kept, image), source,
                       primary=own_form(st))
        # per seed with a fixed-depth curve (accuracy at depth 1..T): the mean gain over q < 1
        gain = [_mean(r["accuracy"] - float(np.interp(r["mean_depth"], list(range(1, len(f) + 1)), f))
                      for r in s if r["quantile"] < 1.0) for s, f in zip(sweeps, fixed) if f]
        if gain:
            yield _row(14, st, dataset, len(gain), "no claim",
                       f"{100 * _mean(gain):+.1f} points",
                       C.fixed_depth(gain, halves.get("gain_over_fixed", 0.0)), source, primary=own_form(st))


# 13. Table 3's ViT exit depth (05)
def vit_rows(m: Metrics) -> Iterator[dict]:
    theirs, resnet = paper.table3_frost_depth("vit"), paper.table3_frost_depth("resnet")
    shown = (f"{theirs['mean_depth']} of {theirs['steps']}; {theirs['depth_fraction']:.2f} < "
             f"{resnet['depth_fraction']:.2f}")
    for d in m.files("05_halting*"):
        vit = d.get("vit")
        if not vit or vit["dataset"] != d["dataset"] or not is_frost(st := settings(d, vit.get("key"))):
            continue
        at = {r["backbone"]: r for r in vit["sweep"] if r["quantile"] == C.VIT_QUANTILE}
        if not {"resnet", "vit"} <= set(at):
            continue
        v, r = at["vit"], at["resnet"]
        yield _row(13, st, vit["dataset"], 1, shown, f"{v['mean_depth']:.2f} of {vit['steps']}; "
                   f"{v['fraction']:.2f} vs {r['fraction']:.2f}", C.vit_depth([v["mean_depth"]], vit["steps"],
                   [v["fraction"]], [r["fraction"]]), "05")


# 11, 12. Table 3 (06: shapes at the paper's settings; benchmarks: throughput per regime)
BACKBONE_NAMES = {"resnet": "ResNet", "vit": "ViT"}


def table3_rows(m: Metrics) -> Iterator[dict]:
    for d in m.files("06_complexity*"):
        demo = settings(d, (d.get("demo") or {}).get("key"))
        device = d.get("env", {}).get("device", "")
        for claim, column in ((11, "gflops / vanilla"), (12, "images_per_s / vanilla")):
            for backbone, rs in _by(d["ratios"], "backbone").items():
                compared = [r for r in rs if r["model"] != "vanilla" and r.get(f"paper {column}") is not None]
                if not any(r["model"] == "frost" for r in compared):
                    continue
                errors = [r[column] / r[f"paper {column}"] - 1 for r in compared]
                label = BACKBONE_NAMES[backbone]
                # frost and the family furthest from the paper's ratio (the one that decides), if any
                off = {r["model"]: abs(e) for r, e in zip(compared, errors)}
                shown = [r for r in compared if r["model"] == "frost"][:1] + \
                    sorted((r for r in compared if r["model"] != "frost"), key=lambda r: -off[r["model"]])[:1]
                cells = [", ".join(f"{r['model']} {r[key]:.2f}" for r in shown) for key in (f"paper {column}", column)]
                tail = f" ({device.upper()}, random weights)" if claim == 12 else ""
                title = "" if backbone == "resnet" else f"{C.CLAIM[claim].title} ({label}, frost / vanilla)"
                decided = C.ratio(errors) if claim == 11 else C.throughput(errors, device)
                yield _row(claim, demo, "imagenet100", None, f"{label} {cells[0]}",  # the paper's shapes
                           f"{label} {cells[1]}{tail}", decided, "06", title=title, size=None)
    for d in m.files("bench_table3_regime*"):
        device = d.get("env", {}).get("device", "")
        for backbone, rs in _by(d["ratios"], "backbone").items():
            # every batch size its own part (claims.throughput_batches): the paper states none
            batches = dict(sorted(_by(rs, "batch_size").items()))
            frost = {b: _first(r for r in part if r["model"] == "frost") for b, part in batches.items()}
            gpu = backbone == "resnet" and device.startswith("cuda")  # a GPU's ResNet rows decide claim 12
            yield row(12, NA, NA, "imagenet100", None, f"{next(iter(frost.values()))['paper']:.2f}",
                      " / ".join(f"{f['ours']:.2f} (batch {b})" for b, f in frost.items()) + f" ({device})",
                      C.throughput_batches({b: [r["relative_error"] for r in part] for b, part in batches.items()},
                                           device), "bench",
                      title="" if gpu else f"Table 3 throughput ({BACKBONE_NAMES[backbone]}, {device})", primary=gpu)


# 15. FROST's score against its rivals (07 and 08: every rule on FROST's seeds; claims.rivals, the
# references never) and refitted heads (15_head_refit)
def halting_rule_rows(m: Metrics) -> Iterator[dict]:
    for source, pattern in (("07", "07_halting_baselines*"), ("08", "08_beyond_the_paper*")):
        for d in m.files(pattern):  # every rule on FROST's seeds
            area = {(r["model"], r["rule"]): r["auc"] for r in d["summary"]}
            models = sorted({mod for mod, rule in area if rule == "frost" and family_of(mod) == "frost"},
                            key=_seed)
            areas = [{rule: a for (mod, rule), a in area.items() if mod == model} for model in models]
            if not models or not all(is_frost(settings(d, d["keys"][model])) for model in models) or not all(
                    C.rivals(a) for a in areas):
                continue
            st = settings(d, d["keys"][models[0]])
            own = [area[(model, "frost")] for model in models]
            best = [C.best_rival(a) for a in areas]
            named = sorted({rule for rule, _ in best})
            # per seed: FROST minus its best rival over the test images
            noise = d.get("rival_bootstrap") or {}
            shown = "".join(f"; seed {_seed(k)} [{noise[k]['low']:+.3f}, {noise[k]['high']:+.3f}]"
                            for k, (rival, _) in zip(models, best) if noise.get(k, {}).get("rival") == rival)
            yield _row(15, st, d["dataset"], len(models), "no claim",
                       f"{_mean(own):.3f} vs {_mean(a for _, a in best):.3f} ({', '.join(named)}){shown}",
                       C.halting_rules(own, [a for _, a in best], d.get("rival_image_half", 0.0)), source,
                       primary=own_form(st))
    for d in m.files("15_head_refit"):
        margins = d.get("margin_per_backbone", {})
        for group in _by([(k, settings(d, b["key"])) for k, b in d["backbones"].items()],
                         lambda ks: form(ks[1])).values():
            st = group[0][1]
            values = [margins[k] for k, _ in group if k in margins]
            yield _row(15, st, d["dataset"], len(values), "no claim", f"best linear head "
                       f"{_mean(values):+.3f} area over fixed depth / confidence", C.head_refit(values),
                       "15", title="A learned head can beat fixed depth (refit)", primary=False)


# Beyond the paper (notebook 08): the variant against its own fixed depth and oracle, and FROST
def _seed(label: str) -> int:
    """The seed a grid label carries ("x seed 2" -> 2; a label without one: 0)."""
    return int(found.group(1)) if (found := re.search(r" seed (\d+)$", label)) else 0


def variant_rows(m: Metrics) -> Iterator[dict]:
    """Claim 16 on the variant's own rule (its score under FROST's quantile rule), and beside it, as
    rows of ours, the rules of ours (patience, the settled probe) on both families, by the same
    restated targets; the guard is the family's full depth against FROST's of the same seed."""
    for d in m.files("08_beyond_the_paper*"):
        by_rule = _by(d["gains"], lambda g: (family_of(g["model"]), g["rule"]))
        frost = Record({_seed(g["model"]): g for g in by_rule.get(("frost", "frost"), [])})
        st = settings(d, d["keys"][_first(g["model"] for g in d["gains"] if family_of(g["model"]) == d["variant"])])
        for (family, rule), gs in by_rule.items():
            if family == "frost" and rule == "frost":
                continue  # FROST's own rule is claims 14 and 15
            gs = sorted(gs, key=lambda g: _seed(g["model"]))
            ranking, saved, closed = ([g[k] for g in gs] for k in ("ranking", "steps_saved", "closed_hindsight"))
            seeds = [_seed(g["model"]) for g in gs] if family == "frost" else sorted(frost)
            full, frost_full = [g["full_depth"] for g in gs], [frost[s]["full_depth"] for s in seeds]
            main = family == d["variant"] and rule == "frost"
            yield _row(16, st, d["dataset"], len(gs), "no claim",
                       f"ranking {100 * _mean(ranking):+.2f} points; "
                       f"{_mean(saved):+.2f} steps to within half a point; closes {_mean(closed):.2f} of the "
                       f"hindsight gap; full depth {_mean(full) - _mean(frost_full):+.3f}",
                       C.variant(ranking, saved, closed, full, frost_full, same_runs=family == "frost"), "08",
                       primary=main, title="" if main else
                       f"Our rule ({rule}) on {'the variant' if family == d['variant'] else 'FROST'}'s "
                       "models, by claim 16's targets (ours)")


# 19 (ours, after Raptor). The block-recurrent rewrite (10): its k = CLAIM_K students, one per teacher seed
RAPTOR_CELL = f"no claim; Raptor {C.RECOVERED_MARGIN:.2f}, linear probe"


def block_recurrent_rows(m: Metrics) -> Iterator[dict]:
    """Claim 19 from notebook 10: per teacher seed its k = CLAIM_K student's accuracy recovered (student
    over teacher), each student a run its provenance names; the gain over the same k trained from
    scratch (the control's seed named: one control for every seed's student) and the mean state cosine
    to the teacher are shown beside, never deciding."""
    for d in m.files("10_block_recurrent*"):
        students = sorted((r for r in d["students"] if r["k"] == CLAIM_K and settings(d, r["key"]) is not None),
                          key=lambda r: r["seed"])
        if not students:
            continue
        avg = lambda key: _mean(r[key] for r in students)
        recovered, gain = [r["recovered"] for r in students], avg("gain")
        controls = " / ".join(dict.fromkeys(str(r["scratch_seed"]) for r in students if r.get("scratch_seed") is not None))
        # per teacher, the chosen ranges' score and equal ranges' (notebook 10's "ranges"; None without them)
        scores = {r["seed"]: r for r in d.get("ranges", []) if r.get("k") == CLAIM_K and "equal_score" in r}
        ranges = ([[scores[r["seed"]][k] for r in students] for k in ("score", "equal_score")]
                  if all(r["seed"] in scores for r in students) else (None, None))
        scratch = "" if gain != gain else (f"{100 * gain:+.2f} points over k = {CLAIM_K} from scratch"
                                           f"{f' (seed {controls})' if controls else ''}; ")
        yield row(19, NA, NA, d["dataset"], len(students), RAPTOR_CELL, f"{_mean(recovered):.3f} "
                  f"({100 * avg('accuracy'):.2f}% of {100 * avg('teacher_accuracy'):.2f}%); {scratch}"
                  f"state cosine {avg('state_cosine_mean'):.2f}", C.block_recurrent(recovered, *ranges), "10")


# 20-22 (DF-Mamba, notebook 11): its "runs", one record per stored run (its key "run", label, horizon, seed,
# test MSE, the zero-shot MSEs by scale), and "bootstrap", claim 20's interval at a horizon with one seed
FORECAST_NAMES = {"dfmamba": "DF-Mamba", "dlinear": "DLinear", "rlinear": "RLinear"}
S2_TITLE = "DF-Mamba Table 14: r against the flat stack S2 (ETTh2, ours)"


def _forecast_runs(d: dict, label: str, horizon: int = 96, key: str = "test_mse") -> list[dict]:
    """The run records of ``label`` at ``horizon`` that hold ``key`` (null: not measured), by seed."""
    found = [r for r in d["runs"] if r["label"] == label and r["horizon"] == horizon]
    return sorted((r for r in found if r.get(key) is not None), key=lambda r: r["seed"])


def _paper_cell(runs: list[dict], boot: dict | None) -> str:
    """Claim 20's "ours" against the paper: the mean MSE of ``runs``, their seeds, and at one seed the
    half-width of its test windows' bootstrap (``boot``, None where the file has none)."""
    mse, seeds = [r["test_mse"] for r in runs], ", ".join(str(r["seed"]) for r in runs)
    spread = f"sd {np.std(mse, ddof=1):.3f}; " if len(mse) > 1 else ""
    tail = f"; +- {boot['half']:.3f}, block bootstrap of {boot['windows']:,} test windows" if boot else ""
    return f"{_mean(mse):.3f} ({spread}seed{'s' * (len(mse) > 1)} {seeds}{tail})"


def forecast_rows(m: Metrics) -> Iterator[dict]:
    """Claims 20-22 from notebook 11's per-seed numbers; a part whose runs are missing yields no row.
    20: per horizon, DF-Mamba's MSE against the paper's (one seed: the file's block bootstrap of that
    run's test windows), then against each of our baselines; 21: S3 and T3 against the full model (H = 96);
    22: r_DF-Mamba against DLinear's and RLinear's together, and against the flat stack S2's beside."""
    t1, t2, t14 = paper.DFMAMBA_TABLE1_ETTH2, paper.DFMAMBA_TABLE2_ETTM2, paper.DFMAMBA_TABLE14_ETTM2
    for d in m.files("11_df_mamba*"):
        # a row of the file, on ETTh2 and sized by its look-back (no bundle: not a FROST run)
        at = lambda claim, *cells, **kw: row(claim, NA, NA, "etth2", *cells, "11",
                                             size=f"look-back {d['lookback']}", **kw)
        for h in paper.DFMAMBA_HORIZONS:
            if not (ours := _forecast_runs(d, "dfmamba", h)):
                continue
            mse, theirs = [r["test_mse"] for r in ours], t1["dfmamba"][h][0]
            boot = next((b for b in d["bootstrap"] if len(ours) == 1 and b["run"] == ours[0]["run"]), None)
            yield at(20, len(mse), f"H = {h}: {theirs:.3f}", _paper_cell(ours, boot),
                     C.forecast_against_paper(mse, theirs, boot and (boot["mean"], boot["half"])))
            for b in ("dlinear", "rlinear"):
                if base := [r["test_mse"] for r in _forecast_runs(d, b, h)]:
                    yield at(20, min(len(mse), len(base)), f"H = {h}: {theirs:.3f} vs {t1[b][h][0]:.3f}",
                             f"{_mean(mse):.3f} vs {_mean(base):.3f}", C.forecast_against_baseline(mse, base),
                             title=f"DF-Mamba Table 1: below our {FORECAST_NAMES[b]} (ETTh2)", primary=False)
        full = [r["test_mse"] for r in _forecast_runs(d, "dfmamba")]
        for v in ("S3", "T3"):
            if full and (var := [r["test_mse"] for r in _forecast_runs(d, v)]):
                yield at(21, min(len(var), len(full)), f"{v} {t2[v][0]:.3f} vs full {t2['full'][0]:.3f} "
                         f"(ETTm2)", f"{v} {_mean(var):.3f} vs full {_mean(full):.3f}", C.ablation(var, full))
        r_of = lambda model: t14[model][4] / t14[model][1]  # r = MSE(x4) / MSE(x1): the paper's, and a run's
        zero_shot = lambda r: r["zs_mse"][r["zs_scales"].index(4)] / r["zs_mse"][r["zs_scales"].index(1)]
        ratio = {label: [zero_shot(r) for r in _forecast_runs(d, label, key="zs_mse")]
                 for label in ("dfmamba", "dlinear", "rlinear", "S2")}
        theirs = f"r {r_of('dfmamba'):.3f} vs Affirm's {r_of('affirm'):.3f} (ETTm2)"
        for part, title in ((("dlinear", "rlinear"), ""), (("S2",), S2_TITLE)):
            if ratio["dfmamba"] and all(ratio[b] for b in part):
                ours = ", ".join(f"{FORECAST_NAMES.get(b, b)} {_mean(ratio[b]):.3f}" for b in part)
                yield at(22, min(len(ratio[x]) for x in ("dfmamba", *part)), "no claim" if title else theirs,
                         f"r {_mean(ratio['dfmamba']):.3f} vs {ours}",
                         C.zero_shot(ratio["dfmamba"], {b: ratio[b] for b in part}), title=title,
                         primary=not title)


# Benchmarks (benchmarks/adaptive_inference.py, train_throughput.py --metrics)
def default_stream_cells(d: dict, threads: int | None = 1) -> list[dict]:
    """``d``'s stream cells at the defaults (refill at once, stream_ahead[B] ahead); ``threads`` None: all."""
    return [r for r in d["rows"] if r.get("mode") == "stream" and r["refill_at"] == 1 and threads in
            (None, r["threads"]) and r["embed_batch"] == d["stream_ahead"][str(r["batch_size"])]]


def benchmark_rows(m: Metrics) -> Iterator[dict]:
    for d in m.files("bench_*"):
        device = d.get("env", {}).get("device", "")
        if d.get("benchmark") == "adaptive_inference" and d.get("rows"):
            st = settings(d, next(iter((d.get("provenance") or {}).get("runs", [])), None))
            at = (st, d.get("dataset", ""), None, f">= {C.SPEED_CLOSE}")
            if stream := default_stream_cells(d):  # the worst decides
                w = min(stream, key=lambda r: r["ratio"])
                yield _row(17, *at, f"{w['ratio']:.2f}, the worst of {len(stream)} stream cells "
                           f"(B {w['batch_size']}, q {w['quantile']:g}, {w['embed_batch']:g} ahead; 1 thread, {device})",
                           C.speed(w["ratio"]), "bench")
            one = [r for r in d["rows"] if r.get("mode", "eager") != "stream" and r.get("threads", 1) == 1]
            for b in sorted(one, key=lambda r: (-r["batch_size"], r["ratio"]))[:1]:  # the largest's worst
                yield _row(17, *at, f"{b['ratio']:.2f} (batch-at-a-time, batch {b['batch_size']}; 1 thread, "
                           f"{device})", C.speed(b["ratio"]), "bench", primary=not stream)
        if d.get("benchmark") == "train_throughput":
            for r in d.get("rows", []):
                if r.get("model") == "frost" and r.get("kll_share") is not None:
                    yield row(18, NA, r.get("update", NA), r.get("dataset", ""), None, f"< {C.KLL_CHEAP}",
                              f"{r['kll_share']:.2%} ({r.get('size', '')}, {device})",
                              C.kll_overhead(r["kll_share"]), "bench")


CLAIM_ROWS: tuple[Callable[[Metrics], Iterator[dict]], ...] = (
    table1_rows, contraction_rows, minkowski_rows, alpha_rows, hurst_rows, loss_rows, conflict_rows,
    collapse_rows, table2_rows, table3_rows, vit_rows, halting_rule_rows, variant_rows, benchmark_rows,
    block_recurrent_rows, forecast_rows)


# ------------------------------------------------------------------------------------------------
# The tables

def _rank(r: dict) -> tuple:
    """The order in which a claim's rows are evidence, the README's stated rule: CIFAR-100 under the
    default bundle first; then rows that test something, at the paper's structure (SIZE_RANK: a row
    naming no size is demo's), on MIN_SEEDS seeds; then the data set and the
    bundle; only then the claim's own setting over a variant of it (another loss strength, protocol or
    rule: claim 8's default strength comes after its bundle), the primary row and more seeds."""
    data, seeds = r["dataset"], r["seeds"]
    place = lambda ranks, x: ranks.index(x) if x in ranks else len(ranks)  # unranked last
    return (not (data == "cifar100" and r["bundle"] == "adopted"), r["verdict"].startswith(C.NOT_TESTABLE),
            place(SIZE_RANK, "demo" if r.get("size", NA) == NA else r["size"]),
            not seeds.isdigit() or int(seeds) < C.MIN_SEEDS,
            place(DATASET_RANK, data), place(BUNDLE_RANK, r["bundle"]),
            r["title"] != C.CLAIM[r["claim"]].title, not r["primary"], -int(seeds) if seeds.isdigit() else 0)


def _read_whole(m: Metrics, reader: str, read: Callable[[], Any], skipped: Any) -> Any:
    """``read()`` (of the files of ``m``); a ``MissingField`` or ``MissingRow`` there is the file's, not the
    code's: the ``DamagedInput`` of the file read last (inside ``paths.skip_damaged()``: ``skipped``)."""
    try:
        return read()
    except (MissingField, MissingRow) as err:  # any other error is the code's, raised as it is
        shown = KeyError(*err.args) if isinstance(err, KeyError) else IndexError(*err.args)
        skip_or_raise(m.damaged(m.current or m.folder, f"{reader} cannot read it ({one_line(shown)}): it "
                                "lacks what the claim reads"))
        return skipped


def verdict_rows(metrics_dir: str | os.PathLike | None = None) -> list[dict[str, Any]]:
    """Every row from the metrics in ``metrics_dir`` (default: the committed ones), by claim, the
    decisive evidence first within each claim (``_rank``)."""
    m = metrics_dir if isinstance(metrics_dir, Metrics) else Metrics(metrics_dir)
    rows = []
    for find in CLAIM_ROWS:
        rows += _read_whole(m, find.__name__, lambda: list(find(m)), [])  # all of a claim's rows, or none
    unique: dict[tuple, dict] = {}
    for r in sorted(rows, key=lambda r: (r["claim"], _rank(r))):  # two files holding the same runs: once
        unique.setdefault(tuple(v for k, v in r.items() if k != "notebook"), r)
    return list(unique.values())


SUMMARY_EXTRA = (20,)  # DF-Mamba's Table 1: a README row once notebook 11's metrics decide it


def summary_rows(rows: list[dict]) -> list[dict]:
    """One row per claim of ``claims.CLAIMS``: its decisive evidence, or "no committed run"; then that of
    each claim of ``SUMMARY_EXTRA`` that has rows (none: no row)."""
    decisive = lambda n: min(mine, key=_rank) if (mine := [r for r in rows if r["claim"] == n]) else None
    return [decisive(c.number) or
            row(c.number, NA, NA, "", None, "", "no committed run", f"{C.NOT_TESTABLE}: no metrics", "-")
            for c in C.CLAIMS] + [r for n in SUMMARY_EXTRA if (r := decisive(n)) is not None]


def _data_name(r: dict) -> str:
    """The row's data set as the tables name it, with the runs' size where the row states one."""
    return DATASET_NAMES.get(r["dataset"], r["dataset"]) + (f" {r['size']}" if r.get("size", NA) != NA else "")


def _dataset_cell(r: dict) -> str:
    """The data set as the README shows it, with the bundle (and a variant's form) named."""
    name = _data_name(r)
    if r["claim"] in (11, 12):
        return f"{name} (shapes)"
    tail = r["bundle"] if r["form"] in (NA, "leaky") or r["bundle"] == NA else f"{r['bundle']}, {r['form']}"
    return f"{name}, {tail}" if r["bundle"] != NA else name


def _notebook_names(number: str) -> list[str]:
    return sorted(p.name for p in (repo_root() / "notebooks").glob(f"{number}_*.ipynb"))


def _markdown(header: tuple[str, ...], lines: Iterable[tuple]) -> str:
    """A markdown table of ``lines`` under ``header``, a cell's ``|`` escaped."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |" for cells in lines]
    return "\n".join(out)


# the claims a ladder quantity speaks to (docs/method.md section 15), for the README's trend column;
# claims 9 and 10 both read the halting's shares kept at the paper's depths 6.06 / 8.30
CLAIM_QUANTITIES = {1: ("table1",), 2: ("product_rate",), 3: ("minkowski",), 14: ("gap",),
                    **dict.fromkeys((9, 10), ("halting_kept_6.06", "halting_kept_8.3"))}
LADDER_METRICS = "09_scale_ladder"  # notebook 09's metrics at its committed parameters
NOT_YET = "not yet measured"
SENSITIVE = "precision-sensitive"  # analysis.ladder.precision_sensitive: its level is bf16's


def shown_reading(row: dict) -> str:
    """A read-out row's reading as the README shows it: "meets" says from which size on the ladder the
    band holds the paper's value (``meets_params``); a precision-sensitive quantity says so."""
    size, shown = row.get("meets_params"), row.get("reading", "no fit")
    if shown == MEETS and isinstance(size, (int, float)) and math.isfinite(size):
        shown = f"{MEETS} (from {size / 1e6:.2f} M parameters)"
    return shown + (f" ({SENSITIVE})" if row.get("precision_sensitive") is True else "")


def ladder_trends(record: dict | None) -> dict[int, str]:
    """claim -> its trend over the ladder (notebook 09's ``read_out`` in its metrics ``record``; None, or
    the measures alone: not read yet), "-" for a claim no quantity speaks to."""
    readings = {r["quantity"]: shown_reading(r) for r in (record or {}).get("read_out", [])}
    return {c.number: "-" if (names := CLAIM_QUANTITIES.get(c.number)) is None else
            NOT_YET if record is None or "read_out" not in record else
            " / ".join(readings.get(n, "no fit") for n in names) for c in C.CLAIMS}


def markdown_summary(rows: list[dict], metrics_dir: str | os.PathLike | Metrics | None = None) -> str:
    """The README's table: one row per claim, with its trend over the scale ladder by the rule of
    docs/method.md section 15 (notebook 09's metrics in ``metrics_dir``: ``ladder_trends``)."""
    metrics = metrics_dir if isinstance(metrics_dir, Metrics) else Metrics(metrics_dir)
    trends = _read_whole(metrics, "ladder_trends", lambda: ladder_trends(metrics.json(LADDER_METRICS)),
                         ladder_trends(None))
    link = lambda nb: f"[{nb}](notebooks/{next(iter(_notebook_names(nb)), nb)})" if nb.isdigit() else nb
    return _markdown(SUMMARY_HEADER, ((f"{r['claim']}. {C.CLAIM[r['claim']].title}", _dataset_cell(r),
                                       r["seeds"], r["paper"], r["ours"], r["verdict"],
                                       trends.get(r["claim"], "-"), link(r["notebook"]))
                                      for r in summary_rows(rows)))


def markdown_table(rows: list[dict]) -> str:
    """docs/results.md's table: every row (``verdict_rows``: by claim)."""
    return _markdown(FULL_HEADER, ((r["claim"], r["title"], r["bundle"], r["form"], _data_name(r), r["seeds"],
                                    r["paper"], r["ours"], r["verdict"], r["notebook"]) for r in rows))


def verdict_table(notebook: str | None = None, metrics_dir: str | os.PathLike | None = None):
    """The rows as a pandas DataFrame; ``notebook`` ("02", "07") keeps that notebook's rows only."""
    rows = [r for r in verdict_rows(metrics_dir) if notebook is None or r["notebook"] == notebook]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def tables(metrics_dir: str | os.PathLike | None = None) -> dict[str, str]:
    rows = verdict_rows(metrics_dir)
    return {"summary": markdown_summary(rows, metrics_dir), "full": markdown_table(rows)}


TARGETS = {"README.md": "summary", "docs/results.md": "full"}  # the files --write and --check cover


def replace_block(text: str, table: str, kind: str = "summary") -> str:
    """``text`` with the lines between ``kind``'s markers replaced by ``table``."""
    start, end = MARKERS[kind]
    block = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
    if not block.search(text):
        raise ValueError(f"no block between {start} and {end}")
    return block.sub(lambda _: f"{start}\n{table}\n{end}", text, count=1)


def current_block(text: str, kind: str = "summary") -> str | None:
    """The lines between ``kind``'s markers in ``text`` (None without them)."""
    start, end = MARKERS[kind]
    found = re.search(re.escape(start) + r"\n(.*?)\n?" + re.escape(end), text, re.S)
    return found.group(1) if found else None
