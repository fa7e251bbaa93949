"""The verdicts: every rule of frost_nb.repro.claims flips across its margin, the engine reads runs from
provenance only, and the README's and docs/results.md's tables are the generated ones."""

import json
import shutil

import pytest

from frost_nb.__main__ import main
from frost_nb.paths import repo_root
from frost_nb.repro import claims as C
from frost_nb.repro import verdicts as V

README = repo_root() / "README.md"
RESULTS = repo_root() / "docs" / "results.md"
R, N, P, I = C.REPRODUCED, C.NOT, C.PARTLY, C.INCONCLUSIVE


@pytest.fixture(scope="module")
def committed_rows():
    return V.verdict_rows()


def _copy(tmp_path, *names):
    folder = tmp_path / "metrics"
    folder.mkdir(exist_ok=True)
    for name in names:
        shutil.copy(V.default_metrics_dir() / name, folder / name)
    return folder


def _edit(folder, name, change):
    path = folder / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


# ---------------------------------------------------------------------------------------- the tables
def test_readme_and_results_hold_the_generated_tables(committed_rows):
    """The drift test: refresh with ``python -m frost_nb verdicts --write``."""
    assert V.current_block(README.read_text(), "summary") == V.markdown_summary(committed_rows), \
        "README.md's verdict table is stale: python -m frost_nb verdicts --write"
    assert V.current_block(RESULTS.read_text(), "full") == V.markdown_table(committed_rows), \
        "docs/results.md's verdict table is stale: python -m frost_nb verdicts --write"
    assert main(["verdicts", "--check"]) == 0


def test_readme_is_short_one_row_per_claim_with_seeds():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    lines = V.current_block(text, "summary").splitlines()
    header, rows = lines[0], lines[2:]
    assert "| seeds |" in header and len(rows) == len(C.CLAIMS) <= 15
    seeds_col = V.SUMMARY_HEADER.index("seeds") + 1
    for line in rows:
        cells = [c.strip() for c in line.split("|")]
        verdict = cells[V.SUMMARY_HEADER.index("verdict") + 1]
        if verdict.startswith(R) or verdict.startswith(N) or verdict.startswith(P):
            # a trained-model claim needs MIN_SEEDS seeds; rows without seeds are deterministic
            assert cells[seeds_col] == V.NA or int(cells[seeds_col]) >= C.MIN_SEEDS, line
    assert [int(line.split("|")[1].split(".")[0]) for line in rows] == [c.number for c in C.CLAIMS]


def test_no_row_cites_a_notebook_that_does_not_exist(committed_rows):
    for r in committed_rows:
        if r["notebook"].isdigit():
            assert V._notebook_names(r["notebook"]), r
        else:
            assert r["notebook"] in V.SOURCES.values(), r
    assert "notebooks/15" not in README.read_text()


def test_rows_are_complete_and_name_their_bundle(committed_rows):
    assert all(set(r) >= set(V.COLUMNS) for r in committed_rows)
    assert {r["bundle"] for r in committed_rows} <= set(V.BUNDLE_RANK)
    for r in committed_rows:  # fewer seeds than MIN_SEEDS never decide a trained-model claim
        if r["seeds"] != V.NA and int(r["seeds"]) < C.MIN_SEEDS:
            assert "suggested" in r["verdict"] or r["verdict"].startswith(C.NOT_TESTABLE), r


def test_readme_switches_to_cifar100_under_the_adopted_bundle(tmp_path):
    """Constructed: 05's CIFAR-100 sweep relabelled as a run of the adopted bundle; the README's
    Table 2 rows then show it, ahead of the 3-seed per-step Fashion-MNIST evidence."""
    folder = _copy(tmp_path, "05_halting_per-step.json")
    summary = {r["claim"]: r for r in V.summary_rows(V.verdict_rows(folder))}
    assert V._dataset_cell(summary[9]) == "CIFAR-100, per-step"

    def adopted(d):
        for s in d["provenance"]["settings"].values():
            s["bundle"] = "adopted"
    _edit(folder, "05_halting_per-step.json", adopted)
    summary = {r["claim"]: r for r in V.summary_rows(V.verdict_rows(folder))}
    assert V._dataset_cell(summary[9]) == "CIFAR-100, adopted" and summary[9]["seeds"] == "3"
    assert V._dataset_cell(summary[13]) == "CIFAR-100, adopted"


def test_cli_check_and_write(tmp_path, capsys):
    folder = _copy(tmp_path, "06_complexity.json")
    readme, results = tmp_path / "README.md", tmp_path / "results.md"
    (s1, e1), (s2, e2) = V.MARKERS["summary"], V.MARKERS["full"]
    readme.write_text(f"# x\n\n{s1}\n| stale |\n{e1}\n\nafter\n")
    results.write_text(f"# y\n{s2}\n| stale |\n{e2}\n")
    args = ["verdicts", "--metrics-dir", str(folder)]
    for f in (readme, results):
        assert main(args + ["--check", str(f)]) == 1
        assert "stale" in capsys.readouterr().err
        assert main(args + ["--write", str(f)]) == 0 and main(args + ["--check", str(f)]) == 0
    assert readme.read_text().endswith("\n\nafter\n")
    assert V.current_block(results.read_text(), "full").count("\n") > 2
    assert main(args) == 0
    assert capsys.readouterr().out.strip() == V.current_block(readme.read_text())
    (tmp_path / "plain.md").write_text("no block here\n")
    assert main(args + ["--check", str(tmp_path / "plain.md")]) == 2


def test_replace_block_keeps_the_rest():
    start, end = V.MARKERS["summary"]
    text = f"intro\n{start}\nold\n{end}\nrest\n"
    assert V.replace_block(text, "| a |") == f"intro\n{start}\n| a |\n{end}\nrest\n"
    with pytest.raises(ValueError):
        V.replace_block("no markers", "| a |")


def test_missing_and_unreadable_files(tmp_path):
    assert V.verdict_rows(tmp_path / "no such folder") == []
    folder = _copy(tmp_path, "06_complexity.json")
    _edit(folder, "06_complexity.json", lambda d: d.pop("ratios"))
    with pytest.warns(UserWarning, match="table3"):
        assert V.verdict_rows(folder) == []


# ---------------------------------------------------------------------------------------- provenance
def test_every_metrics_file_names_its_runs():
    for path in sorted(V.default_metrics_dir().glob("*.json")):
        prov = json.loads(path.read_text())["provenance"]
        assert prov["commit"] and isinstance(prov["runs"], list), path.name
        assert set(prov["settings"]) == set(prov["runs"]), path.name
        for s in prov["settings"].values():
            assert s["bundle"] in ("adopted", "per-step", "residual"), path.name
    for csv in V.default_metrics_dir().glob("*.csv"):
        assert (csv.with_suffix(".provenance.json")).is_file(), csv.name


def test_nothing_matches_runs_by_accuracy():
    assert not hasattr(V.Metrics, "match") and not hasattr(V, "_grid_names")
    assert not hasattr(V.Metrics, "config_of") and not hasattr(V.Metrics, "checkpoint")


def test_numbers_without_provenance_decide_nothing(tmp_path):
    folder = _copy(tmp_path, "02_scale_consistency_fashion-mnist.json")
    assert [r for r in V.verdict_rows(folder) if r["claim"] == 1]
    _edit(folder, "02_scale_consistency_fashion-mnist.json", lambda d: d.pop("provenance"))
    assert not [r for r in V.verdict_rows(folder) if r["claim"] == 1]


def test_write_metrics_records_provenance(tmp_path, monkeypatch):
    from frost_nb import runs
    from frost_nb.notebook import glue as notebook

    monkeypatch.setenv("FROST_OUTPUTS", str(tmp_path))
    runs.record_read("digits-demo-families/vanilla-seed0")
    path = notebook.write_metrics("x", {"key": "cifar100-demo-families-per-step/frost-seed0", "model": "frost", "value": 1.0})
    prov = json.loads(path.read_text())["provenance"]
    assert prov["runs"] == ["cifar100-demo-families-per-step/frost-seed0", "digits-demo-families/vanilla-seed0"]
    frost = prov["settings"]["cifar100-demo-families-per-step/frost-seed0"]
    assert (frost["label"], frost["bundle"], frost["update"], frost["seed"]) == ("frost", "per-step", "leaky", 0)
    again = notebook.write_metrics("y", {"value": 2.0})  # the read log is taken once
    assert json.loads(again.read_text())["provenance"]["runs"] == []
    runs.record_read("digits-smoke-single/frost-resnet-seed0")  # read from a store since gone
    gone = notebook.write_metrics("z", {"value": 3.0})
    assert json.loads(gone.read_text())["provenance"]["runs"] == []


def test_the_stream_benchmark_decides_claim_16_by_its_worst_default_cell(tmp_path):
    """The stream's rows at its defaults (refill at once, a slot batch embedded ahead), 1 thread:
    the worst ratio decides; batch-at-a-time's row stays beside it, not primary."""
    name = "bench_adaptive_inference_stream_fashion-mnist.json"
    folder = _copy(tmp_path, name)
    data = json.loads((folder / name).read_text())
    stream = [r for r in data["rows"] if r["mode"] == "stream" and r["threads"] == 1
              and r["refill_at"] == 1 and r["embed_batch"] == r["batch_size"]]
    assert stream and len(stream) < len([r for r in data["rows"] if r["mode"] == "stream"])
    worst = min(r["ratio"] for r in stream)
    rows = [r for r in V.verdict_rows(folder) if r["claim"] == 16]
    primary = [r for r in rows if r["primary"]]
    assert len(primary) == 1 and primary[0]["ours"].startswith(f"{worst:.2f}, the worst of {len(stream)} stream cells")
    assert primary[0]["verdict"] == C.speed(worst) and primary[0]["bundle"] == "adopted"
    assert [r["ours"] for r in rows if not r["primary"]][0].startswith(
        f"{min(r['ratio'] for r in data['rows'] if r['mode'] == 'eager' and r['batch_size'] == 256 and r['threads'] == 1):.2f}"
        " (batch-at-a-time, batch 256; 1 thread")

    def slower(d):  # one default cell at half its ratio decides the row
        cell = next(r for r in d["rows"] if r["mode"] == "stream" and r["threads"] == 1
                    and r["refill_at"] == 1 and r["embed_batch"] == r["batch_size"])
        cell["ratio"] = 0.5

    _edit(folder, name, slower)
    assert [r for r in V.verdict_rows(folder) if r["claim"] == 16 and r["primary"]][0]["ours"].startswith("0.50")


def test_a_file_with_two_bundles_side_by_side_reads_its_own_bundles_seeds():
    """Notebook 05 with compare_bundle names both bundles' runs of every seed: the sweep's other
    seeds are its own bundle's (05_halting_fashion-mnist.json: global beside per-step)."""
    d = json.loads((V.default_metrics_dir() / "05_halting_fashion-mnist.json").read_text())
    assert d["compare_bundle"] == "per-step" and d["bundle"] == "adopted"
    assert V.run_of(d, {"model": "frost", "seed": 1}) is None  # two runs end in /frost-seed1
    for bundle in ("adopted", "per-step"):
        assert V.run_of(d, {"model": "frost", "seed": 1}, bundle)["bundle"] == bundle
    rows = [r for r in V.verdict_rows() if r["claim"] == 9 and r["notebook"] == V.SOURCES.get("05", "05")
            and r["dataset"] == "fashion-mnist" and r["bundle"] == "adopted"]
    assert [r["seeds"] for r in rows] == ["3"]


def test_paper_numbers_come_from_paper_py_only():
    import inspect

    for module in (C, V):
        source = inspect.getsource(module)
        for literal in ("0.70 vs 0.35", "0.697", "0.351", "4.53", "61.99", "1.26", "7.56"):
            assert literal not in source, (module.__name__, literal)


# ---------------------------------------------------------------------------------------- the seed rule
def test_decide_needs_three_seeds_and_two_standard_errors():
    assert C.decide([0.3]) == "suggested (1 seed)" and C.decide([-0.3, -0.1]) == "not suggested (2 seeds)"
    assert C.decide([0.10, 0.11, 0.12]) == R and C.decide([-0.10, -0.11, -0.12]) == N
    assert C.decide([0.10, -0.05, 0.02]) == I  # the mean within 2 SE of the margin
    assert C.decide([0.10, 0.11, 0.12], 0.2) == N and C.decide([0.10, 0.11, 0.12], 0.05) == R
    assert C.combine([R, N]) == P and C.combine([R, C.untestable("why")]) == f"{R}; {C.NOT_TESTABLE}: why"


# ---------------------------------------------------------------------------------------- the listed defects
def test_hurst_runaway_is_not_testable_with_a_sigmoid_h():
    """Defect: a learned H above 1 was required of a sigmoid H, which cannot leave (0, 1)."""
    alphas = {0.1: [0.7, 0.71, 0.72], 0.5: [0.5, 0.5, 0.51], 0.9: [0.4, 0.41, 0.4]}
    assert C.NOT_TESTABLE in C.hurst(alphas, [0.99, 0.98, 0.97], "sigmoid")
    assert C.hurst(alphas, [1.5, 1.6, 1.4], "free") == R
    assert C.hurst(alphas, [0.6, 0.7, 0.5], "free") == P  # small H raises alpha; H stays below 1
    flat = {0.1: [0.5, 0.5, 0.5], 0.5: [0.6, 0.6, 0.61]}
    assert C.hurst(flat, [1.5, 1.6, 1.4], "free") == P
    row = next(r for r in V.verdict_rows() if r["claim"] == 5)
    assert "sigmoid" in row["verdict"] and C.NOT_TESTABLE in row["verdict"]


def test_loss_ablation_compares_equal_strengths():
    """Defect: L_abs alone at lambda_abs = 3 was set against both losses at (1, 0.1). At equal
    strength (0.1) Fashion-MNIST's L_abs alone keeps its accuracy: no collapse."""
    row = next(r for r in V.verdict_rows() if r["claim"] == 6 and r["dataset"] == "fashion-mnist"
               and r["title"] == "Loss ablation" and r["bundle"] == "per-step")
    assert "88.01% vs 87.44%" in row["ours"] and row["verdict"] == "not suggested (1 seed)"  # was "reproduced"
    both = [0.7, 0.7, 0.7]
    acc = [0.87, 0.87, 0.87]
    assert C.loss_ablation(both, acc, [0.5, 0.5, 0.5], [0.7, 0.7, 0.7], [0.80, 0.81, 0.79]) == R
    assert C.loss_ablation(both, acc, [0.5, 0.5, 0.5], [0.7, 0.7, 0.7], [0.87, 0.868, 0.872]) == P
    assert C.loss_ablation(both, acc, [0.69, 0.7, 0.7], [0.7, 0.7, 0.7], [0.87, 0.868, 0.872]) == N
    assert C.loss_ablation(both, acc, [0.5, 0.5, 0.5], [0.2, 0.2, 0.2], [0.87, 0.87, 0.87]) == R  # scores collapse


def test_update_forms_on_one_seed_only_suggest():
    """Defect: on one seed any positive gap read "reproduced" (Fashion-MNIST leaky 0.83 vs 0.81)."""
    assert C.table1([0.83], [0.81]) == "not suggested (1 seed)"  # was reproduced; also below the margin
    assert C.table1([0.93], [0.81]) == "suggested (1 seed)"
    assert C.table1([0.93, 0.92, 0.94], [0.81, 0.80, 0.82]) == R
    assert C.table1([0.83, 0.84, 0.82], [0.81, 0.80, 0.82]) == N
    row = next(r for r in V.verdict_rows() if r["claim"] == 1 and r["notebook"] == "docs/fidelity.md"
               and r["dataset"] == "fashion-mnist" and r["form"] == "leaky")
    assert row["seeds"] == "1" and "suggested" in row["verdict"]


def test_contraction_is_decided_by_the_jacobian_not_the_step_ratio():
    """Defect: kappa < 1 (true by construction for an interpolating step) read as contraction."""
    assert C.contraction([0.80, 0.82, 0.78]) == R
    assert C.contraction([1.02, 1.03, 1.01]) == N  # just above 1, beyond two standard errors
    assert C.contraction([0.9, 1.1, 1.0]) == I
    assert C.contraction([2.3, 2.4, 2.35]) == N
    for r in V.verdict_rows():
        if r["claim"] == 2 and r["form"] == "leaky" and r["dataset"] == "digits":
            assert "step ratio 0.8" in r["ours"] and r["verdict"] == N  # kappa 0.81, Jacobian 2.36


def test_contraction_reads_notebook_02s_jacobian_of_frost_with_its_ranking_losses(tmp_path):
    """Notebook 02 (issue 31) measures the step Jacobian of every family: claim 2 reads only FROST
    trained with its ranking losses, over its seeds; a file without the measure adds no row."""
    name = "02_scale_consistency_fashion-mnist.json"
    folder = _copy(tmp_path, name)
    from_02 = lambda: [r for r in V.verdict_rows(folder) if r["claim"] == 2 and r["notebook"] == "02"]
    _edit(folder, name, lambda d: d.pop("jacobian", None))
    assert from_02() == []

    def measured(d):
        norms = {("frost", 0): 0.80, ("frost", 1): 0.82, ("frost", 2): 0.78, ("basic_ssm", 0): 5.0,
                 ("frost (no ranking)", 0): 5.0}
        d["jacobian"] = [{"model": m, "seed": s, "jvp_norm": v} for (m, s), v in norms.items()]
    _edit(folder, name, measured)
    (row,) = from_02()
    assert row["seeds"] == "3" and row["verdict"] == R and row["ours"].startswith("Jacobian 0.80; step ratio")
    assert row["dataset"] == "fashion-mnist" and row["bundle"] == "adopted"


def test_minkowski_protocols_read_from_notebook_03(tmp_path):
    """Notebook 03 measures every protocol of experiment (d) on its own runs (issue 31): one more
    claim-3 row from "03", decided per protocol as experiment (d)'s file is."""
    name = "03_minkowski_fashion-mnist.json"
    folder = _copy(tmp_path, name)
    protocol_rows = lambda: [r for r in V.verdict_rows(folder)
                             if r["claim"] == 3 and r["title"] == "Minkowski dimension (8 protocols)"]
    assert protocol_rows() == []  # the committed Fashion-MNIST file predates the measure

    def measured(d):  # frost clearly higher under protocol "a" only, on every seed
        d["protocol_runs"] = [{"model": r["model"], "seed": r["seed"], "protocol": p,
                               "dimension": (1.5 if p == "a" else 0.9) if r["model"] == "frost" else 1.0}
                              for r in d["runs"] for p in ("a", "b")]
    _edit(folder, name, measured)
    (row,) = protocol_rows()
    assert row["notebook"] == "03" and row["seeds"] == "3" and not row["primary"]
    assert row["ours"] == "reproduced under 1 of 2 protocols" and row["verdict"] == C.PROTOCOL_DEPENDENT


def test_table1_needs_its_margin_and_the_no_ranking_control():
    """Defect: leaky on Fashion-MNIST read "reproduced" at 0.85 vs 0.76 with no margin, while the
    same form without the ranking losses reads 0.61, below basic_ssm."""
    basic = [0.76, 0.77, 0.75]
    assert C.table1([0.85, 0.86, 0.84], basic) == R
    assert C.table1([0.85, 0.86, 0.84], basic, [0.61], [0.76]) == P  # the ranking losses carry it
    assert C.table1([0.85, 0.86, 0.84], basic, [0.90], [0.76]) == R
    assert C.table1([0.78, 0.79, 0.77], basic) == N  # above basic_ssm, below the margin
    row = next(r for r in V.verdict_rows() if r["claim"] == 1 and r["notebook"] == "02"
               and r["bundle"] == "per-step")
    assert row["verdict"] != R and "no ranking 0.61" in row["ours"]


def test_collapse_needs_every_baseline_and_reads_the_default_strength():
    """Defect: one collapsing baseline (recurrent) at 10-30 times the default strength read
    "reproduced"."""
    fell, kept = [0.3, 0.35, 0.4], [-0.45, -0.44, -0.46]
    assert C.collapse({"vanilla": kept, "recurrent": fell, "basic_ssm": kept}) == P
    assert C.collapse({"vanilla": fell, "recurrent": fell, "basic_ssm": fell}) == R
    assert C.collapse({"vanilla": kept, "recurrent": kept, "basic_ssm": kept}) == N
    assert C.collapse_score(0.2, 1.0, 0.3) > 0 and C.collapse_score(0.9, 1.0, 0.96) > 0
    assert C.collapse_score(0.9, 1.0, 0.5) < 0
    readme = {r["claim"]: r for r in V.summary_rows(V.verdict_rows())}
    assert "rel 1, abs 0.1" in readme[8]["ours"] and readme[8]["verdict"] != R


def test_alpha_below_one_and_recovery_are_not_testable_by_construction():
    """Defect: with a sigmoid alpha "< 1" holds by construction; under a cosine schedule to 0 alpha
    cannot recover after a late minimum."""
    start, low, end, high = [0.5] * 3, [0.40, 0.41, 0.39], [0.45, 0.46, 0.44], [0.52, 0.5, 0.51]
    v = C.alpha(start, low, end, high, [0.3, 0.35, 0.4], "sigmoid")
    assert v.startswith(R) and "by construction" in v
    v = C.alpha(start, low, end, high, [0.7, 0.8, 0.9], "sigmoid")
    assert "decaying to 0" in v and "by construction" in v
    assert C.alpha(start, low, end, high, [0.3, 0.35, 0.4], "softplus") == R
    assert C.alpha(start, low, end, [1.2, 1.3, 1.1], [0.3, 0.35, 0.4], "softplus") == P
    assert C.alpha(start, low, [0.40, 0.41, 0.39], high, [0.3, 0.35, 0.4], "softplus") == P  # no recovery


# ---------------------------------------------------------------------------------------- every other rule flips
def test_the_other_rules_flip_across_their_margins():
    up, down = [0.10, 0.11, 0.12], [-0.10, -0.11, -0.12]
    base = {"vanilla": [1.1, 1.1, 1.12], "basic_ssm": [1.0, 1.05, 1.02]}
    assert C.minkowski([1.3, 1.31, 1.29], base) == R and C.minkowski([1.13, 1.14, 1.13], base) == N
    assert C.minkowski_protocols({"a": R, "b": R}) == R and C.minkowski_protocols({"a": R, "b": N}) == C.PROTOCOL_DEPENDENT
    assert C.gradient_conflict(up, {"vanilla": down}) == R and C.gradient_conflict(down, {"vanilla": down}) == P
    assert C.gradient_conflict(down, {"vanilla": up}) == N
    paper_kept = {q: [C.PAPER_KEPT[q]] * 3 for q in C.KEPT_SHOWN}
    assert C.kept({q: [v + 0.01, v, v - 0.01] for q, (v, *_) in paper_kept.items()}) == R
    assert C.kept({q: [v - 0.2, v - 0.21, v - 0.19] for q, (v, *_) in paper_kept.items()}) == N
    assert C.ratio([0.1, -0.15]) == R and C.ratio([0.3]) == P and C.ratio([0.6]) == N
    assert C.vit_depth([4.5, 4.6, 4.4], 12, [0.37, 0.38, 0.36], [0.5, 0.5, 0.5]) == R
    assert C.vit_depth([9.0, 9.1, 8.9], 12, [0.75, 0.76, 0.74], [0.5, 0.5, 0.5]) == N
    assert C.fixed_depth([0.01, 0.012, 0.011]) == R and C.fixed_depth([0.0, 0.001, -0.001]) == N
    assert C.halting_rules([0.80, 0.81, 0.80], [0.80, 0.80, 0.80]) == R
    assert C.halting_rules([0.70, 0.71, 0.70], [0.80, 0.80, 0.80]) == N
    assert C.head_refit([0.03, 0.04, 0.035]) == R and C.head_refit([-0.03, -0.04, -0.035]) == N
    assert C.speed(0.95) == R and C.speed(0.8) == P and C.speed(0.5) == N
    assert C.kll_overhead(0.001) == R and C.kll_overhead(0.02) == P and C.kll_overhead(0.2) == N


def test_every_claim_states_its_margin_and_wording():
    assert [c.number for c in C.CLAIMS] == list(range(1, 16))
    assert all(c.title and c.wording and c.test for c in C.CLAIMS)
