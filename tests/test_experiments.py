"""Grids of runs for the analysis notebooks: each ablation arm changes one thing."""

import pytest
import torch

from frost_nb.config import make_config
from frost_nb.notebook.tables import run_summary
from frost_nb.repro import grids
from frost_nb.repro.fidelity import collapse_row
from frost_nb.repro.grids import (
    ABLATION_EPOCHS,
    BUNDLES,
    GRIDS,
    HURST_VALUES,
    RESIDUAL_BUNDLE,
    RESIDUAL_SELECTION,
    TUNING_VALUES,
    family_of,
    grid,
    shard,
)
from frost_nb.runs import find_run, run_name, train_or_load


def reference(bundle: str = "residual"):
    """The reference run every ablation arm of ``bundle`` differs from in one setting (demo, Fashion-MNIST)."""
    refs = {"residual": grids.RESIDUAL_REF, "per-step": {**grids.PER_STEP_BUNDLE, **grids.ABLATION_BUDGET},
            "adopted": grids.ADOPTED_REF}
    return grids._run(refs[bundle], "demo", "fashion-mnist", 0)


def _diff(a, b):
    """Dotted fields where two configs differ."""
    da, db = a.to_dict(), b.to_dict()
    out = set()
    for section in da:
        if isinstance(da[section], dict):
            out |= {f"{section}.{k}" for k in da[section] if da[section][k] != db[section][k]}
        elif da[section] != db[section]:
            out.add(section)
    return out


ABLATIONS = [g for g in GRIDS if g not in ("families", "adopted", "ponder", "collapse", "update_forms", "loss_strength",
                                         "vit", "rank_frac", "variant", "block-recurrent")]
# what an arm of the adopted bundle may change beyond one setting: H reaches the leaky bracket only
# with A_alpha, B_alpha inside it; each update form keeps its own alpha map; (c)'s decisive strength
# moves both loss weights
TOGETHER = ({"model.scaled_inside", "model.hurst"}, {"model.scaled_inside", "model.learn_hurst"},
            {"model.update", "model.alpha_param"}, {"loss.lambda_rel", "loss.lambda_abs"})


@pytest.mark.parametrize("bundle", BUNDLES)
@pytest.mark.parametrize("name", ABLATIONS)
def test_every_ablation_arm_changes_one_setting(name, bundle):
    ref = reference(bundle=bundle)
    assert ref.train.epochs == ABLATION_EPOCHS and ref.train.diagnostics_every > 0
    runs = grid(name, bundle=bundle)
    for label, cfg in runs.items():
        changed = _diff(ref, cfg)
        if name == "conflict" and label != "frost":
            assert changed == {"model.name"}, label  # with the ranking losses, as frost
            assert cfg.loss.ranking
        elif bundle != "residual" and len(changed) > 1:
            assert changed in TOGETHER, (label, changed)
        else:
            assert len(changed) <= 1, (label, changed)
    assert sum(cfg.identity() == ref.identity() for cfg in runs.values()) == 1  # the reference, once


def test_adopted_reading_ablations_run_under_todays_defaults():
    """Under the adopted bundle the reference is make_config's frost at the ablation budget; the
    H sweep has H inside the bracket; the loss ablation adds experiment (c)'s decisive arms; the
    update grid has every form; the "adopted" grid sets the residual reference beside it."""
    from frost_nb.repro.grids import ADOPTED_TUNING_VALUES, DECISIVE_STRENGTH, UPDATE_FORMS, bundle_of

    ref = reference(bundle="adopted")
    assert bundle_of(ref) == "adopted" and bundle_of(reference()) == "residual"
    assert ref == make_config("demo", "fashion-mnist", "frost").replace(**{
        "train.epochs": ABLATION_EPOCHS, "train.diagnostics_every": ref.train.diagnostics_every})
    hurst = grid("hurst", bundle="adopted")
    assert all(c.model.scaled_inside for label, c in hurst.items() if label.startswith("H "))
    assert hurst["reference (plain A, B)"] == ref
    loss = grid("loss", bundle="adopted")
    assert (loss["rel 10 abs 3"].loss.lambda_rel, loss["rel 10 abs 3"].loss.lambda_abs) == DECISIVE_STRENGTH
    assert loss["abs 3 only"].loss.lambda_rel == 0 and loss["abs 3 only"].loss.lambda_abs == DECISIVE_STRENGTH[1]
    assert list(grid("update", bundle="adopted")) == list(UPDATE_FORMS)
    tuning = grid("tuning", bundle="adopted")
    assert len({repr(c.identity()) for c in tuning.values()}) == len(tuning) == 1 + 8
    assert all(v != ref.loss.rank_frac for v in ADOPTED_TUNING_VALUES["loss.rank_frac"])
    adopted = grid("adopted", bundle="adopted")
    assert adopted["reference (residual)"] == reference() and adopted["adopted reading"] == ref


def test_adopted_grid_sets_notebook_04s_selection_against_the_pinned_reference():
    runs = grid("adopted", bundle="residual")
    assert runs["reference"].identity() == reference().identity()
    # what 04's selection changed; the other settings of the residual bundle stay in both arms
    assert _diff(reference(), runs["adopted defaults"]) == {"model.update", "loss.rank_frac"}
    default = make_config("demo", "fashion-mnist", "frost", **RESIDUAL_SELECTION)
    for field in RESIDUAL_BUNDLE:
        section, name = field.split(".")
        assert getattr(getattr(runs["adopted defaults"], section), name) == getattr(getattr(default, section), name)


def test_grid_values_are_the_declared_ones():
    hurst = grid("hurst", bundle="residual")
    assert sorted(c.model.hurst for c in hurst.values() if not c.model.learn_hurst) == sorted(HURST_VALUES)
    assert sum(c.model.learn_hurst for c in hurst.values()) == 1
    tuning = grid("tuning", bundle="residual")
    assert len(tuning) == 1 + sum(len(v) for v in TUNING_VALUES.values())
    loss = grid("loss", bundle="residual")
    assert loss["abs only"].loss.lambda_rel == 0 and loss["rel only"].loss.lambda_abs == 0
    assert not loss["neither"].loss.ranking


def test_families_train_baselines_on_the_task_loss_only():
    runs = grid("families", seeds=(0, 1), bundle="residual")
    assert len(runs) == 10  # families x 2 seeds, the no-ranking control and adopted defaults once
    for once in ("frost (no ranking)", "frost (adopted defaults)"):
        assert f"{once} seed 0" in runs and f"{once} seed 1" not in runs
    for label, cfg in runs.items():
        ranked = cfg.model.name == "frost" and "no ranking" not in label
        assert cfg.loss.ranking == ranked, label
        assert cfg.train.diagnostics_every == 0
        assert family_of(label) == label.rsplit(" seed ", 1)[0] and family_of(label).split()[0] == cfg.model.name
    label = "frost (adopted defaults) seed 0"
    selection = make_config("demo", "fashion-mnist", "frost", **RESIDUAL_SELECTION)
    assert runs[label].identity() == selection.identity()
    # where it is stored when trained (the committed copy was pruned with the residual bundle's runs)
    assert runs.run_name(label) == "fashion-mnist-demo-families-residual/frost-adopted-defaults-seed0"
    assert {c.train.seed for c in runs.values()} == {0, 1}


def test_vit_grid_is_the_four_families_on_the_vit_backbone_at_the_papers_depth():
    from frost_nb.repro.grids import VIT_EPOCHS, VIT_STEPS

    runs = grid("vit", "demo", "cifar100")
    assert list(runs) == ["frost", "vanilla", "recurrent", "basic_ssm"]  # frost first: trained first
    for label, cfg in runs.items():
        assert (cfg.model.name, cfg.model.backbone, cfg.data.name) == (label, "vit", "cifar100")
        assert (cfg.model.steps, cfg.model.patch_size, cfg.train.epochs) == (VIT_STEPS, 4, VIT_EPOCHS) == (12, 4, 10)
        assert cfg.loss.ranking == (label == "frost")  # the baselines train on the task loss alone
    # the defaults when the grid was fixed and its frost trained: the per-step bundle
    assert runs["frost"] == make_config("demo", "cifar100", "frost", "vit", **{"model.steps": 12, "train.epochs": 10,
                                                                             "loss.rank_pairs": "per_step"})
    assert all(cfg.loss.rank_pairs == "per_step" for cfg in runs.values())
    assert grid("vit", "smoke", None)["frost"].train.epochs == 2


def test_shards_partition_a_grid():
    runs = grid("tuning")
    parts = [shard(runs, i, 3) for i in range(3)]
    assert sum(len(p) for p in parts) == len(runs)
    assert set().union(*parts) == set(runs)
    with pytest.raises(ValueError, match="0..2"):
        shard(runs, 3, 3)
    with pytest.raises(ValueError, match="unknown grid"):
        grid("nope")


def test_run_summary_of_a_smoke_run():
    cfg = grid("loss", size="smoke", dataset=None)["both"]
    assert cfg.train.epochs == 2
    result = train_or_load(cfg, name="loss-smoke/both", progress=False)
    row = run_summary(result, {})
    for split in ("val", "test"):
        assert 0 <= row[f"{split}_accuracy_q0.125"] <= 1 and 1 <= row[f"{split}_depth_q0.125"] <= 4
        # the score averages the grid, whose last point (q = 1) is the full-depth accuracy
        assert min(row[f"{split}_accuracy_q0.125"], row[f"{split}_accuracy"]) - 1e-9 <= \
            row[f"{split}_score"] <= 1
    assert row["alpha"] > 0 and row["key"] == run_name(result.checkpoint) == "loss-smoke/both"


def test_ponder_grid_is_the_adopted_frost_with_pondernets_loss():
    runs = grid("ponder", seeds=(0, 1), bundle="residual")
    assert list(runs) == ["frost (ponder) seed 0", "frost (ponder) seed 1"]
    for seed in (0, 1):
        frost = grid("families", seeds=(seed,), bundle="residual")["frost (adopted defaults)"]  # its seed's run
        ponder = runs[f"frost (ponder) seed {seed}"]
        assert _diff(frost, ponder) == {"loss.ranking", "loss.ponder"}  # same data, model, budget
        assert ponder.loss.ponder and not ponder.loss.ranking and ponder.model.update == "gated"
        assert family_of(f"frost (ponder) seed {seed}") == "frost (ponder)" and ponder.model.name == "frost"
    assert grid("ponder", size="smoke", dataset=None)["frost (ponder)"].train.epochs == 2


def test_collapse_grid_pairs_each_ranking_run_with_its_families_reference():
    seeds = (0, 1, 2)
    runs = grid("collapse", "demo", "digits", seeds=seeds, bundle="residual")
    families = grid("families", "demo", "digits", seeds=seeds, bundle="residual")
    assert len(runs) == 3 * 2 * len(seeds)
    for m in ("vanilla", "recurrent", "basic_ssm"):
        for seed in seeds:
            reference, ranked = runs[f"{m} seed {seed}"], runs[f"{m} (ranking) seed {seed}"]
            assert reference.identity() == families[f"{m} seed {seed}"].identity()  # the families run itself
            assert not reference.loss.ranking and ranked.loss.ranking
            assert _diff(reference, ranked) == {"loss.ranking", "loss.rank_frac"}
            assert ranked.loss.rank_frac == make_config("demo", "digits", "frost").loss.rank_frac
            assert ranked.train.epochs == families[f"frost seed {seed}"].train.epochs  # frost's budget
            assert family_of(f"{m} (ranking) seed {seed}") == f"{m} (ranking)" and ranked.model.name == m
            assert family_of(f"{m} seed {seed}") == m == reference.model.name


def test_collapse_row_of_a_smoke_run():
    runs = grid("collapse", size="smoke", dataset=None, bundle="residual")
    ranked = train_or_load(runs["recurrent (ranking)"], progress=False)
    reference = train_or_load(runs["recurrent"], progress=False)
    row = collapse_row(ranked, reference)
    assert set(row) == {"model", "seed", "collapsed", "reasons", "accuracy", "reference_accuracy",
                        "one_step_share", "gradient_cosine", "reference_gradient_cosine"}
    assert (row["model"], row["seed"]) == ("recurrent", 0)
    assert row["accuracy"] == pytest.approx(ranked.metrics["test_accuracy"])
    assert row["reference_accuracy"] == pytest.approx(reference.metrics["test_accuracy"])
    assert -1 <= row["gradient_cosine"] <= 1 and 0 < row["one_step_share"] <= 1
    assert row["collapsed"] == bool(row["reasons"])


def test_notebook_stops_before_training_what_is_not_committed(monkeypatch):
    """At demo size a notebook whose runs are neither committed nor cached stops at once, saying
    how long training would take and how to ask for it; retrain=True lets it train."""
    from frost_nb.repro.grids import RunsNotTrained, require_trained

    monkeypatch.delenv("FROST_SMOKE", raising=False)
    # not committed, but for H = 0.5, the residual reference (committed as the adopted grid's comparison)
    hurst = grid("hurst", "demo", "fashion-mnist", bundle="residual")
    runs = {**hurst, "again": hurst["H = 0.5"]}
    with pytest.raises(RunsNotTrained, match=r"5 of the 6 runs .* about 1\.0 h .*retrain = True"):
        require_trained(runs, retrain=False)
    require_trained(runs, retrain=True)  # allowed: nothing raised, nothing trained here
    monkeypatch.setenv("FROST_SMOKE", "1")
    require_trained(runs, retrain=False)  # smoke runs train in seconds: never stopped


def _committed_parameters(notebook: str) -> dict:
    """The parameters a committed notebook ran with (its parameters cell's literals)."""
    import ast
    import json

    from frost_nb.paths import repo_root

    path = next((repo_root() / "notebooks").glob(f"{notebook}_*.ipynb"))
    cell = next(c for c in json.loads(path.read_text())["cells"] if "parameters" in c["metadata"].get("tags", []))
    return {s.target.id: ast.literal_eval(s.value) for s in ast.parse("".join(cell["source"])).body}


def test_committed_notebook_runs_are_all_committed(monkeypatch):
    """What notebooks 01-05 and 07 read at their committed parameters is committed in
    outputs/runs/, so a fresh clone re-executes them without training (04 under the residual
    reading says how long it would train instead; test above), 05's CIFAR-100 seeds and 04's
    CIFAR-100 loss ablation included."""
    from frost_nb.checkpoint import checkpoint_config
    from frost_nb.config import make_config
    from frost_nb.repro.grids import require_trained

    five = _committed_parameters("05")
    frost = checkpoint_config(five["checkpoint"])
    # 05's checkpoint: the CIFAR-100 frost of today's defaults at the paper's structure (ladder64); the
    # per-step runs of the same seeds beside it only when compare_bundle names them
    assert frost.identity() == make_config("ladder64", "cifar100", "frost").identity()  # trained compiled
    vit = {}
    if five["vit_checkpoint"] is not None:  # the ViT section, once its run is committed
        vit = {"05: vit": checkpoint_config(five["vit_checkpoint"])}
        assert vit["05: vit"] == grid("vit", "demo", "cifar100")["frost"]
    # 04 reads the per-step bundle at its committed parameters (its grids were not retrained, issue 30);
    # 02, 03, 07, 01 and the demo read today's defaults (the adopted bundle)
    step, adopted = "per-step", "adopted"
    digits = grid("families", "demo", "digits", bundle=adopted)
    cifar100 = grid("families", "demo", "cifar100", bundle=adopted)
    two = _committed_parameters("02")  # 02 at its committed size, the families trained there
    assert all(_committed_parameters(nb)["dataset"] == "cifar100" for nb in ("02", "03", "07"))
    needed = {"01": make_config("demo", "fashion-mnist", "frost"), "demo": make_config("demo", "digits", "frost"),
              # 02 and 03 on CIFAR-100 (issue 31): the four families and the no-ranking control, 3 seeds each
              **{f"02: {k}": c for k, c in grid("families", two["size"], "cifar100", seeds=(0, 1, 2),
                                                bundle=adopted).only(two.get("models")).items()},
              **{f"05: seed {s}": frost.replace(**{"train.seed": s}) for s in range(five["seeds"])},
              **{f"05 {five['compare_bundle']}: seed {s}": grid("families", frost.size, "cifar100", (s,),
                                                                 bundle=five["compare_bundle"])["frost"]
                 for s in range(five["seeds"]) if five["compare_bundle"]},
              **vit,
              # 07's rules on CIFAR-100 (issue 31); the digits ones stay committed as its secondary rows
              **{f"07: {k}": cifar100[k] for k in ("frost", "basic_ssm", "recurrent", "vanilla")},
              **{f"07: {k}": c for k, c in grid("ponder", "demo", "cifar100", bundle=adopted).items()},
              **{f"07 digits: {k}": digits[k] for k in ("frost", "basic_ssm", "recurrent", "vanilla")},
              **{f"07: {k}": c for k, c in grid("collapse", "demo", "digits", seeds=(0, 1, 2), bundle=adopted).items()},
              "07: throughput": grid("families", "demo", "fashion-mnist", bundle=adopted)["frost"],
              **{f"04 {g}: {k}": c for g in ("hurst", "loss", "tuning", "update", "conflict", "adopted")
                 for k, c in grid(g, "demo", "fashion-mnist", bundle=step).items()},
              **{f"04 cifar100 loss: {k}": c for k, c in grid("loss", "demo", "cifar100", bundle=step).items()}}
    assert _committed_parameters("04")["bundle"] == step
    assert all(_committed_parameters(nb)["bundle"] == adopted for nb in ("02", "03", "07"))
    monkeypatch.delenv("FROST_SMOKE", raising=False)  # make test sets it, and smoke runs are never stopped
    require_trained(needed, retrain=False)


def test_readings_grid_and_its_measurements():
    """Experiment (b)'s grid: every update form x h_0 under the adopted halting settings; the row
    it measures on a trained run (frost_nb.repro.claims decides)."""
    from frost_nb.repro.fidelity import update_form_row
    from frost_nb.repro.grids import ADOPTED_BUNDLE, UPDATE_FORMS

    runs = grid("update_forms", "smoke", None)
    assert len(runs) == 2 * len(UPDATE_FORMS)
    leaky, gated = runs["leaky, h0 = zeros"], runs["gated, h0 = embedding"]
    assert (leaky.model.update, leaky.model.alpha_param, leaky.model.init_state) == ("leaky", "sigmoid", "zeros")
    assert gated.model.alpha_param == "softplus"  # each form's own default map
    for cfg in (leaky, gated):
        assert cfg.model.halt_norm == ADOPTED_BUNDLE["model.halt_norm"]
        assert cfg.loss.rank_pairs == "per_step" and cfg.halting.sketch_window == "run"
    row = update_form_row(train_or_load(leaky), jvp_samples=8)
    assert 0.0 < row["jvp_norm"] and 0.0 <= row["bound_holds"] <= 1.0
    assert len(row["accuracy per depth"]) == leaky.model.steps and row["accuracy"] == row["accuracy per depth"][-1]
    assert 0.0 < row["alpha start"] < 1.0 and row["alpha min"] <= row["alpha end"]


def test_readings_grid_off_digits_is_the_two_form_check_at_the_ablation_budget():
    from frost_nb.repro.grids import UPDATE_CHECK_FORMS

    runs = grid("update_forms", "demo", "fashion-mnist")
    assert sorted(runs) == sorted(f"{u}, h0 = embedding" for u in UPDATE_CHECK_FORMS)
    assert {c.train.epochs for c in runs.values()} == {ABLATION_EPOCHS}
    assert {c.data.name for c in runs.values()} == {"fashion-mnist"}


def test_loss_strength_grid_arms_and_references():
    """Experiment (c): every family at each strength under the adopted halting settings with the
    gradient probe on, beside its task-only reference (the baselines' families runs themselves)."""
    from frost_nb.repro.grids import LOSS_STRENGTHS, PER_STEP_BUNDLE, strength_label

    runs = grid("loss_strength", "demo", "digits", seeds=(0, 1))
    families = grid("families", "demo", "digits", seeds=(0, 1))
    assert len(runs) == 2 * 4 * (1 + len(LOSS_STRENGTHS))
    for seed in (0, 1):
        for m in ("vanilla", "recurrent", "basic_ssm", "frost"):
            ref = runs[f"{m} (task only) seed {seed}"]
            assert not ref.loss.ranking and ref.train.seed == seed
            if m != "frost":
                assert ref.identity() == families[f"{m} seed {seed}"].identity()
            else:
                assert (ref.model.update, ref.model.halt_norm) == ("leaky", True)
            for rel, abs_ in LOSS_STRENGTHS:
                arm = runs[f"{strength_label(m, rel, abs_)} seed {seed}"]
                assert arm.loss.ranking and (arm.loss.lambda_rel, arm.loss.lambda_abs) == (rel, abs_)
                assert arm.train.diagnostics_every > 0 and arm.train.epochs == ref.train.epochs
                # experiment (c) ran under the per-step bundle and keeps that identity
                assert arm.model.halt_norm and arm.loss.rank_pairs == PER_STEP_BUNDLE["loss.rank_pairs"]
                assert arm.halting.sketch_window == PER_STEP_BUNDLE["halting.sketch_window"]
                assert arm.model.name == m and arm.model.update == ref.model.update
    assert strength_label("frost", 0.0, 3.0) == "frost, abs 3 only"
    assert strength_label("vanilla", 10.0, 3.0) == "vanilla, rel 10 abs 3"


def test_strength_row_of_a_smoke_run():
    from frost_nb.repro.fidelity import strength_row

    runs = grid("loss_strength", "smoke", None)
    arm = train_or_load(runs["frost, rel 3 abs 1"], progress=False)
    ref = train_or_load(runs["frost (task only)"], progress=False)
    row = strength_row(arm, ref)
    assert (row["model"], row["lambda_rel"], row["lambda_abs"]) == ("frost", 3.0, 1.0)
    assert row["probes"] >= 1 and len(row["step_cosine_profile"]) == arm.config.model.steps
    assert -1 <= row["step_cosine"] <= 1 and row["rank_task_ratio"] > 0
    assert row["step_cosine"] == pytest.approx(sum(row["step_cosine_profile"]) / arm.config.model.steps)
    with pytest.raises(ValueError, match="diagnostics_every"):
        strength_row(ref, ref)  # the reference has no probes


def test_families_under_the_adopted_reading_share_the_task_only_baselines():
    from frost_nb.repro.grids import DECISIVE_STRENGTH, bundle_of, strength_label

    adopted = grid("families", "demo", "fashion-mnist", seeds=(0, 1))
    residual = grid("families", "demo", "fashion-mnist", seeds=(0, 1), bundle="residual")
    assert sorted(adopted) == sorted([f"{m} seed {s}" for m in ("vanilla", "recurrent", "basic_ssm", "frost")
                                      for s in (0, 1)] + ["frost (no ranking) seed 0"])
    for label, cfg in adopted.items():
        if cfg.model.name != "frost":
            assert cfg.identity() == residual[label].identity() and not cfg.loss.ranking  # the same runs
    assert adopted["frost seed 1"] == make_config("demo", "fashion-mnist", "frost", **{"train.seed": 1})
    assert bundle_of(adopted["frost seed 0"]) == "adopted"
    # without ranking the sets reach no weight: the per-step bundle's control serves both
    per_step = grid("families", "demo", "fashion-mnist", seeds=(0, 1), bundle="per-step")
    assert adopted["frost (no ranking) seed 0"] == per_step["frost (no ranking) seed 0"]
    assert bundle_of(per_step["frost seed 0"]) == "per-step" == bundle_of(adopted["frost (no ranking) seed 0"])
    assert per_step["frost seed 0"].loss.rank_pairs == "per_step" and adopted["frost seed 0"].loss.rank_pairs == "global"
    assert bundle_of(residual["frost seed 0"]) == "residual" == bundle_of(residual["frost (adopted defaults) seed 0"])
    assert family_of("frost seed 0") == "frost" and adopted["frost seed 0"].loss.ranking
    ponder = grid("ponder", "demo", "digits")["frost (ponder)"]
    assert ponder == grid("ponder", "demo", "digits", bundle="per-step")["frost (ponder)"]  # no sets reach it
    per_step_frost = grid("families", "demo", "digits", bundle="per-step")["frost"]
    assert _diff(per_step_frost, ponder) == {"loss.ranking", "loss.ponder"}
    collapse = grid("collapse", "demo", "digits", seeds=(0,), bundle="per-step")  # as experiment (c) ran
    arm = collapse["recurrent (ranking)"]
    assert (arm.loss.lambda_rel, arm.loss.lambda_abs) == DECISIVE_STRENGTH
    strength = grid("loss_strength", "demo", "digits")
    assert arm.identity() == strength[strength_label("recurrent", *DECISIVE_STRENGTH)].identity()
    with pytest.raises(ValueError, match="bundle"):
        grid("families", bundle="canonical")


def test_task_only_baselines_are_the_same_under_any_halting_settings(tiny_config, tmp_path):
    """Why the adopted bundle reuses the baselines' runs: trained on the task loss alone, a
    baseline's weights do not depend on the halting head's LayerNorm, pairs or sketch."""
    from frost_nb.repro.grids import ADOPTED_BUNDLE
    from frost_nb.training import train

    base = tiny_config.replace(**{"model.name": "recurrent", "loss.ranking": False, "train.epochs": 1})
    a = train(base.replace(**{k: v for k, v in RESIDUAL_SELECTION.items() if k != "model.update"}),
              checkpoint=tmp_path / "a.pt")
    b = train(base.replace(**{k: v for k, v in ADOPTED_BUNDLE.items() if k not in ("model.update", "model.alpha_param")}),
              checkpoint=tmp_path / "b.pt")
    assert a.config.model.halt_norm != b.config.model.halt_norm
    sa, sb = a.model.state_dict(), b.model.state_dict()
    for name, value in sa.items():
        if not name.startswith("halt_head"):
            assert torch.equal(value, sb[name]), name


def test_frost_without_ranking_is_the_same_run_under_either_set(tiny_config, tmp_path):
    """Why the adopted families share the per-step bundle's "frost (no ranking)" control
    (grids.NO_RANKING): with the ranking losses off, global or per-step sets (and their size)
    reach only a logged diagnostic, never a weight, the halting head included."""
    from frost_nb.training import train

    base = tiny_config.replace(**{"model.name": "frost", "loss.ranking": False, "train.epochs": 1})
    a = train(base.replace(**{"loss.rank_pairs": "per_step", "loss.rank_frac": 0.5}), checkpoint=tmp_path / "a.pt")
    b = train(base.replace(**{"loss.rank_pairs": "global", "loss.rank_frac": 0.25}), checkpoint=tmp_path / "b.pt")
    sa, sb = a.model.state_dict(), b.model.state_dict()
    assert sa.keys() == sb.keys()
    for name, value in sa.items():
        assert torch.equal(value, sb[name]), name
    # the logged diagnostic does see the sets: the test compares two different settings
    assert a.history["steps"]["easy_score"] != b.history["steps"]["easy_score"]


def test_adopted_label_takes_another_setting_only_above_the_margin():
    """Notebook 04's tuning rule, as issue 30's rank_frac choice applies it (ADOPT_MARGIN on either side)."""
    import pandas as pd

    from frost_nb.repro.grids import ADOPT_MARGIN, adopted_label

    ref = "rank_frac = 0.5"
    above = pd.Series({ref: 0.80, "rank_frac = 0.25": 0.80 + ADOPT_MARGIN + 1e-3, "rank_frac = 0.125": 0.70})
    below = above.copy()
    below["rank_frac = 0.25"] = 0.80 + ADOPT_MARGIN - 1e-3
    assert adopted_label(above, ref) == "rank_frac = 0.25"
    assert adopted_label(below, ref) == ref
    assert adopted_label(pd.Series({ref: 0.9, "rank_frac = 0.25": 0.8}), ref) == ref


def test_variant_grid_differs_from_frost_only_in_its_losses():
    """The variant beyond the paper is FROST's default run with the ranking losses replaced by its own
    terms (docs/method.md section 14): every other setting, the data and the epochs are the same, and
    FROST beside it is the families grid's run (not trained again)."""
    from frost_nb.repro.grids import VARIANT_LABEL

    runs = grid("variant", "demo", "cifar100", seeds=(0, 1))
    assert list(runs) == ["frost seed 0", f"{VARIANT_LABEL} seed 0", "frost seed 1", f"{VARIANT_LABEL} seed 1"]
    frost, variant = runs["frost seed 0"], runs[f"{VARIANT_LABEL} seed 0"]
    assert frost.identity() == grid("families", "demo", "cifar100")["frost"].identity()
    differ = {k for k, v in variant.flat().items() if frost.flat()[k] != v}
    assert differ <= {"loss.ranking", "loss.rank_grad_to_backbone", "loss.deep_supervision", "loss.distill",
                      "loss.halt_target"} and "loss.halt_target" in differ
    assert variant.loss.score_halting and not variant.loss.ranking
    assert runs.run_name(f"{VARIANT_LABEL} seed 0").startswith("cifar100-demo-variant/frost-")
