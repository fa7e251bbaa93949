"""The runs behind the analysis notebooks: named grids of configs, fixed before measuring.

Every grid is a table ``label -> overrides of make_config`` (GRID_TABLES, one per bundle for
BUNDLE_GRIDS) that ``grid`` makes configs of; ``block-recurrent`` reads its ranges off its trained
teachers (docs/method.md section 16). Notebooks load each run (``load_runs``); the command line
trains them ahead, in shards (``python -m frost_nb grid hurst --shard 0/2``). The selection rule of
``tuning`` and ``update``, fixed before any run: a setting replaces the default only if its mean
held-out accuracy over Table 2's quantiles beats the reference's by more than ``ADOPT_MARGIN``.
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

from ..config import RunConfig, make_config
from ..paths import smoke_mode
from ..runs import find_run, identity_key, train_or_load

ABLATION_EPOCHS = 5
DIAGNOSTICS_EVERY = 50  # optimiser steps between gradient-conflict probes (421 per epoch on Fashion-MNIST)
SMOKE_DIAGNOSTICS_EVERY = 5
SMOKE_EPOCHS = 2  # every grid at smoke size: seconds per run, so a notebook's CI run stays short
HURST_VALUES = (0.1, 0.3, 0.5, 0.7, 0.9)
TUNING_VALUES = {"loss.lambda_rel": (0.3, 3.0), "loss.lambda_abs": (0.03, 0.3),
                 "loss.margin": (0.1, 0.4), "loss.rank_frac": (0.125, 0.5)}
# under the adopted bundle rank_frac's reference is 0.5, the most it can be: both moves go down
ADOPTED_TUNING_VALUES = {**TUNING_VALUES, "loss.rank_frac": (0.125, 0.25)}
ADOPT_MARGIN = 0.01
# the adopted sets' size, fixed before the runs (Fashion-MNIST, ABLATION_EPOCHS, seed 0): the best held-out
# value replaces RANK_FRAC_REFERENCE (the per-step bundle's) only if it beats it by more than ADOPT_MARGIN
RANK_FRAC_VALUES = (0.125, 0.25, 0.5)
RANK_FRAC_REFERENCE = 0.5
FAMILIES = ("vanilla", "recurrent", "basic_ssm", "frost")
ONCE = ("frost (no ranking)", "frost (adopted defaults)")  # first seed only: a control, and the
# adopted defaults (three more 15-epoch Fashion-MNIST runs take about 1.8 h on the 2-core CPU)
GRIDS = ("families", "hurst", "loss", "update", "tuning", "conflict", "adopted", "ponder", "collapse",
         "update_forms", "loss_strength", "vit", "rank_frac", "variant", "block-recurrent")
# the ViT family at a CPU-feasible budget: the paper's 12 steps of its ViT-B/16 family at
# the size's width, VIT_EPOCHS epochs at demo size (the size's own at paper size)
VIT_STEPS = 12
VIT_EPOCHS = 10
UPDATE_FORMS = ("canonical", "convex", "gated", "leaky", "leaky_gated")  # experiment (b) on digits
UPDATE_CHECK_FORMS = ("leaky", "gated")  # experiment (b) elsewhere: the adopted and one residual form
# experiment (c): (lambda_rel, lambda_abs) per arm; lambda_rel = 0 is L_abs alone
LOSS_STRENGTHS = ((1.0, 0.1), (3.0, 1.0), (10.0, 3.0), (0.0, 1.0), (0.0, 3.0))
STRENGTH_DIAGNOSTICS_EVERY = 100  # digits demo: 21 steps per epoch, 630 in all -> 7 probes per run
# (lambda_rel, lambda_abs) at which experiment (c) found a baseline collapsing and frost not
# (15_loss_strength.json: recurrent, 2 of 3 seeds): the collapse runs of the adopted bundle
DECISIVE_STRENGTH = (10.0, 3.0)
BUNDLES = ("adopted", "per-step", "residual")  # each below (docs/method.md section 5.5)
# the grids whose runs depend on ``bundle`` (the others are what they were fixed as)
BUNDLE_GRIDS = ("families", "hurst", "loss", "update", "tuning", "conflict", "adopted", "ponder", "collapse")
# a bundle's grid folder suffix: the default (adopted) bundle's runs, FROST and the baselines it shares
# with the others, in one grid per data set without a suffix; the older bundles' runs beside them
BUNDLE_SUFFIX = {"adopted": "", "per-step": "-per-step", "residual": "-residual"}

# The reading of the paper's update and halting score this project adopts (docs/method.md section 5.5):
# the ranking sets over the batch's whole N x T loss matrix, as the paper's sections 4.2, 4.3, 5.2 say
ADOPTED_HALTING = {"model.halt_norm": True, "loss.rank_pairs": "global", "halting.sketch_window": "run",
                   "loss.rank_frac": 0.5}
ADOPTED_BUNDLE = {"model.update": "leaky", "model.alpha_param": "sigmoid", **ADOPTED_HALTING}
# The per-step bundle: the adopted bundle with the sets taken within each step, the default until the
# global sets were adopted; every committed run made under it keeps that identity (docs/method.md section 5.5)
PER_STEP_HALTING = {**ADOPTED_HALTING, "loss.rank_pairs": "per_step", "loss.rank_frac": 0.5}
PER_STEP_BUNDLE = {**ADOPTED_BUNDLE, **PER_STEP_HALTING}
# The residual bundle: the defaults when the families and ablation grids were fixed and run; and
# notebook 04's selection among them, the defaults until the adopted bundle (the same section)
RESIDUAL_BUNDLE = {"model.update": "canonical", "model.halt_norm": False, "loss.rank_pairs": "global",
                    "halting.sketch_window": "epoch", "loss.rank_frac": 0.25}
RESIDUAL_SELECTION = {**RESIDUAL_BUNDLE, "model.update": "gated", "loss.rank_frac": 0.5}


def bundle_of(cfg: RunConfig) -> str:
    """"adopted" when a run has every setting of ADOPTED_BUNDLE, "per-step" when it has every setting
    of PER_STEP_BUNDLE, else "residual" (a run made under the defaults before both, or another bundle)."""
    held = lambda settings: settings.items() <= cfg.flat().items()  # each setting as the run has it
    return "adopted" if held(ADOPTED_BUNDLE) else "per-step" if held(PER_STEP_BUNDLE) else "residual"


def strength_label(family: str, lambda_rel: float, lambda_abs: float) -> str:
    """The ``loss_strength`` label of one arm, e.g. "frost, rel 3 abs 1" or "vanilla, abs 3 only"."""
    strength = f"abs {lambda_abs:g} only" if lambda_rel == 0 else f"rel {lambda_rel:g} abs {lambda_abs:g}"
    return f"{family}, {strength}"


# ------------------------------------------------------------------ the grids, as tables
# label -> every override of make_config(size, dataset, model.name, model.backbone) that makes the run
# (frost on the resnet backbone where a row names none); ``grid`` adds what depends on the call
ABLATION_BUDGET = {"train.epochs": ABLATION_EPOCHS, "train.diagnostics_every": DIAGNOSTICS_EVERY}
RESIDUAL_REF = {**RESIDUAL_BUNDLE, **ABLATION_BUDGET}  # the run each ablation arm changes one thing of
ADOPTED_REF = {**ADOPTED_BUNDLE, **ABLATION_BUDGET}
# a baseline's families run: the task loss alone, which no halting setting reaches (the halting
# head's LayerNorm draws no random number), so both bundles share it
TASK_ONLY = {m: {"model.name": m, **RESIDUAL_BUNDLE} for m in FAMILIES[:3]}
# frost with the ranking losses off: the sets then feed only a logged diagnostic, never the weights
# (losses.total_loss), so the per-step bundle's run serves every bundle, as TASK_ONLY does
NO_RANKING = {**PER_STEP_BUNDLE, "loss.ranking": False}


def _strength_arm(model: str, lambda_rel: float, lambda_abs: float,
                  halting: dict[str, Any] = PER_STEP_HALTING) -> dict[str, Any]:
    """Experiment (c)'s arm of ``model``: the ranking losses at one strength under ``halting`` (the per-step
    bundle's, as the experiment ran), the gradient probe on; a baseline keeps its families run's update."""
    return {"model.name": model, "model.update": "leaky" if model == "frost" else "canonical",
            **halting, "loss.ranking": True, "loss.rank_frac": 0.5, "loss.lambda_rel": lambda_rel,
            "loss.lambda_abs": lambda_abs, "train.diagnostics_every": STRENGTH_DIAGNOSTICS_EVERY}


def _one_change(ref: dict[str, Any], tuning: dict[str, tuple]) -> dict[str, dict[str, dict[str, Any]]]:
    """The ``loss``, ``tuning`` and ``conflict`` tables of one bundle: each arm one change from ``ref``."""
    return {"loss": {"both": ref, "abs only": {**ref, "loss.lambda_rel": 0.0},
                     "rel only": {**ref, "loss.lambda_abs": 0.0}, "neither": {**ref, "loss.ranking": False}},
            "tuning": {"reference": ref, **{f"{field.split('.')[1]} = {v}": {**ref, field: v}
                                            for field, values in tuning.items() for v in values}},
            "conflict": {**{m: {**ref, "model.name": m, "loss.ranking": True} for m in FAMILIES[:3]},
                         "frost": ref}}


def _bundle_tables(bundle: str, defaults: dict[str, Any], halting: dict[str, Any]) -> dict:
    """The tables of BUNDLE_GRIDS under one interpolating bundle (adopted or per-step): frost under
    ``defaults`` (its ablation reference with ABLATION_BUDGET), the baselines as TASK_ONLY."""
    ref = {**defaults, **ABLATION_BUDGET}
    arms = _one_change(ref, ADOPTED_TUNING_VALUES)
    tables = {
        "families": {**TASK_ONLY, "frost": defaults, "frost (no ranking)": NO_RANKING},
        # the leaky bracket holds the plain A and B, which H does not reach: the sweep moves A_alpha,
        # B_alpha into it (model.scaled_inside), the reference stays beside it
        "hurst": {
            **{f"H = {h}": {**ref, "model.scaled_inside": True, "model.hurst": h} for h in HURST_VALUES},
            "H learnable": {**ref, "model.scaled_inside": True, "model.learn_hurst": True},
            "reference (plain A, B)": ref},
        "loss": {**arms["loss"],  # and experiment (c)'s arms at its decisive strength (DECISIVE_STRENGTH)
            "rel 10 abs 3": {**ref, "loss.lambda_rel": 10.0, "loss.lambda_abs": 3.0},
            "abs 3 only": {**ref, "loss.lambda_rel": 0.0, "loss.lambda_abs": 3.0}},
        # each form under its own alpha map ("auto": sigmoid for the leaky forms, softplus else)
        "update": {u: {**ref, "model.update": u, "model.alpha_param": "auto"} for u in UPDATE_FORMS},
        "tuning": arms["tuning"],
        # the reading against the residual reference
        "adopted": {"reference (residual)": RESIDUAL_REF, "adopted reading": ref},
        "conflict": arms["conflict"],
        # PonderNet's loss in place of the ranking losses: the sets reach nothing, as in NO_RANKING
        "ponder": {"frost (ponder)": {**NO_RANKING, "loss.ponder": True}},
        "collapse": {label: row for m in FAMILIES[:3] for label, row in (
            (m, TASK_ONLY[m]), (f"{m} (ranking)", _strength_arm(m, *DECISIVE_STRENGTH, halting)))},
    }
    return {(name, bundle): table for name, table in tables.items()}


GRID_TABLES: dict[tuple[str, str | None], dict[str, dict[str, Any]]] = {
    **_bundle_tables("adopted", ADOPTED_BUNDLE, ADOPTED_HALTING),
    **_bundle_tables("per-step", PER_STEP_BUNDLE, PER_STEP_HALTING),
    **{(name, "residual"): table for name, table in _one_change(RESIDUAL_REF, TUNING_VALUES).items()},
    ("families", "residual"): {**TASK_ONLY, "frost": RESIDUAL_BUNDLE,
                               "frost (no ranking)": {**RESIDUAL_BUNDLE, "loss.ranking": False},
                               "frost (adopted defaults)": RESIDUAL_SELECTION},
    ("hurst", "residual"): {**{f"H = {h}": {**RESIDUAL_REF, "model.hurst": h} for h in HURST_VALUES},
                            "H learnable": {**RESIDUAL_REF, "model.learn_hurst": True}},
    ("update", "residual"): {u: {**RESIDUAL_REF, "model.update": u} for u in UPDATE_FORMS[:3]},
    # the selected defaults together, against the reference they beat
    ("adopted", "residual"): {"reference": RESIDUAL_REF,
                              "adopted defaults": {**RESIDUAL_SELECTION, **ABLATION_BUDGET}},
    # "frost (adopted defaults)" of the residual families
    ("ponder", "residual"): {"frost (ponder)": {**RESIDUAL_SELECTION, "loss.ranking": False,
                                                "loss.ponder": True}},
    ("collapse", "residual"): {label: row for m in FAMILIES[:3] for label, row in (
        (m, TASK_ONLY[m]),
        (f"{m} (ranking)", {**TASK_ONLY[m], "loss.ranking": True, "loss.rank_frac": 0.5}))},
    # the set size of the adopted (global) sets, chosen on the held-out split by the tuning rule
    # (RANK_FRAC_VALUES, fixed before the runs), each value spelled out
    ("rank_frac", None): {f"rank_frac = {v}": {**ADOPTED_REF, "loss.rank_frac": v} for v in RANK_FRAC_VALUES},
    # experiment (c); its task-only references are the baselines' families runs, frost's without ranking
    ("loss_strength", None): {label: row for m in FAMILIES for label, row in (
        (f"{m} (task only)", TASK_ONLY.get(m, NO_RANKING)),
        *((strength_label(m, rel, abs_), _strength_arm(m, rel, abs_)) for rel, abs_ in LOSS_STRENGTHS))},
    # on digits (UPDATE_FORMS_CHECK elsewhere); alpha's map is each form's default
    ("update_forms", None): {f"{u}, h0 = {init}": {**PER_STEP_HALTING, "model.update": u,
                                                   "model.init_state": init}
                             for u in UPDATE_FORMS for init in ("embedding", "zeros")},
    ("vit", None): {
        # the defaults when the grid was fixed (the per-step bundle), spelled out
        m: {"model.name": m, "model.backbone": "vit", "model.steps": VIT_STEPS, **PER_STEP_BUNDLE}
        for m in ("frost", *FAMILIES[:3])},
}
# Beyond the paper (docs/method.md section 14; notebook 08): FROST's architecture under the default bundle,
# its ranking losses replaced by the variant's terms, chosen by the pilot (docs/results.md) before its
# 3-seed runs; the grid sets it beside FROST's own run of the same seed (the families grid's, not retrained)
VARIANT_PILOT_ARMS = {
    "deep supervision, correct": {"loss.deep_supervision": 1.0, "loss.halt_target": "correct"},
    "distillation, settled": {"loss.distill": 1.0, "loss.halt_target": "settled"}}
# the pilot's choice (docs/results.md, "Beyond the paper"): after 2 epochs the distilled model's score was
# level with its fixed depth (area 0.159 against 0.159), the deeply supervised one's 1.4 points below it
VARIANT_LABEL = "frost (distillation, settled)"
VARIANT = {**ADOPTED_BUNDLE, "loss.ranking": False, "loss.rank_grad_to_backbone": False,
           **VARIANT_PILOT_ARMS["distillation, settled"]}
GRID_TABLES[("variant", None)] = {"frost": ADOPTED_BUNDLE, VARIANT_LABEL: VARIANT}
# The block-recurrent rewrite (docs/method.md section 16): students of k branches distilled from the
# families grid's vanilla (TASK_ONLY, as trained), their ranges from each teacher's step similarity
# (analysis.block_recurrent); at the first seed k in STUDENT_KS and the from-scratch controls of
# SCRATCH_KS (the first seed's ranges, task loss only; k = 1 is recurrent), at the others CLAIM_K only
STUDENT_KS = (1, 2, 4)
CLAIM_K = 2
SCRATCH_KS = (2, 4)
# claim 19's controls: the first seed's CLAIM_K student but for its loss, last in the grid (the
# other runs keep their place in a shard): started from the teacher on the task loss alone, and Raptor's
# schedule (training.forward_loss; no task loss, no KL, the classifier head frozen)
CLAIM_CONTROLS = {f"warm k={CLAIM_K}": {"loss.teacher_state": 0.0, "loss.teacher_kl": 0.0},
                  f"raptor k={CLAIM_K}": {"loss.raptor": True, "loss.teacher_kl": 0.0}}
UPDATE_FORMS_CHECK = {
    f"{u}, h0 = embedding": {**PER_STEP_HALTING, "model.update": u, "model.init_state": "embedding",
                             "train.epochs": ABLATION_EPOCHS} for u in UPDATE_CHECK_FORMS}


class Grid(dict):
    """label -> RunConfig of one grid; ``run_name(label)`` names where a run trained now is stored
    (docs/architecture.md, "Runs": a run is found by its config, wherever it is)."""

    def __init__(self, runs: dict[str, RunConfig], folder: str):
        super().__init__(runs)
        self.folder = folder

    def run_name(self, label: str) -> str:
        return f"{self.folder}/{slug(family_of(label))}-seed{self[label].train.seed}"

    def only(self, families: str | None) -> Grid:
        """The runs of the comma-separated ``families`` ("frost,basic_ssm"; None: all of them), in
        the grid's order; a family the grid lacks is a ValueError naming the ones it has."""
        if families is None:
            return self
        wanted, have = [f.strip() for f in families.split(",")], {family_of(label) for label in self}
        if missing := [f for f in wanted if f not in have]:
            raise ValueError(f"models={families!r}: the grid has no {', '.join(missing)}; it has "
                             f"{', '.join(sorted(have))}")
        return Grid({label: cfg for label, cfg in self.items() if family_of(label) in wanted}, self.folder)


def family_of(label: str) -> str:
    """What a grid label names, without its seed tag: the model family as the tables show it
    ("frost seed 1" -> "frost", "frost (no ranking) seed 0" -> "frost (no ranking)")."""
    return re.sub(r" seed \d+$", "", label)


def slug(text: str) -> str:
    """``text`` as a folder name: lower case, runs of other characters than letters, digits and
    dots made one hyphen ("frost (adopted defaults)" -> "frost-adopted-defaults")."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def grid(name: str, size: str = "demo", dataset: str | None = "fashion-mnist",
         seeds: tuple[int, ...] = (0,), bundle: str = "adopted") -> Grid:
    """The runs of grid ``name`` (one of GRIDS): its table in GRID_TABLES (of ``bundle``, one of
    BUNDLES, for BUNDLE_GRIDS), one run per row and seed; labels carry the seed when there are
    several. What depends on the call: each run's ``train.seed``; ONCE labels at the first seed
    only; off digits the ``update_forms`` grid is UPDATE_FORMS_CHECK; the ``vit`` grid trains VIT_EPOCHS
    at demo size (the size's own epochs above it); the smoke size's budget (``_run``)."""
    if name not in GRIDS:
        raise ValueError(f"unknown grid {name!r}; known: {GRIDS}")
    if bundle not in BUNDLES:
        raise ValueError(f"unknown bundle {bundle!r}; known: {BUNDLES}")
    if name == "block-recurrent":
        return _block_recurrent(size, dataset, seeds)
    table = GRID_TABLES[name, bundle if name in BUNDLE_GRIDS else None]
    if name == "update_forms" and make_config(size, dataset).data.name != "digits":
        table = UPDATE_FORMS_CHECK
    budget = {"train.epochs": VIT_EPOCHS} if name == "vit" and size == "demo" else {}
    tag = " seed {}" if len(seeds) > 1 else ""  # labels carry the seed where there are several
    # a ONCE label runs at the first seed only: a reference, not a result
    runs = {label + tag.format(seed): _run({**row, **budget}, size, dataset, seed) for seed in seeds
            for label, row in table.items() if label not in ONCE or seed == seeds[0]}
    # the runs' folder: <data set>-<size>-<grid><bundle suffix> (BUNDLE_SUFFIX) for BUNDLE_GRIDS
    suffix = BUNDLE_SUFFIX[bundle] if name in BUNDLE_GRIDS else ""
    return Grid(runs, f"{make_config(size, dataset).data.name}-{size}-{slug(name)}{suffix}")


def _block_recurrent(size: str, dataset: str | None, seeds: tuple[int, ...]) -> Grid:
    """The ``block-recurrent`` grid: per seed the teacher (``vanilla``, which must be trained: its
    step similarity on the held-out split chooses the ranges), its students (``student k=K``, named
    by the teacher's stored run), and at the first seed ``recurrent``, the ``scratch k=K`` controls and, last,
    CLAIM_CONTROLS."""
    from ..analysis.block_recurrent import best_ranges, branch_steps, run_similarity

    vanilla, runs, controls, tag = TASK_ONLY["vanilla"], {}, {}, " seed {}" if len(seeds) > 1 else ""
    for seed in seeds:
        teacher = _run(vanilla, size, dataset, seed)
        if (found := find_run(teacher)) is None:
            name = teacher.data.name
            raise ValueError(f"grid 'block-recurrent' reads its teachers' step similarity, but vanilla seed "
                             f"{seed} ({name}, {size}) is not trained: train it first with python -m "
                             f"frost_nb grid families --size {size} --dataset {name} --labels vanilla "
                             f"--seeds {seed}")
        first = seed == seeds[0]
        similarity = run_similarity(found.checkpoint)  # the teacher's, on its held-out split
        steps = {k: branch_steps(best_ranges(similarity, k)) for k in STUDENT_KS + SCRATCH_KS}
        student = {k: {**vanilla, "model.branch_steps": steps[k], "loss.teacher": found.name}
                   for k in STUDENT_KS}
        rows = {"vanilla": vanilla, **({"recurrent": TASK_ONLY["recurrent"]} if first else {}),
                **{f"student k={k}": student[k] for k in (STUDENT_KS if first else (CLAIM_K,))},
                **{f"scratch k={k}": {**vanilla, "model.branch_steps": steps[k]}
                   for k in (SCRATCH_KS if first else ())}}
        runs |= {label + tag.format(seed): _run(row, size, dataset, seed) for label, row in rows.items()}
        controls |= {label + tag.format(seed): _run({**student[CLAIM_K], **row}, size, dataset, seed)
                     for label, row in CLAIM_CONTROLS.items() if first}
    return Grid(runs | controls, f"{make_config(size, dataset).data.name}-{size}-block-recurrent")


def block_recurrent_runs(size: str = "demo", dataset: str | None = "cifar100", seeds: tuple[int, ...] = (0,),
                         retrain: bool = False, controls: bool = False) -> dict[str, Any]:
    """The ``block-recurrent`` grid's runs, label -> TrainResult (``load_runs``): first its teachers, the
    ``families`` grid's vanilla of each seed, whose step similarity the grid reads its ranges off, then
    the grid, CLAIM_CONTROLS only with ``controls``. ``require_trained`` stops before either when runs
    are neither committed nor cached and ``retrain`` is False (a smoke run trains them: seconds)."""
    teachers = grid("families", size, dataset, seeds).only("vanilla")
    require_trained(teachers, retrain)
    load_runs(teachers)
    runs = grid("block-recurrent", size, dataset, seeds)
    runs = Grid({k: v for k, v in runs.items() if controls or family_of(k) not in CLAIM_CONTROLS},
                runs.folder)
    require_trained(runs, retrain)
    return load_runs(runs)


def _run(row: dict[str, Any], size: str, dataset: str | None, seed: int) -> RunConfig:
    """One row of a grid's table as the run of ``seed``; at smoke size it trains SMOKE_EPOCHS,
    probing every SMOKE_DIAGNOSTICS_EVERY steps if it probes at all."""
    overrides = {**row, "train.seed": seed}
    if size == "smoke":
        overrides["train.epochs"] = SMOKE_EPOCHS
        if overrides.get("train.diagnostics_every"):
            overrides["train.diagnostics_every"] = SMOKE_DIAGNOSTICS_EVERY
    model, backbone = overrides.get("model.name", "frost"), overrides.get("model.backbone", "resnet")
    return make_config(size, dataset, model, backbone, **overrides)


def adopted_label(scores: pd.Series, reference: str) -> str:
    """The label notebook 04's tuning rule adopts from held-out ``scores`` (label -> mean accuracy
    over Table 2's quantile grid): the best label when it beats ``reference`` by more than
    ADOPT_MARGIN, else ``reference``."""
    best = str(scores.idxmax())
    return best if scores[best] - scores[reference] > ADOPT_MARGIN else reference


def shard(runs: Grid, index: int, count: int) -> Grid:
    """Every ``count``-th run of a grid starting at ``index`` (for training a grid in parallel)."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: the index must be in 0..{count - 1}")
    return Grid({k: v for i, (k, v) in enumerate(runs.items()) if i % count == index}, runs.folder)


# Seconds per epoch of one demo-size run alone on the 2-core CPU, from the committed runs (README's
# results table; CIFAR-100 from benchmarks/train_throughput.py's 106 s of optimiser steps per epoch
# plus evaluation): the estimate a notebook shows before it would train.
CPU_EPOCH_SECONDS = {"digits": 3.5, "fashion-mnist": 140.0, "cifar10": 240.0, "cifar100": 130.0}


class RunsNotTrained(RuntimeError):
    """A notebook would have to train runs that are neither committed nor cached."""


def require_trained(runs: dict[str, RunConfig], retrain: bool) -> None:
    """Stop at once, saying how long training would take, when some of ``runs`` are neither in
    the cache nor committed and ``retrain`` is False. Smoke runs train in seconds: never stopped."""
    if retrain or smoke_mode():
        return
    unique: dict[str, tuple[str, RunConfig]] = {}
    for label, cfg in runs.items():  # one entry per run: grids share their reference run
        unique.setdefault(identity_key(cfg), (label, cfg))
    if not (missing := {label: cfg for label, cfg in unique.values() if find_run(cfg) is None}):
        return
    seconds = sum(cfg.train.epochs * CPU_EPOCH_SECONDS.get(cfg.data.name, 240.0) for cfg in missing.values())
    shown = ", ".join(list(missing)[:4]) + (", ..." if len(missing) > 4 else "")
    raise RunsNotTrained(
        f"{len(missing)} of the {len(unique)} runs this notebook reads are neither committed nor in the cache "
        f"({shown}). Training them takes about {seconds / 3600:.1f} h on a 2-core CPU (one run at a time). "
        "To train them here, set retrain = True in the parameters cell (papermill: -p retrain True); "
        "or fill the cache first, in parallel shards: python -m frost_nb grid <name> --shard i/n.")


def load_runs(runs: dict[str, RunConfig], progress: bool | None = None) -> dict[str, Any]:
    """``train_or_load`` every run of a grid (in order), a run trained now stored under its
    grid's name (``Grid.run_name``); label -> TrainResult."""
    name = runs.run_name if isinstance(runs, Grid) else lambda label: None
    return {label: train_or_load(cfg, name=name(label), progress=progress) for label, cfg in runs.items()}


