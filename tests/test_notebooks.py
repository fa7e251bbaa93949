"""Notebooks as functional tests: papermill smoke runs whose metrics JSON are asserted."""

import json
from pathlib import Path

import pytest

from frost_nb.paths import repo_root

papermill = pytest.importorskip("papermill")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
pytestmark = pytest.mark.notebooks


def _run(name, tmp_path, monkeypatch, **parameters):
    monkeypatch.setenv("FROST_SMOKE", "1")
    out = tmp_path / name
    papermill.execute_notebook(str(NOTEBOOKS / name), str(out), parameters=parameters,
                               kernel_name="python3", progress_bar=False, cwd=str(tmp_path))
    return out


def test_setup_notebook_runs(tmp_path, monkeypatch):
    _run("00_setup.ipynb", tmp_path, monkeypatch)


def test_training_notebook_writes_its_metrics(tmp_path, monkeypatch, isolated_outputs):
    _run("01_training.ipynb", tmp_path, monkeypatch, dataset="cifar10", epochs=50)
    metrics = json.loads((isolated_outputs / "outputs" / "metrics" / "01_training.json").read_text())
    assert set(metrics) >= {"dataset", "model", "backbone", "size", "epochs", "seed", "params",
                            "accuracy", "train_seconds", "env"}
    # FROST_SMOKE forces smoke size whatever the parameters say
    assert (metrics["size"], metrics["dataset"], metrics["epochs"]) == ("smoke", "digits", 10)
    assert metrics["accuracy"] > 0.5  # 10 classes: chance is 0.1
    assert set(metrics["env"]) >= {"torch", "device", "commit"}
    figures = {p.name for p in (isolated_outputs / "outputs" / "figures").iterdir()}
    assert {"01_training_curves.png", "01_alpha.png", "01_halting_scores.png",
            "01_sweep.png"} <= figures
    # the halting sweep: depth rises with q and q = 1 (threshold +inf, written null) is full depth
    sweep = metrics["sweep"]
    depths = [row["mean_depth"] for row in sweep]
    assert depths == sorted(depths) and depths[0] < depths[-1]
    assert sweep[-1]["quantile"] == 1.0 and sweep[-1]["threshold"] is None
    assert sweep[-1]["mean_depth"] == 4 and sweep[-1]["std_depth"] == 0  # smoke: T = 4


def test_bad_parameter_stops_the_notebook(tmp_path, monkeypatch):
    with pytest.raises(papermill.PapermillExecutionError, match="epochs"):
        _run("01_training.ipynb", tmp_path, monkeypatch, epochs=-3)
    with pytest.raises(papermill.PapermillExecutionError, match="dataset"):
        _run("01_training.ipynb", tmp_path, monkeypatch, dataset="mnist-3d")


def test_halting_notebook_at_a_quantile(tmp_path, monkeypatch, isolated_outputs):
    # a ViT frost checkpoint enables the ViT section (smoke mode checks the file, then trains the smoke ViT)
    from frost_nb.checkpoint import save_checkpoint
    from frost_nb.models import create_model
    from frost_nb.repro.grids import grid

    vit = grid("vit", "smoke", None)["frost"]
    vit_file = save_checkpoint(tmp_path / "vit.pt", {"config": vit.to_dict(),
                                                      "model": create_model(vit.model).state_dict()})
    _run("05_halting.ipynb", tmp_path, monkeypatch, quantile=0.25, vit_checkpoint=str(vit_file),
         compare_bundle="per-step")
    out = isolated_outputs / "outputs"
    # smoke runs on digits: beside the committed CIFAR-100 outputs, with the data set and size in the name
    metrics = json.loads((out / "metrics" / "05_halting_digits_smoke.json").read_text())
    assert metrics["quantile"] == 0.25 and 0 <= metrics["accuracy"] <= 1
    assert 1 <= metrics["mean_depth"] <= metrics["steps"] and sum(metrics["histogram"]) == metrics["test_images"]
    sweep = metrics["sweep"]
    assert {r["seed"] for r in sweep} == {0, 1}  # smoke: two seeds
    assert {"quantile", "threshold", "mean_depth", "accuracy", "seed"} <= set(sweep[0])
    # the confidence rule beside each seed's sweep, and the ViT frost's exit depths beside the ResNet's
    assert set(metrics["confidence"]) == {"seed 0", "seed 1"}
    assert {"threshold", "mean_depth", "accuracy"} <= set(metrics["confidence"]["seed 0"][0])
    assert {"confidence_accuracy", "confidence_kept", "kept"} <= set(metrics["at_paper_depths"][0])
    vit = metrics["vit"]
    assert (vit["steps"], vit["dataset"]) == (12, "digits")
    assert {(r["backbone"], r["quantile"]) for r in vit["sweep"]} >= {("resnet", 0.5), ("vit", 0.5)}
    assert all(0 < r["fraction"] <= 1 for r in vit["sweep"])
    # the ResNet beside it is of the ViT's bundle (the vit grid's: per-step), not the adopted one above
    runs = metrics["provenance"]["settings"]
    assert runs[vit["key"]]["bundle"] == runs[vit["resnet_key"]]["bundle"] == "per-step" != metrics["bundle"]
    # the same seeds under the per-step bundle beside these (adopted) runs, one row per bundle and q
    side = metrics["readings_side_by_side"]
    assert metrics["compare_bundle"] == "per-step" and {r["group"] for r in side} == {"adopted", "per-step"}
    assert all(r["runs"] == 2 for r in side) and {"std_depth", "kept", "gain", "gain_over_confidence"} <= set(side[0])
    assert [r for r in side if r["quantile"] == 1.0 and abs(r["kept"] - 1.0) > 1e-6] == []  # q = 1: full depth
    figures = {p.name for p in (out / "figures").iterdir()}
    assert {f"05_{f}_digits_smoke.png" for f in ("exit_histogram", "depth_per_class", "exit_examples", "depth_accuracy",
                                            "vit_exit_histogram", "readings")} <= figures
    with pytest.raises(papermill.PapermillExecutionError, match="compare_bundle='adopted' is the model's own bundle"):
        _run("05_halting.ipynb", tmp_path, monkeypatch, vit_checkpoint=None, compare_bundle="adopted")


def test_ablation_notebook_runs_the_chosen_sections_only(tmp_path, monkeypatch, isolated_outputs):
    """04 with sections="alpha,loss" (how it runs on CIFAR-100): those sections' figures and
    metrics only, named with the data set when it is not the committed one."""
    _run("04_alpha_H_ablation.ipynb", tmp_path, monkeypatch, sections="alpha,loss", bundle="adopted")
    out = isolated_outputs / "outputs"
    metrics = json.loads((out / "metrics" / "04_alpha_H_ablation_digits_smoke_alpha-loss.json").read_text())
    assert metrics["sections"] == ["alpha", "loss"] and metrics["dataset"] == "digits"
    assert {"alpha_trajectory", "loss_ablation"} <= set(metrics)
    assert not {"hurst_sweep", "loss_tuning", "update_forms", "gradient_conflict", "adopted_defaults"} & set(metrics)
    assert {r["run"] for r in metrics["loss_ablation"]} == {"both", "abs only", "rel only", "neither",
                                                             "rel 10 abs 3", "abs 3 only"}
    figures = {p.name for p in (out / "figures").iterdir()}
    assert figures == {f"04_{f}_digits_smoke.png" for f in ("alpha_trajectory", "loss_ablation_scores",
                                                       "loss_ablation_sweeps")}
    with pytest.raises(papermill.PapermillExecutionError, match="sections"):
        _run("04_alpha_H_ablation.ipynb", tmp_path, monkeypatch, sections="alpha,hurts")


def test_halting_notebook_refuses_bad_input(tmp_path, monkeypatch):
    with pytest.raises(papermill.PapermillExecutionError, match="quantile"):
        _run("05_halting.ipynb", tmp_path, monkeypatch, quantile=1.5)
    with pytest.raises(papermill.PapermillExecutionError, match="does not exist"):
        _run("05_halting.ipynb", tmp_path, monkeypatch, checkpoint=str(tmp_path / "missing.pt"))


def test_halting_notebook_refuses_a_bad_examples_count(tmp_path, monkeypatch, isolated_outputs):
    """Unchecked, examples=-3 drew a 50,902 px wide figure and the run exited 0. Every other
    parameter's check is tested without a kernel (test_notebook_params.py)."""
    with pytest.raises(papermill.PapermillExecutionError,
                       match=r"parameter examples=-3 is invalid: expected a number of images from 1 to 64"):
        _run("05_halting.ipynb", tmp_path, monkeypatch, examples=-3)
    assert not (isolated_outputs / "outputs" / "figures").exists()  # stopped before any work


def test_complexity_notebook_writes_its_table(tmp_path, monkeypatch, isolated_outputs):
    _run("06_complexity.ipynb", tmp_path, monkeypatch, repeats=1)
    metrics = json.loads((isolated_outputs / "outputs" / "metrics" / "06_complexity.json").read_text())
    rows = metrics["rows"]
    assert {(r["backbone"], r["model"]) for r in rows} == {(b, m) for b in ("resnet", "vit")
                                                           for m in ("vanilla", "recurrent", "basic_ssm", "frost")}
    assert {"backbone", "model", "params_m", "gflops", "mean_depth", "images_per_s", "device"} <= set(rows[0])
    frost = [r for r in rows if r["model"] == "frost" and r["backbone"] == "resnet"]
    assert len(frost) == 3  # the paper's mean depth, our demo's, full depth
    by_depth = sorted(frost, key=lambda r: r["mean_depth"])  # fewer steps: fewer FLOPs, more images/s
    assert [r["gflops"] for r in by_depth] == sorted(r["gflops"] for r in frost)
    assert by_depth[0]["images_per_s"] > by_depth[-1]["images_per_s"]


def test_block_recurrent_notebook_reads_its_students_against_k(tmp_path, monkeypatch, isolated_outputs):
    """Notebook 10 at smoke size trains its tiny teachers (vanilla, 2 seeds), students and from-scratch
    controls, then writes the read-out the verdict row reads: per student its teacher's accuracy and
    the share recovered, the gain over the same architecture from scratch, the state cosine per step."""
    from frost_nb.repro import claims as C
    from frost_nb.repro import verdicts as V

    _run("10_block_recurrent.ipynb", tmp_path, monkeypatch, seeds=3, samples=500)  # capped: 2 seeds, 64 images
    out = isolated_outputs / "outputs"
    metrics = json.loads((out / "metrics" / "10_block_recurrent_digits_smoke.json").read_text())
    assert (metrics["dataset"], metrics["size"], metrics["seeds"], metrics["samples"]) == ("digits", "smoke", 2, 64)
    assert (metrics["claim_k"], metrics["margin"]) == (2, C.RECOVERED_MARGIN)
    students = metrics["students"]
    assert [(r["k"], r["seed"]) for r in students] == [(1, 0), (2, 0), (2, 1), (4, 0)]
    steps = 4  # smoke: T = 4
    for r in students:
        assert r["key"] == f"digits-smoke-block-recurrent/student-k-{r['k']}-seed{r['seed']}"
        assert r["teacher"] == f"digits-smoke-families/vanilla-seed{r['seed']}"
        assert r["recovered"] == pytest.approx(r["accuracy"] / r["teacher_accuracy"])
        assert sum(int(n) for n in r["branch_steps"].split(",")) == steps and len(r["branch_steps"].split(",")) == r["k"]
        assert len(r["state_cosine"]) == steps and all(-1 <= c <= 1 for c in r["state_cosine"])
    two = [r for r in students if r["k"] == 2]
    for r in two:  # the k = 2 controls: scratch k=2 at seed 0, the same ranges
        assert r["gain"] == pytest.approx(r["accuracy"] - r["scratch_accuracy"]) and r["scratch_steps"] == r["branch_steps"]
    scores = {r["seed"]: r for r in metrics["ranges"] if r["k"] == 2}
    assert metrics["verdict"] == str(C.block_recurrent([r["recovered"] for r in two],
                                                       [scores[r["seed"]]["score"] for r in two],
                                                       [scores[r["seed"]]["equal_score"] for r in two]))
    for r in two:
        assert r["gap_closed"] == pytest.approx(r["gain"] / (r["teacher_accuracy"] - r["scratch_accuracy"]))
    # fewer than 3 seeds: suggested or not (or not testable without phases), never decided
    assert not metrics["verdict"].startswith((C.REPRODUCED, C.NOT, C.INCONCLUSIVE))
    per_k = {r["k"]: r for r in metrics["against_k"]}
    assert sorted(per_k) == [1, 2, 4] and per_k[2]["students"] == 2
    assert per_k[2]["recovered"] == pytest.approx(sum(r["recovered"] for r in two) / 2)
    for r in metrics["ranges"]:
        assert r["score"] >= r["equal_score"] - 1e-9  # the chosen split is the optimum of J
    similarity = metrics["similarity"]
    assert len(similarity) == steps and all(abs(similarity[i][i] - 1) < 1e-4 for i in range(steps))
    prov = metrics["provenance"]["settings"]
    assert all(r["key"] in prov for r in students)
    (row,) = [r for r in V.verdict_rows(out / "metrics") if r["claim"] == 19]  # the verdict row reads it
    assert row["seeds"] == "2" and row["verdict"] == metrics["verdict"] and row["notebook"] == "10"
    figures = {p.name for p in (out / "figures").iterdir()}
    assert {"10_block_ranges_digits_smoke.png", "10_against_k_digits_smoke.png", "10_teacher_state_digits_smoke.png",
            "10_teacher_kl_digits_smoke.png"} <= figures  # the students' match over training, too


def test_df_mamba_notebook_reads_its_runs_into_tables_and_verdicts(tmp_path, monkeypatch, isolated_outputs):
    """Notebook 11 at smoke size trains its tiny runs on a generated series (look-back 16), then writes the
    runs with their zero-shot errors, the structure and the gate, Tables 1, 2 and 14 and claim 20's windows'
    bootstrap; the verdict rows read from those metrics are claims 20-22 as their rules decide them on those
    runs; a seed with no stored run stops it, naming the parameter."""
    import pandas as pd

    from frost_nb.analysis.stats import block_bootstrap
    from frost_nb.dfmamba.report import ZERO_SHOT_LABELS
    from frost_nb.dfmamba.training import evaluate, load_run
    from frost_nb.paper import DFMAMBA_TABLE2_ETTM2
    from frost_nb.repro import claims as C
    from frost_nb.repro import verdicts as V

    _run("11_df_mamba.ipynb", tmp_path, monkeypatch, windows=3)
    out = isolated_outputs / "outputs"
    metrics = json.loads((out / "metrics" / "11_df_mamba_smoke.json").read_text())
    assert (metrics["lookback"], metrics["seed"], metrics["windows"]) == (16, 0, 3)
    assert len(metrics["forecast_windows"]) == 3
    runs = pd.DataFrame(metrics["runs"])
    assert runs.groupby(["label", "horizon"]).size().to_dict() == {
        ("dfmamba", 96): 2, ("dlinear", 96): 2, ("rlinear", 96): 2, ("dfmamba", 192): 1, ("dlinear", 192): 1,
        ("rlinear", 192): 1, ("S2", 96): 1, ("S3", 96): 1, ("T3", 96): 1}
    for r in runs.itertuples():  # x1 is the run's own test windows; r = MSE(x4) / MSE(x1)
        if r.label in ZERO_SHOT_LABELS and r.horizon == 96:
            assert r.zs_scales == [1, 2, 4] and r.zs_mse[0] == pytest.approx(r.test_mse, rel=1e-9)
            assert r.ratio == pytest.approx(r.zs_mse[2] / r.zs_mse[0])
        else:
            assert r.zs_scales is None and pd.isna(r.ratio)
    structure = metrics["structure"]
    assert [r["stage"] for r in structure] == ["input", "tokens", "level 0", "level 1", "level 2", "forecast"]
    assert (structure[0]["shape"], structure[-1]["shape"]) == ([3, 16, 7], [3, 96, 7])
    assert set(metrics["gates"]) == {"level 0", "level 1"}
    assert all(0 < g < 1 for level in metrics["gates"].values() for g in level.values())
    seeds = lambda label, h=96, key="test_mse": \
        runs[(runs.label == label) & (runs.horizon == h)].sort_values("seed")[key].tolist()
    t1 = {(r["model"], r["horizon"]): r for r in metrics["table1"]}
    assert len(t1) == 12 and t1[("dfmamba", 96)]["seeds"] == 2
    assert t1[("dfmamba", 96)]["mse"] == pytest.approx(sum(seeds("dfmamba")) / 2)
    ablations = {r["variant"]: r for r in metrics["ablations"]}
    assert list(ablations) == list(DFMAMBA_TABLE2_ETTM2)
    assert ablations["T2"]["mse"] is None  # not trained at smoke size
    assert ablations["S3"]["change"] == pytest.approx(seeds("S3")[0] - sum(seeds("dfmamba")) / 2)
    # claim 20's interval at H = 192 (one DF-Mamba seed): its test windows evaluated again, block-bootstrapped
    one = load_run(isolated_outputs / "cache" / "forecast" / seeds("dfmamba", 192, "run")[0])
    per_window = evaluate(one.model, one.config.windows("test"), per_window=True)["per_window"]
    (boot,), name = metrics["bootstrap"], seeds("dfmamba", 192, "run")[0]
    assert (boot["run"], boot["horizon"], boot["windows"]) == (name, 192, len(per_window))
    assert (boot["mean"], boot["half"]) == pytest.approx(block_bootstrap(per_window))
    # the verdict rows generated from these metrics (repro.verdicts), each by its rule on the runs above; the
    # notebook itself shows the committed rows, so nothing of the smoke run's is read back there
    rows = V.verdict_rows(out / "metrics")
    assert [r["claim"] for r in rows].count(20) == 6 and len(rows) == 10  # no runs at 336 and 720: no rows
    assert {(r["size"], r["notebook"]) for r in rows} == {("look-back 16", "11")}
    got = lambda claim, title, paper: next(r["verdict"] for r in rows if r["claim"] == claim and r["paper"].startswith(
        paper) and r["title"] == (title or C.CLAIM[claim].title))
    assert got(20, "", "H = 192") == str(C.forecast_against_paper(seeds("dfmamba", 192), 0.287,
                                                                  block_bootstrap(per_window)))
    assert got(20, "DF-Mamba Table 1: below our RLinear (ETTh2)", "H = 96") == \
        str(C.forecast_against_baseline(seeds("dfmamba"), seeds("rlinear")))
    assert got(21, "", "S3") == str(C.ablation(seeds("S3"), seeds("dfmamba")))
    assert got(22, "", "r") == str(C.zero_shot(
        seeds("dfmamba", key="ratio"), {b: seeds(b, key="ratio") for b in ("dlinear", "rlinear")}))
    assert got(22, V.S2_TITLE, "no claim") == str(C.zero_shot(seeds("dfmamba", key="ratio"),
                                                              {"S2": seeds("S2", key="ratio")}))
    figures = {p.name for p in (out / "figures").iterdir()}
    assert figures == {f"11_{f}_smoke.png" for f in ("forecasts", "gate", "ablations", "zero_shot")}
    refused = r"parameter seed=5 is invalid: .*stored: \[0, 1\]"
    with pytest.raises(papermill.PapermillExecutionError, match=refused):
        _run("11_df_mamba.ipynb", tmp_path, monkeypatch, seed=5)  # the runs above loaded, not trained again


def test_strip_execution_metadata(tmp_path):
    from frost_nb.notebook.glue import strip_execution_metadata

    cell = {"cell_type": "code", "source": "1", "outputs": [], "execution_count": 1,
            "metadata": {"tags": ["parameters"], "execution": {"iopub.execute_input": "t"},
                         "papermill": {"duration": 1.0}}}
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [cell], "metadata": {"papermill": {}}, "nbformat": 4,
                                "nbformat_minor": 5}))
    assert strip_execution_metadata(path)
    nb = json.loads(path.read_text())
    assert nb["cells"][0]["metadata"] == {"tags": ["parameters"]} and "papermill" not in nb["metadata"]
    assert not strip_execution_metadata(path)  # nothing left to strip


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9]*.ipynb")), ids=lambda p: p.name)
def test_committed_notebooks_are_executed_and_clean(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"]["kernelspec"]["name"] == "python3" and "papermill" not in nb["metadata"]
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] for c in code), "commit the notebook executed (make notebooks)"
    assert not any({"execution", "papermill"} & set(c["metadata"]) for c in code)
    text = json.dumps([c.get("outputs", []) for c in code])
    assert "size smoke" not in text  # committed at demo size, not smoke output
    assert str(repo_root()) not in text and "PosixPath(" not in text  # no path of the machine it ran on


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9]*.ipynb")), ids=lambda p: p.name)
def test_committed_notebooks_show_every_figure_they_save(path):
    """A reader of the committed notebook (JupyterLab, a code host) sees each saved figure inline:
    every cell holds at least as many PNG outputs as it has save_figure calls. A cell that opens
    with ``if <parameter> is not None:`` (or ``if params.<parameter> ...``) where the committed
    parameter is None (a section switched off, such as 05's comparison of bundles) saves nothing
    and is left out."""
    import ast

    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code"]
    params = {s.target.id: ast.literal_eval(s.value) for c in cells if "parameters" in c["metadata"].get("tags", [])
              for s in ast.parse("".join(c["source"])).body}
    off = {f"if {prefix}{name} is not None:" for name, value in params.items() if value is None
           for prefix in ("", "params.")}
    for i, cell in enumerate(cells):
        source = "".join(cell["source"])
        if source.splitlines() and source.splitlines()[0].split("#")[0].strip() in off:
            continue
        saved = sum(line.count("save_figure(") for line in source.splitlines() if "import" not in line)
        shown = sum("image/png" in out.get("data", {}) for out in cell.get("outputs", []))
        assert shown >= saved, f"code cell {i} saves {saved} figure(s) but shows {shown}"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("[0-9]*.ipynb")), ids=lambda p: p.name)
def test_committed_parameters_are_the_run_parameters(path):
    """No committed notebook carries papermill's injected cell: its parameters cell itself holds
    the values its committed run used, so opening it in JupyterLab repeats that run."""
    nb = json.loads(path.read_text())
    tags = [t for c in nb["cells"] for t in c.get("metadata", {}).get("tags", [])]
    assert "injected-parameters" not in tags and tags.count("parameters") == 1


def test_metrics_are_strict_json(isolated_outputs):
    import numpy as np
    import torch

    from frost_nb.notebook.glue import write_metrics

    path = write_metrics("t", {"sweep": [{"q": 1.0, "threshold": float("inf")}],
                               "nan": float("nan"), "np": np.float32(0.5), "t": torch.tensor(2.0)})
    record = json.loads(path.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON {c}"))
    assert record["sweep"][0]["threshold"] is None and record["nan"] is None
    assert record["np"] == 0.5 and record["t"] == 2.0 and "torch" in record["env"]


def test_halting_baselines_notebook(tmp_path, monkeypatch, isolated_outputs):
    import numpy as np
    import pandas as pd

    _run("07_halting_baselines.ipynb", tmp_path, monkeypatch, bundle="adopted")  # the committed default
    out = isolated_outputs / "outputs"
    metrics = json.loads((out / "metrics" / "07_halting_baselines_digits_smoke.json").read_text())
    assert {"curves", "summary", "collapse", "env"} <= set(metrics)
    assert (metrics["size"], metrics["dataset"], metrics["collapse_dataset"]) == ("smoke", "digits", "digits")
    steps = metrics["steps"]
    from frost_nb.analysis.curves import from_columns

    assert {"rule", "model", "threshold", "mean_depth", "accuracy", "random_accuracy"} <= set(metrics["curves"])
    curves = from_columns(metrics["curves"]).to_dict("records")  # stored by column (by_column)
    # FROST's seeds (two in smoke mode) and the other families' seed 0 at `size`; PonderNet's twin at
    # `twin_size`, beside frost of that size: FROST's seed 0 itself here (both smoke), not a second panel
    models = {"frost seed 0", "frost seed 1", "basic_ssm seed 0", "vanilla seed 0", "ponder (smoke)"}
    assert {r["model"] for r in curves} == models
    from frost_nb.analysis.halting_rules import SIGNAL_RULES

    signal_rules = set(SIGNAL_RULES)  # both second-order rules among them
    for model in models:
        rows = [r for r in curves if r["model"] == model]
        by_rule = {rule: [r for r in rows if r["rule"] == rule] for rule in {r["rule"] for r in rows}}
        learned = {"frost": {"frost"}, "ponder": {"ponder"}}.get(model.split(" ")[0], set())
        assert set(by_rule) == signal_rules | learned | {"settled probe", "fixed depth", "oracle", "hindsight exit"}, model
        fixed = by_rule["fixed depth"]
        assert [r["mean_depth"] for r in fixed] == list(range(1, steps + 1))
        full = fixed[-1]["accuracy"]
        # the oracle's bound (nondecreasing in depth) is above every point of every rule
        oracle = sorted((r["mean_depth"], r["accuracy"]) for r in by_rule["oracle"])
        assert oracle[0][0] == 1 and oracle[-1][0] == steps
        for rule, points in by_rule.items():
            assert all(1 <= r["mean_depth"] <= steps and 0 <= r["accuracy"] <= 1 for r in points)
            if rule in ("oracle", "hindsight exit"):  # the references: no rule of their own
                continue
            for r in points:
                above = next(a for d, a in oracle if d >= r["mean_depth"] - 1e-9)
                assert r["accuracy"] <= above + 1e-6, (model, rule, r)
            if rule != "fixed depth":  # a threshold that never fires: full depth, full-depth accuracy
                deepest = max(points, key=lambda r: r["mean_depth"])
                assert deepest["mean_depth"] == steps and deepest["accuracy"] == pytest.approx(full)
    frost = [r["mean_depth"] for r in curves if r["rule"] == "frost" and r["model"] == "frost seed 0"]
    assert frost == sorted(frost) and frost[-1] == steps  # rows in the order of q
    # claim 15 on each FROST seed: its gap to its best rival with the test images' interval, and the
    # half-width of the seeds' mean gap (the images drawn jointly)
    boot = metrics["rival_bootstrap"]
    assert set(boot) == {"frost seed 0", "frost seed 1"} and metrics["rival_image_half"] >= 0
    assert all(b["low"] <= b["gap"] <= b["high"] and b["draws"] >= 1000 for b in boot.values())
    summary = metrics["summary"]
    assert {(r["rule"], r["model"]) for r in summary} == {(r["rule"], r["model"]) for r in curves}
    assert all(0 <= r["auc"] <= 1 for r in summary)
    for r in summary:  # NaN (null) only when the curve never reaches 99% of full depth
        assert r["depth_at_99pct"] is None or 1 <= r["depth_at_99pct"] <= steps
    collapse = metrics["collapse"]
    assert sorted((r["model"], r["seed"]) for r in collapse) == sorted(
        (m, s) for m in ("vanilla", "recurrent", "basic_ssm") for s in (0, 1))  # smoke: two seeds
    for r in collapse:
        assert {"model", "seed", "collapsed", "accuracy", "gradient_cosine"} <= set(r)
        assert r["collapsed"] == (r["accuracy"] < 0.5 * r["reference_accuracy"] or r["one_step_share"] > 0.95)
        assert -1 <= r["gradient_cosine"] <= 1
    assert np.isfinite([r["reference_accuracy"] for r in collapse]).all()
    throughput = metrics["throughput"]  # every rule timed through adaptive_predict, on digits in smoke mode
    assert throughput["dataset"] == "digits"
    assert {r["rule"] for r in throughput["rows"]} == signal_rules | {"frost", "fixed depth"}
    assert all(r["images_per_s"] > 0 and 1 <= r["mean_depth"] <= steps for r in throughput["rows"])
    figures = {p.name for p in (out / "figures").iterdir()}
    assert {"07_rule_curves_digits_smoke.png", "07_collapse_smoke.png", "07_rule_throughput_digits_smoke.png"} <= figures


def test_halting_baselines_notebook_names_a_family_its_grid_lacks(tmp_path, monkeypatch, isolated_outputs):
    with pytest.raises(papermill.PapermillExecutionError, match="the grid has no vanila; it has"):
        _run("07_halting_baselines.ipynb", tmp_path, monkeypatch, models="basic_ssm,vanila")


def test_metrics_file_kept_when_results_are_the_same(isolated_outputs):
    """Writing the same results again (a re-run, a loaded run, another thread count) leaves the file
    as it was, environment included; a real change rewrites it."""
    from frost_nb.notebook.glue import write_metrics

    path = write_metrics("same", {"acc": 0.9, "rows": [{"q": 0.5, "depth": 8.123456789}]})
    path.write_text(path.read_text().replace('"commit"', '"commit_of_first_run"'))
    first = path.read_bytes()
    write_metrics("same", {"acc": 0.9, "rows": [{"q": 0.5, "depth": 8.123456789 * (1 + 1e-8)}]})
    assert path.read_bytes() == first
    write_metrics("same", {"acc": 0.91, "rows": [{"q": 0.5, "depth": 8.123456789}]})
    assert path.read_bytes() != first and json.loads(path.read_text())["acc"] == 0.91
    write_metrics("same", {"acc": 0.91, "rows": [{"q": 0.5, "depth": 8.123456789}], "new": 1})
    assert json.loads(path.read_text())["new"] == 1


def test_metrics_files_are_stored_lean(isolated_outputs):
    """One line per top-level key, no spaces; a file of the same results written indented (as before)
    keeps its record, environment included, and is stored again in that form."""
    from frost_nb.notebook.glue import metrics_text, write_metrics

    path = write_metrics("lean", {"acc": 0.9, "rows": [{"q": 0.5, "depth": 8.123456789}]})
    record = json.loads(path.read_text())
    assert path.read_text() == metrics_text(record) and path.read_text().startswith('{\n"acc":0.9,\n"rows":[{"q"')
    record["env"]["torch"] = "0.0 (an older run)"
    path.write_text(json.dumps(record, indent=2))
    write_metrics("lean", {"acc": 0.9, "rows": [{"q": 0.5, "depth": 8.123456789}]})
    assert path.read_text() == metrics_text(record)
