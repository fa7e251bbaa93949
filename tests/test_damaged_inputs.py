"""Published results never change silently: each kind of file a result is read from (a metrics file and
a sweep's provenance sidecar, a run's config and weights, the runs' index, a prepared data file),
damaged, stops the ``python -m frost_nb`` command that reads it with one line (the file, what is wrong,
how to restore it) and exit status 2, and every writer (verdicts --write, export, the index, the
metrics, figure and sweep writers) leaves what it had published as it was. ``--skip-damaged`` leaves
the file out instead, and says so.

Everything happens on temporary copies: one run is trained here (seconds) and exported into a
temporary folder that stands in for ``outputs/runs/``."""

import json
import re
import shutil

import numpy as np
import pytest

from frost_nb import paths, runs
from frost_nb.__main__ import main
from frost_nb.notebook import glue
from frost_nb.paths import DamagedInput, cache_dir, outputs_dir, repo_root, restore_hint
from frost_nb.repro import provenance
from frost_nb.repro import verdicts as V

ARGS = ["--size", "smoke", "--epochs", "1", "--set", "data.limit=64", "--no-progress"]
RUN = "grid/run"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """One finished run trained here, as ``export`` writes it (the committed runs of these tests),
    and its local folder (``pristine.parent / "cache"``)."""
    base = tmp_path_factory.mktemp("pristine")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FROST_CACHE", str(base / "cache"))
        mp.setenv("FROST_OUTPUTS", str(base / "outputs"))
        assert main(["train", *ARGS, "--name", RUN]) == 0
        runs.export_run(base / "cache" / RUN, base / "runs")
    return base / "runs"


@pytest.fixture
def committed(pristine, tmp_path, monkeypatch):
    """A copy of the pristine runs as the committed runs' folder (``paths.committed_runs_dir``)."""
    root = tmp_path / "runs"
    shutil.copytree(pristine, root)
    for module in (paths, runs, provenance):
        monkeypatch.setattr(module, "committed_runs_dir", lambda: root)
    return root


def _fails(argv, capsys, *named):
    """``main(argv)`` exits 2 with one ``error:`` line, the last, holding every string of ``named``."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = err.rstrip("\n").split("\n")
    assert err.count("error: ") == 1 and lines[-1].startswith("error: "), err
    for text in named:
        assert text in lines[-1], (text, lines[-1])
    return lines[-1]


def _trained_here() -> list:
    return sorted(cache_dir().rglob("model.pt"))


def _snapshot(*folders):
    return {p: p.read_bytes() for f in folders for p in sorted(f.rglob("*")) if p.is_file()}


# -------------------------------------------------------------------------------------- metrics files
def _metrics_copy(tmp_path):
    folder = tmp_path / "metrics"
    folder.mkdir()
    for path in sorted(V.default_metrics_dir().glob("0*.json"))[:2]:  # two committed metrics files
        shutil.copy(path, folder / path.name)
    assert len(list(folder.iterdir())) == 2
    return folder


def _readme(tmp_path):
    (s1, e1), (s2, e2) = V.MARKERS["summary"], V.MARKERS["full"]
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{s1}\n| old |\n{e1}\n\n{s2}\n| old |\n{e2}\nafter\n")
    return readme


def test_a_damaged_metrics_file_stops_every_verdicts_command(tmp_path, capsys):
    folder, readme = _metrics_copy(tmp_path), _readme(tmp_path)
    args = ["verdicts", "--metrics-dir", str(folder)]
    assert main(args + ["--write", str(readme)]) == 0 and main(args + ["--check", str(readme)]) == 0
    published = readme.read_text()
    damaged = sorted(folder.iterdir())[1]
    damaged.write_text(damaged.read_text()[: len(damaged.read_text()) // 2])  # cut off mid-write
    for extra in (["--write", str(readme)], ["--check", str(readme)], []):
        _fails(args + extra, capsys, str(damaged), "unreadable (JSONDecodeError", "restore it: ",
               f"run notebooks/{damaged.name[:2]}_")
    assert readme.read_text() == published
    with pytest.raises(DamagedInput, match=damaged.name):
        V.verdict_rows(folder)
    # asked for: the damaged file is left out, and the command says so
    assert main(args + ["--skip-damaged", "--check", str(readme)]) in (0, 1)
    err = capsys.readouterr().err
    assert f"left out (--skip-damaged): {damaged}" in err
    assert "--skip-damaged: 1 damaged input(s) left out" in err
    with paths.skip_damaged() as skipped:
        V.verdict_rows(folder)
    assert [line.split(":")[0] for line in skipped] == [str(damaged)]


def test_a_metrics_file_lacking_what_a_claim_reads_is_named(tmp_path):
    folder = tmp_path / "metrics"
    folder.mkdir()
    shutil.copy(V.default_metrics_dir() / "06_complexity.json", folder)
    data = json.loads((folder / "06_complexity.json").read_text())
    assert V.verdict_rows(folder)  # whole, it gives rows
    data.pop("ratios")
    (folder / "06_complexity.json").write_text(json.dumps(data))
    with pytest.raises(DamagedInput, match=r"06_complexity.json: table3_rows cannot read it \(KeyError"):
        V.verdict_rows(folder)
    (folder / "06_complexity.json").write_text("[1, 2]")  # JSON, but not a metrics record
    with pytest.raises(DamagedInput, match="06_complexity.json: not a JSON object"):
        V.verdict_rows(folder)



@pytest.mark.parametrize("name, damage, claim", [
    ("02_scale_consistency", lambda d: d["kappa"].pop(), "contraction_rows"),  # a run's step ratio
    ("04_alpha_H_ablation_per-step", lambda d: d["loss_ablation"][0].pop("test_accuracy"), "loss_rows"),
    ("05_halting_demo", lambda d: d.update(sweep=[]), "table2_rows"),  # no seed's sweep
])
def test_a_record_lacking_a_row_or_field_a_claim_looks_up_is_named(tmp_path, name, damage, claim):
    folder = tmp_path / "metrics"
    folder.mkdir()
    data = json.loads((V.default_metrics_dir() / f"{name}.json").read_text())
    damage(data)
    (folder / f"{name}.json").write_text(json.dumps(data))
    with pytest.raises(DamagedInput, match=f"{name}.json: {claim} cannot read it"):
        V.verdict_rows(folder)

def test_a_damaged_sweep_csv_or_its_provenance_sidecar(committed, tmp_path, capsys):
    folder = tmp_path / "metrics"
    csv_file = folder / "sweep_demo_frost_digits.csv"
    assert main(["sweep", "--checkpoint", str(committed / RUN / "model.pt"), "--csv", str(csv_file)]) == 0
    side = csv_file.with_suffix(".provenance.json")
    assert json.loads(side.read_text())["provenance"]["runs"] == [RUN]
    args = ["verdicts", "--metrics-dir", str(folder)]
    assert main(args) == 0
    capsys.readouterr()
    good = csv_file.read_text()
    csv_file.write_text(good[: good.index("\n", good.index("\n") + 1) + 8])  # the second row cut off
    _fails(args, capsys, str(csv_file), "a row with other fields than its header", "python -m frost_nb sweep")
    csv_file.write_text(good[: good.rindex(",") + 1])  # cut right after a comma: an empty last cell
    _fails(args, capsys, str(csv_file), "unreadable (ValueError: could not convert", "python -m frost_nb sweep")
    csv_file.write_text(good.replace(",", ";"))  # saved again with semicolons: one column, of text
    _fails(args, capsys, str(csv_file), "unreadable (ValueError: could not convert")
    csv_file.write_text(good)
    side.write_text(side.read_text()[:-20])
    _fails(args, capsys, str(side), "unreadable (JSONDecodeError")


# ---------------------------------------------------------------------------------------------- runs
def test_a_damaged_run_config_is_named_never_skipped_or_retrained(committed, capsys):
    assert main(["config", *ARGS]) == 0
    assert json.loads(capsys.readouterr().out)["run"] == RUN  # the run these tests damage
    config = committed / RUN / "config.json"
    config.write_text(config.read_text()[:40])
    for command in ("config", "train"):
        _fails([command, *ARGS], capsys, f"{config}: unreadable run config (JSONDecodeError",
               "restore it: train the run again and export it")
    assert _trained_here() == []  # not trained again in its place
    with pytest.raises(DamagedInput, match="unreadable run config"):
        runs.stored_runs(committed)
    with paths.skip_damaged() as skipped:
        assert runs.stored_runs(committed) == [] and len(skipped) == 1
    assert main(["config", *ARGS, "--skip-damaged"]) == 0  # asked for: left out, and said so
    out, err = capsys.readouterr()
    assert json.loads(out)["run"] is None and "left out (--skip-damaged)" in err and str(config) in err


def test_a_damaged_local_run_config_says_to_delete_the_local_run(tiny_config):
    local = cache_dir() / "grid" / "local"
    local.mkdir(parents=True)
    (local / "config.json").write_text("{")
    with pytest.raises(DamagedInput, match="delete the local run .*grid/local"):
        runs.find_run(tiny_config)


def test_damaged_or_missing_weights_of_a_committed_run_stop_the_run_commands(committed, capsys):
    weights = committed / RUN / "model.pt"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])
    _fails(["train", *ARGS], capsys, f"checkpoint {weights} is damaged", f"the committed run {RUN}",
           "--retrain")
    _fails(["evaluate", "--checkpoint", str(weights)], capsys, f"checkpoint {weights} is damaged")
    weights.unlink()
    _fails(["train", *ARGS], capsys, f"{weights}: the committed run {RUN} lacks its model.pt", "restore it")
    assert _trained_here() == []


# --------------------------------------------------------------------------------------------- index
def test_a_damaged_index_stops_verdicts_check_and_write_mends_it(committed, tmp_path, monkeypatch, capsys):
    site = tmp_path / "site"  # README.md and docs/results.md of the default targets, as copies
    (site / "docs").mkdir(parents=True)
    (s1, e1), (s2, e2) = V.MARKERS["summary"], V.MARKERS["full"]
    (site / "README.md").write_text(f"{s1}\n{e1}\n")
    (site / "docs" / "results.md").write_text(f"{s2}\n{e2}\n")
    monkeypatch.setattr("frost_nb.__main__.repo_root", lambda: site)
    args = ["verdicts", "--metrics-dir", str(tmp_path / "no-metrics")]
    (tmp_path / "no-metrics").mkdir()
    index = committed / "index.csv"
    assert main(args + ["--write"]) == 0 and main(args + ["--check"]) == 0
    assert index.read_text() == runs.index_text(committed) and RUN in index.read_text()
    tables, good = _snapshot(site), index.read_text()
    header, row = good.splitlines(keepends=True)
    cut = header + ",".join(row.split(",")[:5]) + "\n"
    for damage, problem in ((good[:-10], "unreadable run index (Error: unexpected end of data)"),  # in quotes
                            (cut, "line 2 has not the 10 fields of a row"),
                            (good.splitlines(keepends=True)[0], "1 of its runs missing, e.g. grid/run"),
                            (good.replace("run,", "name,", 1), "its header is not run,dataset,")):
        index.write_text(damage)
        _fails(args + ["--check"], capsys, str(index), problem,
               "restore it: python -m frost_nb verdicts --write")
        with pytest.raises(DamagedInput, match=re.escape(problem)):
            runs.read_index(committed)
    fields = row.split(",")
    fields[7] = "0.0001"  # test_accuracy, edited by hand: the file reads, but is stale
    index.write_text(header + ",".join(fields))
    assert main(args + ["--check"]) == 1 and "runs' index is stale" in capsys.readouterr().err
    assert main(args + ["--write"]) == 0 and index.read_text() == good  # written again from the runs
    assert _snapshot(site) == tables
    assert runs.read_index(str(committed)).equals(runs.read_index(committed))  # a str root, as a Path


def test_index_and_export_refuse_a_damaged_run_and_leave_the_index(committed, pristine, tmp_path, capsys):
    shutil.copytree(committed / RUN, committed / "grid" / "copy")  # a second run beside it
    runs.write_index(committed)
    metrics = committed / "grid" / "copy" / "metrics.json"
    metrics.write_text(metrics.read_text()[:30])
    before = _snapshot(committed)
    with pytest.raises(DamagedInput, match="grid/copy/metrics.json: unreadable run metrics"):
        runs.write_index(committed)
    cut = metrics.read_text()
    for damaged in ("[" * 100_000, '{"a": ' * 100_000):  # nested past the parser's depth: RecursionError
        metrics.write_text(damaged)
        with pytest.raises(DamagedInput, match=r"grid/copy/metrics.json: unreadable run metrics \(RecursionError"):
            runs.write_index(committed)
    good = json.loads((committed / RUN / "metrics.json").read_text())
    for field, value in (("train_seconds", "12"), ("test_accuracy", [0.5]), ("test_accuracy", True)):
        metrics.write_text(json.dumps({**good, field: value}))  # JSON, but not a number where one is read
        with pytest.raises(DamagedInput, match=rf"grid/copy/metrics.json: its {field} is not a number"):
            runs.write_index(committed)
    metrics.write_text(cut)
    source = pristine.parent / "cache" / RUN
    _fails(["export", str(source), "--to", str(committed)], capsys, str(metrics), "unreadable run metrics")
    assert _snapshot(committed) == before
    # a damaged source: nothing of it reaches the target
    shutil.copy(committed / RUN / "metrics.json", metrics)
    broken = tmp_path / "store" / "grid" / "run"
    shutil.copytree(source, broken)
    (broken / "model.pt").write_bytes((broken / "model.pt").read_bytes()[:500])
    before = _snapshot(committed)
    _fails(["export", str(broken), "--to", str(committed)], capsys,
           f"checkpoint {broken / 'model.pt'} is damaged")
    assert _snapshot(committed) == before


# ----------------------------------------------------------------------------------- other writers
def test_metrics_figure_and_sweep_writers_refuse_a_damaged_run(committed, tmp_path, capsys):
    metrics_file = outputs_dir() / "metrics" / "demo_frost_digits.json"
    figure = outputs_dir() / "figures" / "demo_frost_digits_training.png"
    for path in (metrics_file, figure):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"published before")
    assert main(["config", *ARGS, "--dataset", "digits"]) == 0  # the demo's config is this run's
    assert json.loads(capsys.readouterr().out)["run"] == RUN
    config = committed / RUN / "config.json"
    config.write_text(config.read_text().replace("{", "", 1))
    before = _snapshot(outputs_dir())
    _fails(["demo", *ARGS], capsys, str(config), "unreadable run config")
    with pytest.raises(DamagedInput, match="unreadable run config"):
        glue.write_metrics("demo_frost_digits", {"key": RUN, "accuracy": 0.5})
    csv_file = tmp_path / "sweep.csv"
    _fails(["sweep", "--checkpoint", str(committed / RUN / "model.pt"), "--csv", str(csv_file)], capsys,
           str(config))
    assert not csv_file.exists() and not csv_file.with_suffix(".provenance.json").exists()
    assert _snapshot(outputs_dir()) == before and _trained_here() == []


# --------------------------------------------------------------------------------------- prepared data
def test_a_damaged_prepared_data_file(tmp_path, capsys):
    prepared = tmp_path / "data" / "prepared" / "fashion-mnist"
    prepared.mkdir(parents=True)
    for part, n in (("train", 20), ("test", 10)):
        np.savez(prepared / f"{part}.npz", x=np.zeros((n, 1, 28, 28), np.uint8), y=np.arange(n) % 10,
                 classes=np.array([str(c) for c in range(10)]), source=np.array("made here"),
                 format=np.array(1))
    train = prepared / "train.npz"
    train.write_bytes(train.read_bytes()[:2000])
    _fails(["train", "--dataset", "fashion-mnist", *ARGS, "--root", str(tmp_path / "data")], capsys,
           f"{train} is truncated or corrupt", "python -m frost_nb.data.prepare fashion-mnist --force")
    assert _trained_here() == []


# ----------------------------------------------------------------------------------------- the hint
def test_the_restore_hint_names_git_for_a_tracked_file_and_the_command_otherwise(tmp_path):
    if not (repo_root() / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: no file is tracked")
    assert restore_hint(repo_root() / "README.md") == "restore it: git checkout -- README.md"
    assert restore_hint(repo_root() / "README.md", "make demo") == \
        "restore it: git checkout -- README.md or make demo"
    assert restore_hint(tmp_path / "x.json", "make demo") == "restore it: make demo"
    assert restore_hint(tmp_path / "x.json") == "replace it with a good copy"
