"""Grids of runs for the analysis notebooks: each ablation arm changes one thing."""

import pytest

from frost_nb.checkpoint import train_or_load
from frost_nb.config import make_config
from frost_nb.experiments import (
    ABLATION_EPOCHS,
    GRIDS,
    HURST_VALUES,
    PRE_SELECTION,
    TUNING_VALUES,
    family_label,
    grid,
    reference,
    run_summary,
    shard,
)


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


@pytest.mark.parametrize("name", [g for g in GRIDS if g not in ("families", "adopted")])
def test_every_ablation_arm_changes_one_setting(name):
    ref = reference()
    assert ref.train.epochs == ABLATION_EPOCHS and ref.train.diagnostics_every > 0
    runs = grid(name)
    for label, cfg in runs.items():
        changed = _diff(ref, cfg)
        if name == "conflict" and label != "frost":
            assert changed == {"model.name"}, label  # with the ranking losses, as frost
            assert cfg.loss.ranking
        else:
            assert len(changed) <= 1, (label, changed)
    assert sum(cfg.key() == ref.key() for cfg in runs.values()) == 1  # the reference, once


def test_adopted_grid_sets_the_current_defaults_against_the_pinned_reference():
    runs = grid("adopted")
    assert runs["reference"].key() == reference().key()
    assert _diff(reference(), runs["adopted defaults"]) == set(PRE_SELECTION)  # what the selection changed
    default = make_config("demo", "fashion-mnist", "frost")
    for field in PRE_SELECTION:
        section, name = field.split(".")
        assert getattr(getattr(runs["adopted defaults"], section), name) == getattr(getattr(default, section), name)


def test_grid_values_are_the_declared_ones():
    assert sorted(c.model.hurst for c in grid("hurst").values() if not c.model.learn_hurst) == \
        sorted(HURST_VALUES)
    assert sum(c.model.learn_hurst for c in grid("hurst").values()) == 1
    tuning = grid("tuning")
    assert len(tuning) == 1 + sum(len(v) for v in TUNING_VALUES.values())
    loss = grid("loss")
    assert loss["abs only"].loss.lambda_rel == 0 and loss["rel only"].loss.lambda_abs == 0
    assert not loss["neither"].loss.ranking


def test_families_train_baselines_on_the_task_loss_only():
    runs = grid("families", seeds=(0, 1))
    assert len(runs) == 11  # 5 frost variants and families x 2 seeds, the no-ranking control once
    assert "frost (no ranking) seed 0" in runs and "frost (no ranking) seed 1" not in runs
    for label, cfg in runs.items():
        ranked = cfg.model.name == "frost" and "no ranking" not in label
        assert cfg.loss.ranking == ranked, label
        assert cfg.train.diagnostics_every == 0
        assert family_label(cfg) == label.rsplit(" seed ", 1)[0]
    assert runs["frost (adopted defaults) seed 0"].key() == make_config("demo", "fashion-mnist", "frost").key()
    assert {c.train.seed for c in runs.values()} == {0, 1}


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
    row = run_summary(train_or_load(cfg, progress=False))
    for split in ("val", "test"):
        assert 0 <= row[f"{split}_accuracy_q0.125"] <= 1 and 1 <= row[f"{split}_depth_q0.125"] <= 4
        # the score averages the grid, whose last point (q = 1) is the full-depth accuracy
        assert min(row[f"{split}_accuracy_q0.125"], row[f"{split}_accuracy"]) - 1e-9 <= \
            row[f"{split}_score"] <= 1
    assert row["alpha"] > 0 and row["key"] == cfg.key()
