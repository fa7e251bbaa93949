"""The verdict table: generated from the committed metrics, its rules follow the numbers."""

import json
import shutil

import pytest

from frost_nb.__main__ import main
from frost_nb.paths import repo_root
from frost_nb.config import UPDATES
from frost_nb.verdicts import (COLUMNS, END, NA, NOT, PARTLY, REPRODUCED, START, current_block,
                               default_metrics_dir, markdown_table, replace_block, verdict_rows,
                               verdict_table)

README = repo_root() / "README.md"


@pytest.fixture(scope="module")
def committed_rows():
    return verdict_rows()


def _copy(tmp_path, *names):
    """A metrics folder holding copies of the committed ``names`` (with their suffix)."""
    folder = tmp_path / "metrics"
    folder.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(default_metrics_dir() / name, folder / name)
    return folder


def _edit(folder, name, change):
    path = folder / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _verdict(folder, claim_start, reading=None, dataset=None):
    rows = [r for r in verdict_rows(folder) if r["claim"].startswith(claim_start)
            and reading in (None, r["reading"]) and dataset in (None, r["dataset"])]
    assert len(rows) == 1, rows
    return rows[0]["verdict"]


def test_readme_block_is_the_generated_table(committed_rows):
    """The drift test: refresh with ``python -m frost_nb verdicts --write README.md``."""
    block = current_block(README.read_text())
    assert block is not None, f"README.md has no {START} ... {END} block"
    assert block == markdown_table(committed_rows), \
        "README.md's verdict table is stale: python -m frost_nb verdicts --write README.md"


def test_committed_rows_are_unique_and_complete(committed_rows):
    triples = [(r["claim"], r["reading"], r["dataset"]) for r in committed_rows]
    assert len(triples) == len(set(triples))
    assert all(set(r) == set(COLUMNS) and all(r.values()) for r in committed_rows)
    assert {r["verdict"] for r in committed_rows} <= {REPRODUCED, PARTLY, NOT, "protocol-dependent"}
    # every reading comes from a run's config: an update form (", h0 = 0" when the state starts
    # at zero), or n/a for the baselines
    assert {r["reading"] for r in committed_rows} <= set(UPDATES) | {f"{u}, h0 = 0" for u in UPDATES} | {NA}


def test_verdict_table_filters_one_notebook(committed_rows):
    table = verdict_table("02")
    assert list(table.columns) == list(COLUMNS)
    assert set(table["notebook"]) <= {"02"}
    assert len(table) == sum(r["notebook"] == "02" for r in committed_rows)


def test_kappa_rule_follows_the_numbers(tmp_path):
    folder = _copy(tmp_path, "02_scale_consistency_residual.json")

    def frost_runs(kappa, bound):
        def change(data):  # the frost runs of one reading: those named "frost" (canonical)
            for r in data["kappa"]:
                if r["model"] == "frost":
                    r["kappa"], r["bound_holds"] = kappa, bound
        return change
    for kappa, bound, verdict in ((1.02, 0.1, NOT), (0.95, 0.97, REPRODUCED), (0.95, 0.1, PARTLY),
                                  (1.0, 0.95, PARTLY)):
        _edit(folder, "02_scale_consistency_residual.json", frost_runs(kappa, bound))
        assert _verdict(folder, "Appendix B", "canonical") == verdict, (kappa, bound)


def test_table1_rule_follows_the_numbers(tmp_path):
    folder = _copy(tmp_path, "02_scale_consistency_residual.json")

    def curves(frost):
        def change(data):  # flat curves: basic_ssm 0.5, vanilla 0.3, frost as given
            level = {"basic_ssm": 0.5, "vanilla": 0.3, "frost": frost}
            for r in data["table1"]:
                r["mean"] = level.get(r["model"], r["mean"])
        return change
    for frost, verdict in ((0.6, REPRODUCED), (0.4, PARTLY), (0.2, NOT)):
        _edit(folder, "02_scale_consistency_residual.json", curves(frost))
        assert _verdict(folder, "Table 1", "canonical") == verdict, frost


def test_collapse_rule_counts_runs(tmp_path):
    folder = _copy(tmp_path, "07_halting_baselines_per-step.json")

    def collapsed(count):
        def change(d):  # the first `count` runs lose their accuracy, the others keep it
            for i, r in enumerate(d["collapse"]):
                r["one_step_share"] = 0.3
                r["accuracy"] = (0.1 if i < count else 1.0) * r["reference_accuracy"]
        return change
    runs = len(json.loads((folder / "07_halting_baselines_per-step.json").read_text())["collapse"])
    for count, verdict in ((0, NOT), (1, PARTLY), (runs, REPRODUCED)):
        _edit(folder, "07_halting_baselines_per-step.json", collapsed(count))
        assert _verdict(folder, "Appendix D: the baselines collapse") == verdict, count
    # the other criterion: nearly every sample exits at one step
    _edit(folder, "07_halting_baselines_per-step.json", collapsed(0))
    _edit(folder, "07_halting_baselines_per-step.json", lambda d: d["collapse"][0].update(one_step_share=0.99))
    assert _verdict(folder, "Appendix D: the baselines collapse") == PARTLY


def test_flop_ratio_rule_uses_its_tolerance(tmp_path):
    folder = _copy(tmp_path, "06_complexity.json")

    def frost_off_by(factor):
        def change(d):  # every ViT row at the paper's ratio, frost's times `factor`
            for r in d["ratios"]:
                if r["backbone"] == "vit" and r["paper gflops / vanilla"]:
                    scale = factor if r["model"] == "frost" else 1.0
                    r["gflops / vanilla"] = scale * r["paper gflops / vanilla"]
        return change
    for factor, verdict in ((1.0, REPRODUCED), (1.15, REPRODUCED), (1.3, PARTLY), (0.6, PARTLY), (2.0, NOT)):
        _edit(folder, "06_complexity.json", frost_off_by(factor))
        assert _verdict(folder, "Table 3 (ViT): GFLOPs") == verdict, factor


def test_sweep_csv_rule_follows_the_numbers(tmp_path):
    """A sweep CSV names no run: its reading comes from the committed checkpoint it matches."""
    name = "sweep_demo_frost_fashion-mnist_adopted.csv"
    folder = _copy(tmp_path, name)
    lines = (folder / name).read_text().splitlines()
    header, committed = lines[0].split(","), [line.split(",") for line in lines[1:]]
    acc, q = header.index("accuracy"), header.index("quantile")
    full = float(committed[-1][acc])

    def kept(share_of):  # accuracy at q < 1 set to share_of(q) times full depth's
        rows = [list(r) for r in committed]
        for r in rows:
            if float(r[q]) < 1.0:
                r[acc] = str(share_of(float(r[q])) * full)
        (folder / name).write_text("\n".join([lines[0]] + [",".join(r) for r in rows]) + "\n")
    for share_of, verdict in ((lambda q: 0.99, REPRODUCED), (lambda q: 0.99 if q >= 0.5 else 0.3, PARTLY),
                              (lambda q: 0.5, NOT)):
        kept(share_of)
        assert _verdict(folder, "Table 2: accuracy kept", "gated", "fashion-mnist") == verdict


def test_matched_depth_rule_reads_the_curve_at_the_papers_depths(tmp_path):
    """05's sweep read at the paper's mean depths: a curve that reaches full-depth accuracy by
    the paper's q = 0.25 depth keeps everything there; one that is flat at half below T does not."""
    name = "05_halting_fashion-mnist_per-step.json"
    folder = _copy(tmp_path, name)

    def curve(accuracy_at):  # every seed's sweep: accuracy as a function of the mean depth
        def change(d):
            for r in d["sweep"]:
                r["accuracy"] = accuracy_at(r["mean_depth"])
        return change
    full = 0.9
    for accuracy_at, verdict in ((lambda depth: full if depth >= 1.5 else 0.1, REPRODUCED),
                                 (lambda depth: full if depth >= 8 else 0.1, PARTLY),
                                 (lambda depth: full if depth == 16 else full / 2, NOT)):
        _edit(folder, name, curve(accuracy_at))
        assert _verdict(folder, "Table 2 at the paper's mean depths", "leaky", "fashion-mnist") == verdict


def test_missing_files_drop_their_rows(tmp_path, committed_rows):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert verdict_rows(empty) == []
    assert verdict_rows(tmp_path / "no such folder") == []
    folder = _copy(tmp_path, "06_complexity.json", "06_complexity_residual.json")
    rows = verdict_rows(folder)
    assert rows and {r["notebook"] for r in rows} == {"06"}
    assert rows == [r for r in committed_rows if r["notebook"] == "06"]


def test_unreadable_file_drops_its_claim_with_a_warning(tmp_path):
    folder = _copy(tmp_path, "06_complexity.json", "07_halting_baselines_per-step.json")
    _edit(folder, "06_complexity.json", lambda d: d.pop("ratios"))
    with pytest.warns(UserWarning, match="table3"):
        rows = verdict_rows(folder)
    assert rows and all(r["notebook"] == "07" for r in rows)


def test_benchmark_metrics_add_speed_rows(tmp_path):
    folder = tmp_path / "metrics"
    folder.mkdir()
    adaptive = {"benchmark": "adaptive_inference",
                "checkpoint": "outputs/runs/fashion-mnist-demo-families-residual/frost-seed0/model.pt",
                "dataset": "fashion-mnist", "update": "canonical", "env": {"device": "cpu"},
                "rows": [{"quantile": q, "batch_size": b, "ratio": r}
                         for q, b, r in ((0.25, 64, 0.74), (0.25, 256, 0.88), (0.5, 256, 0.96))]}
    train = {"benchmark": "train_throughput", "size": "demo", "env": {"device": "cpu"},
             "rows": [{"model": "frost", "update": "gated", "size": "demo", "dataset": "fashion-mnist",
                       "kll_share": 0.0007},
                      {"model": "vanilla", "update": "gated", "size": "demo", "dataset": "fashion-mnist",
                       "kll_share": 0.5}]}
    (folder / "bench_adaptive_inference.json").write_text(json.dumps(adaptive))
    (folder / "bench_train_throughput.json").write_text(json.dumps(train))
    rows = {r["claim"].split(":")[0]: r for r in verdict_rows(folder)}
    assert rows["Adaptive inference"]["verdict"] == PARTLY  # 0.88 at batch 256: below 0.9
    assert rows["Adaptive inference"]["ours"] == "0.88"
    assert rows["KLL threshold"]["verdict"] == REPRODUCED  # frost's share only
    assert rows["KLL threshold"]["reading"] == "gated"


def test_replace_block_keeps_the_rest():
    text = f"intro\n{START}\nold\n{END}\nrest\n"
    assert replace_block(text, "| a |") == f"intro\n{START}\n| a |\n{END}\nrest\n"
    assert current_block(replace_block(text, "| a |")) == "| a |"
    with pytest.raises(ValueError):
        replace_block("no markers", "| a |")


def test_cli_check_and_write(tmp_path, capsys):
    folder = _copy(tmp_path, "06_complexity.json")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{START}\n| stale | table |\n{END}\n\nafter\n")
    args = ["verdicts", "--metrics-dir", str(folder)]
    assert main(args + ["--check", str(readme)]) == 1
    assert "stale" in capsys.readouterr().err
    assert main(args + ["--write", str(readme)]) == 0
    assert main(args + ["--check", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n\n") and text.endswith("\n\nafter\n")
    assert main(args) == 0
    assert capsys.readouterr().out.strip() == current_block(text)
    (tmp_path / "plain.md").write_text("no block here\n")
    assert main(args + ["--check", str(tmp_path / "plain.md")]) == 2


def test_cli_write_leaves_the_readme_whole_when_the_write_fails(tmp_path, capsys, monkeypatch):
    """A full disk halfway through --write: the README keeps its old text, no temporary file stays."""
    from pathlib import Path

    folder = _copy(tmp_path, "06_complexity.json")
    readme = tmp_path / "README.md"
    before = f"# x\n\n{START}\n| stale | table |\n{END}\n"
    readme.write_text(before)

    def full_disk(self, *args, **kwargs):
        with open(self, "w") as f:
            f.write("half a table")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    assert main(["verdicts", "--metrics-dir", str(folder), "--write", str(readme)]) == 2
    assert "README.md" in capsys.readouterr().err
    assert readme.read_text() == before and sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["README.md"]


def test_fidelity_experiment_rules_follow_the_numbers(tmp_path):
    """Experiment (b)'s contraction and Table 1 rows and experiment (d)'s protocol verdict."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    form = {"update": "leaky", "init_state": "zeros", "jvp_norm": 0.8, "bound_holds": 0.7, "cos t=3": 0.9,
            "basic_ssm cos t=3": 0.7, "table1_reproduced": True}
    forms = {"leaky, h0 = zeros": form,
             "gated, h0 = embedding": {**form, "update": "gated", "init_state": "embedding", "jvp_norm": 1.5,
                                       "table1_reproduced": False}}
    (folder / "15_update_forms.json").write_text(json.dumps({"dataset": "digits", "forms": forms}))
    protocols = {"a": {"0": True, "1": False}, "b": {"0": False, "1": False}}
    (folder / "15_minkowski_protocols.json").write_text(
        json.dumps({"dataset": "fashion-mnist", "frost_above_vanilla_and_basic_ssm": protocols}))
    rows = {(r["claim"].split(":")[0], r["reading"]): r for r in verdict_rows(folder)}
    assert rows[("Appendix B", "leaky, h0 = 0")]["verdict"] == REPRODUCED
    assert rows[("Appendix B", "gated")]["verdict"] == PARTLY  # the bound holds, the Jacobian does not
    assert rows[("Table 1", "leaky, h0 = 0")]["verdict"] == REPRODUCED
    assert rows[("Table 1", "gated")]["verdict"] == NOT
    assert rows[("Minkowski dimension", "canonical")]["verdict"] == "protocol-dependent"
    protocols["b"] = {"0": True, "1": True}
    (folder / "15_minkowski_protocols.json").write_text(
        json.dumps({"dataset": "fashion-mnist", "frost_above_vanilla_and_basic_ssm": protocols}))
    assert any(r["verdict"] == REPRODUCED for r in verdict_rows(folder) if r["claim"].startswith("Minkowski"))


def test_head_refit_loss_strength_and_regime_rows_follow_the_numbers(tmp_path):
    """Experiment (a)'s row from its margin, (c)'s three claims from the rule's outcome, the Fashion
    check of (b) beside digits, and the Table 3 regime rows from the best batch size."""
    folder = tmp_path / "metrics"
    folder.mkdir()

    def write(name, d):
        (folder / f"{name}.json").write_text(json.dumps(d))

    def by_claim(start):
        return [r for r in verdict_rows(folder) if r["claim"].startswith(start)]

    write("15_head_refit", {"dataset": "fashion-mnist",
                            "margin_per_backbone": {"frost seed 0": -0.03, "frost seed 1": -0.01,
                                                    "frost (adopted defaults) seed 0": 0.02},
                            "gain_per_backbone": {"frost seed 0": 0.0, "frost seed 1": 0.0,
                                                  "frost (adopted defaults) seed 0": 0.0}})
    rows = {r["reading"]: r for r in by_claim("Halting: a learned score")}
    assert rows["canonical"]["verdict"] == NOT and "-0.020 area over 2 backbone(s)" in rows["canonical"]["ours"]
    assert rows["gated"]["verdict"] == REPRODUCED

    arm = {"seeds": 3, "collapsed_seeds": 0, "step_cosine": 0.1, "lambda_rel": 1.0, "lambda_abs": 0.1}
    arms = {"frost, rel 1 abs 0.1": {**arm, "model": "frost"},
            "frost, abs 3 only": {**arm, "model": "frost", "lambda_rel": 0.0, "lambda_abs": 3.0, "collapsed_seeds": 2},
            "recurrent, rel 1 abs 0.1": {**arm, "model": "recurrent", "collapsed_seeds": 2}}
    write("15_loss_strength", {"dataset": "digits", "arms": arms, "collapse_claim_holds_at": ["rel 1 abs 0.1"],
                               "conflict_claim_holds_at": [], "l_abs_alone_collapses_frost_at": [3.0]})
    assert by_claim("Appendix D: the ranking losses collapse")[0]["verdict"] == REPRODUCED
    assert "recurrent, 1/0.1: 2 of 3" in by_claim("Appendix D: the ranking losses collapse")[0]["ours"]
    assert by_claim("Loss ablation: L_abs alone collapses frost")[0]["verdict"] == REPRODUCED
    assert by_claim("Appendix D: per-step gradient conflict")[0]["verdict"] == NOT

    form = {"update": "leaky", "init_state": "embedding", "jvp_norm": 3.0, "bound_holds": 1.0, "cos t=3": 0.8,
            "basic_ssm cos t=3": 0.8, "table1_reproduced": False}
    write("15_update_forms", {"dataset": "digits", "forms": {"leaky, h0 = embedding": form}})
    write("15_update_forms_fashion-mnist", {"dataset": "fashion-mnist", "label": "fashion-mnist (5 epochs, seeds 0)",
                                            "forms": {"leaky, h0 = embedding": form}})
    assert sorted(r["dataset"] for r in by_claim("Table 1: frost more")) == ["digits", "fashion-mnist (5 epochs, seeds 0)"]

    def ratio(batch, model, ours, paper):
        return {"batch_size": batch, "backbone": "vit", "model": model, "ours": ours, "paper": paper,
                "relative_error": ours / paper - 1}

    write("bench_table3_regime", {"env": {"device": "cpu"}, "ratios": [
        ratio(1, "frost", 1.9, 1.97), ratio(1, "basic_ssm", 0.7, 0.74),
        ratio(4, "frost", 1.0, 1.97), ratio(4, "basic_ssm", 0.2, 0.74)]})
    (row,) = by_claim("Table 3 (ViT): images/s / vanilla by regime")
    assert row["verdict"] == REPRODUCED and "best fit: batch 1" in row["ours"]


def _halting_metrics(dataset, vit_depth, resnet_depth, vit_steps=12, resnet_steps=16):
    """A minimal notebook-05 metrics file: one seed's two-point sweep, and the ViT section."""
    sweep = [{"backbone": b, "quantile": 0.5, "mean_depth": d, "std_depth": 1.0, "fraction": d / t, "accuracy": 0.5}
             for b, d, t in (("resnet", resnet_depth, resnet_steps), ("vit", vit_depth, vit_steps))]
    own = [{"seed": 0, "quantile": q, "threshold": 0.5, "mean_depth": d, "accuracy": a}
           for q, d, a in ((0.5, resnet_depth, 0.5), (1.0, resnet_steps, 0.6))]
    return {"dataset": dataset, "size": "demo", "key": None, "sweep": own,
            "vit": {"key": None, "dataset": dataset, "steps": vit_steps, "epochs": 10, "accuracy": 0.5,
                    "sweep": sweep}}


def test_vit_depth_rule_follows_the_numbers(tmp_path):
    """Table 3's ViT depth: within a step of 4.53 of 12, and earlier than ResNet as a share of T."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    for vit, resnet, verdict in ((4.6, 8.0, REPRODUCED),  # 0.38 of T against 0.50
                                 (5.53, 8.0, REPRODUCED), (5.54, 8.0, PARTLY),  # 1 step from 4.53: the edge
                                 (4.6, 4.0, PARTLY),  # close, but later than the ResNet's 0.25
                                 (8.0, 14.0, PARTLY),  # earlier than ResNet, but far from 4.53
                                 (9.0, 4.0, NOT)):
        (folder / "05_halting.json").write_text(json.dumps(_halting_metrics("cifar100", vit, resnet)))
        assert _verdict(folder, "Table 3: ViT frost's mean exit depth") == verdict
    other = _halting_metrics("cifar100", 4.6, 8.0)
    other["vit"]["dataset"] = "cifar10"  # the ViT on another test split: (b) would compare unlike splits
    (folder / "05_halting.json").write_text(json.dumps(other))
    assert not [r for r in verdict_rows(folder) if r["claim"].startswith("Table 3: ViT")]


def test_rows_on_the_papers_data_sets_come_first_within_a_claim(tmp_path):
    folder = tmp_path / "metrics"
    folder.mkdir()
    # file names sort the Fashion-MNIST file first; the CIFAR-100 row still leads
    (folder / "05_halting.json").write_text(json.dumps(_halting_metrics("fashion-mnist", 4.6, 8.0)))
    (folder / "05_halting_x.json").write_text(json.dumps(_halting_metrics("cifar100", 4.6, 8.0)))
    rows = [r for r in verdict_rows(folder) if r["claim"].startswith("Table 3: ViT")]
    assert [r["dataset"] for r in rows] == ["cifar100", "fashion-mnist"]


def test_metrics_find_a_run_by_path_folder_or_name():
    """A metrics file names its run by checkpoint path, run folder or run name; the first that
    leads to a run counts, and nothing outside the runs' folders is read as a run."""
    from frost_nb.verdicts import Metrics

    m = Metrics()
    name = "digits-demo-families/frost-seed0"
    by_name = m.checkpoint(name)
    assert by_name["config"].data.name == "digits" and by_name["config"].train.seed == 0
    assert m.checkpoint(f"outputs/runs/{name}/model.pt")["config"] == by_name["config"]
    assert m.checkpoint(f"outputs/runs/{name}")["config"] == by_name["config"]
    assert m.checkpoint(None, "no/such-run", name)["config"] == by_name["config"]
    assert m.checkpoint("../../etc", "/abs/x", "a/b/c", "") is None
