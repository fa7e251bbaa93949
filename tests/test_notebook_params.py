"""Notebook parameters: each one annotated with its type, validated on entry (type and range) with
a message naming it, and a notebook that studies FROST's halting refusing another model family.

Read from the notebooks' JSON and called in-process: no kernel starts here (the papermill runs
are in test_notebooks.py)."""

import ast
import json
import math
from pathlib import Path

import pytest
import torch

from frost_nb.checkpoint import save_checkpoint
from frost_nb.config import SEED_MAX, make_config
from frost_nb.inputs import ParameterError
from frost_nb.models import create_model
from frost_nb.notebook.glue import _RULES, setup, trained_frost, validate_params

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9]*.ipynb"))
# annotation of a parameters cell -> the Python types it admits
ANNOTATIONS = {"int": {int}, "float": {int, float}, "str": {str}, "bool": {bool},
               "Optional[int]": {int, type(None)}, "Optional[str]": {str, type(None)}}


def _cells(path):
    """The parameters cell and the first code cell after it that is not imports only (the one
    that calls ``notebook.setup``), as parsed Python modules."""
    cells = json.loads(path.read_text())["cells"]
    i = next(k for k, c in enumerate(cells) if "parameters" in c["metadata"].get("tags", []))
    code = (ast.parse("".join(c["source"])) for c in cells[i + 1:] if c["cell_type"] == "code")
    after = next(m for m in code if not all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in m.body))
    return ast.parse("".join(cells[i]["source"])), after


def _parse(cell) -> ast.Module:
    return ast.parse("".join(cell["source"]))


def _annotation(node) -> str | None:
    """``int`` or ``"Optional[int]"`` (quoted: papermill 2.7 lists no parameter annotated
    ``int | None``, nteract/papermill#695, and an unquoted Optional needs an import)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _parameters(path) -> dict[str, ast.stmt]:
    params, _ = _cells(path)
    return {(s.target if isinstance(s, ast.AnnAssign) else s.targets[0]).id: s for s in params.body}


def _defaults(path) -> dict:
    return {name: ast.literal_eval(s.value) for name, s in _parameters(path).items()}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_parameter_has_a_type_annotation(path):
    """One annotated assignment of a literal per line (``quantile: float = 0.5  # help``), of a
    type that the parameter's rule admits, and ``papermill --help-notebook`` shows each type."""
    import papermill

    params, _ = _cells(path)
    assert params.body, "no parameters"
    for stmt in params.body:
        line = ast.unparse(stmt)
        assert isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name), \
            f"{line!r}: write `name: type = value  # help`"
        name, annotation = stmt.target.id, _annotation(stmt.annotation)
        assert annotation in ANNOTATIONS, f"{line!r}: annotate with one of {sorted(ANNOTATIONS)}"
        ast.literal_eval(stmt.value)  # literals only
        kinds = _RULES[name][0]
        admitted = set(kinds) if isinstance(kinds, tuple) else {kinds}
        assert ANNOTATIONS[annotation] <= admitted, f"{name}: annotated {annotation}, validated as {admitted}"
    shown = papermill.inspect_notebook(str(path))
    assert {n: p["inferred_type_name"] for n, p in shown.items()} == \
        {s.target.id: _annotation(s.annotation) for s in params.body}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_parameter_is_validated_on_entry(path):
    """The first code cell after the parameters cell (imports aside) passes every parameter, by its
    own name, to ``notebook.setup`` with the notebook's number (before any other call uses one), and
    the committed values pass; no later cell reads a raw parameter again (only ``params.<name>``:
    smoke mode changes some)."""
    params = _parameters(path)
    _, cell = _cells(path)
    calls = [n for n in ast.walk(cell) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup"]
    assert len(calls) == 1, "one setup call in the first code cell after the parameters (imports aside)"
    assert [ast.literal_eval(a) for a in calls[0].args] == [path.name[:2]]
    passed = {k.arg: k.value.id for k in calls[0].keywords if isinstance(k.value, ast.Name)}
    assert passed == {name: name for name in params}
    at = next(i for i, s in enumerate(cell.body) if calls[0] in ast.walk(s))
    used = {n.id for s in cell.body[:at] for n in ast.walk(s) if isinstance(n, ast.Name)} & set(params)
    assert not used, f"{sorted(used)} used before setup"
    in_setup = {id(n) for n in ast.walk(calls[0])}  # the setup call itself passes them all
    modules = [m for m in (_parse(c) for c in json.loads(path.read_text())["cells"]
                           if c["cell_type"] == "code" and "parameters" not in c["metadata"].get("tags", []))
               if ast.dump(m) != ast.dump(cell)] + [cell]  # every code cell, the setup cell as parsed above
    raw = {n.id for m in modules for n in ast.walk(m)
           if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in in_setup} & set(params)
    assert not raw, f"{sorted(raw)} read raw after setup: use params.<name>"
    validate_params(**_defaults(path))


def test_setup_validates_then_shrinks_to_a_smoke_run(monkeypatch):
    """setup: the parameters as given (smoke False) outside smoke mode; under FROST_SMOKE=1 the
    smoke size, digits, the size's own epochs and the notebook's caps (None capped too); a bad
    value stops it either way."""
    monkeypatch.delenv("FROST_SMOKE", raising=False)
    given = dict(dataset="cifar100", size="demo", seeds=3, samples=None, bundle="adopted")
    assert vars(setup("03", **given)) == {"notebook": "03", "smoke": False, **given}
    assert setup("04", sections="alpha, loss").sections == ("alpha", "loss")
    # defect: the order typed named the metrics file (loss-alpha beside alpha-loss, both read by the tables)
    assert setup("04", sections="loss,alpha").sections == ("alpha", "loss")
    assert setup("04", sections="alpha,\tloss\n").sections == ("alpha", "loss")  # any white space
    monkeypatch.setenv("FROST_SMOKE", "1")
    smoke = setup("03", **given)
    assert (smoke.size, smoke.dataset, smoke.seeds, smoke.samples, smoke.smoke) == ("smoke", "digits", 1, 40, True)
    assert setup("03", samples=7).samples == 7  # under the cap: kept
    assert setup("05", seeds=3).seeds == 2 and setup("06", size="paper").size == "smoke"
    assert setup("01", epochs=50).epochs is None
    assert setup("07", dataset="fashion-mnist", collapse_dataset="cifar10").collapse_dataset == "digits"
    with pytest.raises(ParameterError, match="seeds"):
        setup("02", seeds=0)


def test_every_rule_is_a_notebook_parameter():
    names = {name for path in NOTEBOOKS for name in _parameters(path)}
    assert names == set(_RULES)


# one bad value per way each parameter can be wrong: out of range, wrong type, bool for a number
BAD = {
    "dataset": ["mnist-3d", "", 3],
    "collapse_dataset": ["imagenet", None],
    "model": ["frosty", None],
    "backbone": ["mlp"],
    "size": ["huge", "Demo"],
    "twin_size": ["ladder", None],
    "epochs": [0, -3, 2.5, True, "10"],
    "seed": [-1, SEED_MAX + 1, 1.0, None],
    "quantile": [1.5, -0.1, math.nan, math.inf, "0.5", True, None],
    "retrain": ["yes", 1, None],
    "checkpoint": ["", "  ", 3, True],
    "seeds": [0, 11, -3, 2.0, True],
    "samples": [0, -5, 10.0],
    "jvp_samples": [0, 10_001, None, 8.0, True],
    "bundle": ["canonical", None],
    "compare_bundle": ["canonical", "", 3],
    "examples": [-3, 0, 65, 8.0, None, True],
    "windows": [0, 17, -1, 4.0, None, True],
    "batch_size": [0, 257, "4", 4.0],
    "repeats": [0, 21, 1.5, -1],
    "sections": ["", "alpha,nope", "loss,loss", "Loss", None, 3],
    "models": ["", "frost,,basic_ssm", 3],
    "vit_checkpoint": ["", " ", 3, False],
    "throughput_dataset": ["mnist", None, 3],
    "throughput_samples": [0, -1, 1.5, None],
    "throughput_repeats": [0, 21, 1.5],
}
GOOD = {
    "dataset": ["digits", "fashion-mnist"], "collapse_dataset": ["digits"], "model": ["vanilla", "frost"],
    "backbone": ["vit"], "size": ["smoke", "paper"], "twin_size": ["demo"], "epochs": [1, None], "seed": [0, SEED_MAX],
    "quantile": [0, 0.25, 1.0], "retrain": [True, False], "checkpoint": [None, "run.pt"],
    "seeds": [1, 10], "samples": [1, None], "jvp_samples": [1, 10_000], "bundle": ["adopted", "residual"],
    "compare_bundle": [None, "per-step", "adopted"],
    "examples": [1, 64], "windows": [1, 16], "batch_size": [1, 256], "repeats": [1, 20],
    "sections": ["loss", "alpha, loss", "alpha,hurst,loss,tuning,update,conflict,adopted"],
    "models": [None, "frost", "frost,basic_ssm"],
    "vit_checkpoint": [None, "vit.pt"],
    "throughput_dataset": ["fashion-mnist"], "throughput_samples": [1, 512], "throughput_repeats": [1, 20],
}


def test_every_rule_has_bad_and_good_values():
    assert set(BAD) == set(_RULES) == set(GOOD)


def _cases(values):
    return [pytest.param(n, v, id=f"{n}={v!r}") for n, vs in values.items() for v in vs]


@pytest.mark.parametrize("name,value", _cases(BAD))
def test_bad_parameter_is_refused_by_name(name, value):
    with pytest.raises(ParameterError, match=rf"^parameter {name}=.* is invalid: expected ") as err:
        validate_params(**{name: value})
    bounds = {"examples": "from 1 to 64", "batch_size": "from 1 to 256", "repeats": "from 1 to 20",
              "seeds": "from 1 to 10", "quantile": "in [0, 1]", "windows": "from 1 to 16"}
    assert bounds.get(name, "") in str(err.value)


@pytest.mark.parametrize("name,value", _cases(GOOD))
def test_good_parameter_passes(name, value):
    assert validate_params(**{name: value}) == {name: value}


# --- notebooks that study FROST's halting head refuse other checkpoints ----------------------

def _checkpoint(tmp_path, model, **overrides):
    """A checkpoint file of an untrained smoke model (trained_frost reads its config only)."""
    cfg = make_config("smoke", None, model, **overrides)
    torch.manual_seed(0)
    state = {"config": cfg.to_dict(), "model": create_model(cfg.model).state_dict()}
    return str(save_checkpoint(tmp_path / f"{model}_{len(overrides)}.pt", state))


@pytest.mark.parametrize("smoke", [False, True], ids=["demo", "smoke"])
@pytest.mark.parametrize("family", ["vanilla", "recurrent", "basic_ssm"])
def test_trained_frost_refuses_another_family(tmp_path, monkeypatch, family, smoke):
    monkeypatch.setenv("FROST_SMOKE", "1" if smoke else "0")
    path = _checkpoint(tmp_path, family)
    with pytest.raises(ParameterError, match=rf"parameter checkpoint=.* holds a '{family}' model "
                                             rf"\({family}/resnet on digits\), not 'frost'"):
        trained_frost(path, "demo", "fashion-mnist")


@pytest.mark.parametrize("smoke", [False, True], ids=["demo", "smoke"])
def test_trained_frost_refuses_another_backbone_by_the_parameters_name(tmp_path, monkeypatch, smoke):
    """05's vit_checkpoint must hold a ViT frost: a ResNet one would be graded as the ViT's depths."""
    monkeypatch.setenv("FROST_SMOKE", "1" if smoke else "0")
    path = _checkpoint(tmp_path, "frost")
    with pytest.raises(ParameterError, match=r"^parameter vit_checkpoint=.* holds frost on the 'resnet' backbone "
                                             r"\(frost/resnet on digits\), not 'vit'"):
        trained_frost(path, "demo", "cifar100", backbone="vit", param="vit_checkpoint")


@pytest.mark.parametrize("smoke", [False, True], ids=["demo", "smoke"])
def test_trained_frost_refuses_an_untrained_halting_head(tmp_path, monkeypatch, smoke):
    monkeypatch.setenv("FROST_SMOKE", "1" if smoke else "0")
    path = _checkpoint(tmp_path, "frost", **{"loss.ranking": False})
    with pytest.raises(ParameterError, match="frost model whose halting head was never trained"):
        trained_frost(path, "demo", "fashion-mnist")


@pytest.mark.parametrize("loss", [{}, {"loss.ranking": False, "loss.ponder": True}],
                         ids=["ranking", "ponder"])
def test_trained_frost_loads_a_frost_checkpoint(tmp_path, monkeypatch, loss):
    monkeypatch.setenv("FROST_SMOKE", "0")
    path = _checkpoint(tmp_path, "frost", **loss)
    config, model, calibrator = trained_frost(path, "demo", "fashion-mnist")
    assert config.model.name == "frost" and config.loss.halting_trained
    assert model.num_parameters() == create_model(config.model).num_parameters()


def test_committed_data_set_of_each_notebook_is_its_committed_runs():
    """``notebook.COMMITTED_DATASETS`` names the data set a notebook's committed figures and
    metrics are on (another data set's get a suffix): the one its committed parameters read."""
    from frost_nb.checkpoint import checkpoint_config
    from frost_nb.notebook.glue import COMMITTED_DATASETS, output_suffix

    for path in NOTEBOOKS:
        number = path.name[:2]
        if number not in COMMITTED_DATASETS:
            continue
        defaults = _defaults(path)
        checkpoint = defaults.get("checkpoint")
        dataset = checkpoint_config(checkpoint).data.name if checkpoint else defaults["dataset"]
        assert dataset == COMMITTED_DATASETS[number], path.name
        size = checkpoint_config(checkpoint).size if checkpoint else defaults.get("size")
        assert output_suffix(number, dataset) == "" and output_suffix(number, dataset, size=size) == "", path.name
        assert output_suffix(number, "digits" if dataset != "digits" else "cifar100") != ""
    # notebook 07's collapse section: its own committed data set, its parameter collapse_dataset
    collapse = _defaults(next(p for p in NOTEBOOKS if p.name.startswith("07")))["collapse_dataset"]
    assert collapse == COMMITTED_DATASETS["07 collapse"]
    assert output_suffix("07 collapse", collapse) == "" and output_suffix("07 collapse", "cifar10") == "_cifar10"


def test_output_names_of_another_data_set_size_reading_or_sections():
    """The names the committed files were renamed to and that partial runs write: a run never
    writes over a committed file it does not reproduce."""
    from frost_nb.notebook.glue import ABLATION_SECTIONS, metrics_name, output_suffix, sections_suffix

    assert metrics_name("05_halting", "adopted", "cifar100", "ladder64") == "05_halting"  # committed at ladder64
    assert metrics_name("05_halting", "adopted", "cifar100", "demo") == "05_halting_demo"
    assert metrics_name("05_halting", "per-step", "fashion-mnist", "demo") == "05_halting_fashion-mnist_per-step"
    assert metrics_name("05_halting", "residual", "fashion-mnist") == "05_halting_fashion-mnist_residual"
    assert metrics_name("05_halting", "adopted", "cifar100", "cifar") == "05_halting_cifar"
    assert metrics_name("07_halting_baselines", "adopted", "fashion-mnist") == "07_halting_baselines_fashion-mnist"
    # 02 and 03 are committed on CIFAR-100 (issue 31); their Fashion-MNIST files stay beside, renamed
    assert metrics_name("02_scale_consistency", "residual") == "02_scale_consistency_residual"
    assert metrics_name("02_scale_consistency", "adopted", "cifar100") == "02_scale_consistency"
    assert metrics_name("02_scale_consistency", "adopted", "cifar100", "demo") == "02_scale_consistency_demo"
    assert metrics_name("02_scale_consistency", "residual", "fashion-mnist") == \
        "02_scale_consistency_fashion-mnist_residual"
    assert metrics_name("03_minkowski", "per-step", "fashion-mnist", "demo") == "03_minkowski_fashion-mnist_per-step"
    assert output_suffix("02", "cifar100", "per-step", "demo") == "_demo_per-step"
    assert output_suffix("03", "fashion-mnist") == "_fashion-mnist"
    assert output_suffix("04", "digits", "adopted", "smoke") == "_digits_smoke"
    assert sections_suffix(ABLATION_SECTIONS) == "" and sections_suffix(("alpha", "loss")) == "_alpha-loss"
    with pytest.raises(ParameterError, match="size"):
        output_suffix("05", "cifar100", size="huge")
