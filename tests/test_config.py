"""Config validation, sizes, round trips and the identity that finds a stored run."""

import dataclasses
import json

import pytest

from frost_nb.config import (
    ConfigError,
    DataConfig,
    LossConfig,
    ModelConfig,
    RunConfig,
    TrainConfig,
    check_finite,
    check_non_negative_int,
    check_range,
    make_config,
)


def test_sizes_fill_dataset_fields():
    smoke = make_config("smoke")
    assert (smoke.data.name, smoke.model.in_channels, smoke.model.image_size) == ("digits", 1, 8)
    assert smoke.model.stem_stride == 1  # 8x8 states on 8x8 digits
    demo = make_config("demo", "cifar10")
    assert (demo.model.in_channels, demo.model.image_size, demo.model.steps) == (3, 32, 16)
    paper = make_config("paper", "imagenet100", "frost", "vit")
    assert (paper.model.width, paper.model.steps, paper.model.patch_size) == (768, 12, 16)
    assert make_config("paper", "imagenet100").model.steps == 16


def test_cifar_size_is_the_paper_branch_at_cifar_resolution():
    """The GPU size: the paper's ResNet-50-family branch and B, C, D on CIFAR-100, a 16x16 state,
    16 steps, augmentation, bf16 and channels-last left to "auto" (bf16 on CUDA; channels-last off
    until a GPU measurement shows it helps)."""
    import torch

    from frost_nb.models import create_model

    cifar, paper = make_config("cifar"), make_config("paper", "imagenet100")
    assert (cifar.data.name, cifar.model.num_classes, cifar.data.augment) == ("cifar100", 100, True)
    for field in ("steps", "width", "bottleneck", "norm_groups", "bcd_kernel", "bcd_hidden"):
        assert getattr(cifar.model, field) == getattr(paper.model, field), field
    assert (cifar.train.amp, cifar.train.channels_last) == ("auto", "auto")
    model = create_model(cifar.model)
    assert model.stem(torch.zeros(1, 3, 32, 32)).shape == (1, 256, 16, 16)
    def beyond_stem(m):  # the stem differs with its stride; branch, B, C, D and heads do not
        return sum(p.numel() for name, p in m.named_parameters() if not name.startswith("stem"))
    assert beyond_stem(model) == beyond_stem(create_model(paper.model))  # Table 3's ResNet frost, 100 classes
    demo = make_config("demo", "cifar100")
    assert (demo.model.stem_stride, demo.model.num_classes, demo.data.augment) == (2, 100, False)


def test_baselines_train_with_task_loss_only():
    assert make_config("demo", model="frost").loss.ranking
    for name in ("vanilla", "recurrent", "basic_ssm"):
        assert not make_config("demo", model=name).loss.ranking


def test_round_trip_and_identity():
    cfg = make_config("demo", "fashion-mnist", **{"train.epochs": 3})
    back = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.identity() == cfg.identity()
    assert cfg.replace(**{"train.seed": 1}).identity() != cfg.identity()
    # where data lives and which device trains do not change the trained model
    assert cfg.replace(**{"data.root": "/elsewhere", "train.device": "cpu"}).identity() == cfg.identity()


@pytest.mark.parametrize("overrides, name", [
    ({"train.epochs": -1}, "train.epochs"),
    ({"train.epochs": "3"}, "train.epochs"),
    ({"train.epochs": True}, "train.epochs"),
    ({"model.steps": 0}, "model.steps"),
    ({"model.update": "fancy"}, "model.update"),
    ({"loss.rank_frac": 0.9}, "loss.rank_frac"),
    ({"halting.calibrate_on": "everything"}, "halting.calibrate_on"),
    ({"model.hurst": 1.5}, "model.hurst"),
])
def test_bad_values_name_the_parameter(overrides, name):
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
        make_config("smoke", **overrides)


@pytest.mark.parametrize("overrides, message", [
    ({"model.update": "lossy"},
     "model.update='lossy' is invalid: expected one of ('canonical', 'convex', 'gated', 'leaky', "
     "'leaky_gated')."),
    ({"model.alpha_param": "tanh"},
     "model.alpha_param='tanh' is invalid: expected one of ('auto', 'softplus', 'exp', 'sigmoid')."),
    ({"model.learn_hurst": True, "model.hurst_param": "tanh"},
     "model.hurst_param='tanh' is invalid: expected one of ('sigmoid', 'free')."),
    ({"model.hurst_param": "free"},  # a fixed H has no parameterisation
     "model.hurst_param='free' is invalid: expected 'sigmoid' unless model.learn_hurst"),
    ({"model.update": "gated", "model.scaled_inside": True},  # a residual form fixes its operators
     "model.scaled_inside=True is invalid: expected False unless model.update is one of "
     "('leaky', 'leaky_gated')"),
    ({"model.update": "leaky", "model.learn_hurst": True},  # H would enter nowhere
     "model.learn_hurst=True is invalid: expected False with model.update in ('leaky', 'leaky_gated') "
     "unless model.scaled_inside=True"),
    ({"model.update": "leaky", "model.alpha_init": 1.5},  # sigmoid by default: alpha < 1
     "model.alpha_init=1.5 is invalid: expected a value in (0, 1.0)."),
    ({"model.halt_norm": 1}, "model.halt_norm=1 is invalid: expected a value of type bool."),
    ({"loss.rank_pairs": "per_sample"},
     "loss.rank_pairs='per_sample' is invalid: expected one of ('global', 'per_step')."),
    ({"halting.sketch_window": "week"},
     "halting.sketch_window='week' is invalid: expected one of ('epoch', 'run')."),
])
def test_new_options_are_validated_naming_field_and_allowed_values(overrides, message):
    with pytest.raises(ConfigError) as err:
        make_config("smoke", **overrides)
    assert str(err.value).startswith(message)


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("overrides, message", [
    # 1e300 crashed inside Adam, inf and nan were accepted
    ({"train.lr": 1e300}, "train.lr=1e+300 is outside (0, 10]: expected a learning rate in (0, 10]."),
    ({"train.lr": INF}, "train.lr=inf is outside (0, 10]: expected a learning rate in (0, 10]."),
    ({"train.lr": NAN}, "train.lr=nan is not a number: expected a learning rate in (0, 10]."),
    ({"loss.lambda_rel": INF}, "loss.lambda_rel=inf is outside [0, 1000]: expected a loss weight in [0, 1000]."),
    ({"loss.lambda_abs": 1e4}, "loss.lambda_abs=10000.0 is outside [0, 1000]: expected a loss weight in [0, 1000]."),
    ({"loss.ponder_beta": -0.5}, "loss.ponder_beta=-0.5 is outside [0, 1000]: expected a loss weight in [0, 1000]."),
    ({"loss.margin": INF}, "loss.margin=inf is outside [0, 1000]: expected a margin in [0, 1000]."),
    ({"train.seed": -1}, "train.seed=-1 is invalid: expected a seed >= 0"),
    ({"data.split_seed": -3}, "data.split_seed=-3 is invalid: expected a seed >= 0"),
    ({"data.split_seed": 2**64}, "data.split_seed=18446744073709551616 is invalid: expected a seed >= 0 "
     "and <= 18446744073709551615."),
    # every other float field: finite (checked after the field's own bounds)
    ({"train.grad_clip": INF}, "train.grad_clip=inf is not finite: expected a finite number."),
    ({"train.weight_decay": INF}, "train.weight_decay=inf is not finite: expected a finite number."),
    ({"model.mlp_ratio": INF}, "model.mlp_ratio=inf is not finite: expected a finite number."),
    ({"model.update": "canonical", "model.alpha_init": INF},
     "model.alpha_init=inf is invalid: expected a value in (0, inf)."),
])
def test_numbers_are_finite_and_within_named_bounds(overrides, message):
    with pytest.raises(ConfigError) as err:
        make_config("smoke", **overrides)
    assert str(err.value).startswith(message)


def test_bounds_are_inclusive_where_stated():
    cfg = make_config("smoke", **{"train.lr": 10, "loss.lambda_rel": 1000, "loss.lambda_abs": 0,
                                  "loss.margin": 1e3, "train.seed": 2**64 - 1, "data.split_seed": 0})
    assert cfg.train.lr == 10.0 and cfg.loss.lambda_rel == 1e3 and cfg.train.seed == 2**64 - 1


def test_shared_checks_name_the_bounds_and_take_another_error_type():
    class OtherError(ValueError):
        pass

    assert check_finite("x", 1.5) == 1.5 and check_range("x", 0.0, 0.0, 1.0) == 0.0
    assert check_non_negative_int("n", 0) == 0
    with pytest.raises(ConfigError, match=r"^x=inf is not finite: expected a finite number\.$"):
        check_finite("x", INF)
    with pytest.raises(OtherError, match=r"^tau=0\.0 is outside \(0, 1\): expected a threshold in \(0, 1\)\.$"):
        check_range("tau", 0.0, 0.0, 1.0, low_open=True, high_open=True, what="a threshold", error=OtherError)
    with pytest.raises(ConfigError, match=r"x=nan is not a number: expected a value in \[0, 1\]"):
        check_range("x", NAN, 0.0, 1.0)
    for bad in (-1, True, 1.0):
        with pytest.raises(ConfigError, match=r"expected an integer >= 0"):
            check_non_negative_int("n", bad)
    with pytest.raises(ConfigError, match=r"expected a count >= 0 and <= 5"):
        check_non_negative_int("n", 6, what="a count", high=5)


def test_leaky_forms_default_to_sigmoid_alpha():
    # "auto" is resolved on construction: sigmoid (alpha in (0, 1)) for the leaky forms, softplus
    # for the residual ones, and a config never holds "auto" (stored dicts stay as they were)
    for update, param in (("canonical", "softplus"), ("convex", "softplus"), ("gated", "softplus"),
                          ("leaky", "sigmoid"), ("leaky_gated", "sigmoid")):
        assert ModelConfig(update=update).alpha_param == param
        assert make_config("smoke", **{"model.update": update}).model.alpha_param == param
        assert make_config("paper", "imagenet100", **{"model.update": update}).model.alpha_param == param
    assert ModelConfig().alpha_param == "sigmoid" and make_config("demo").model.alpha_param == "sigmoid"  # leaky
    assert make_config("smoke", **{"model.update": "leaky"}).to_dict()["model"]["alpha_param"] == "sigmoid"
    # a chosen map stays chosen; one left at its form's default follows a change of form
    chosen = make_config("smoke", **{"model.update": "leaky", "model.alpha_param": "softplus"})
    assert chosen.model.alpha_param == "softplus"
    leaky = make_config("smoke", **{"model.update": "leaky"})
    assert leaky.replace(**{"model.update": "gated"}).model.alpha_param == "softplus"
    assert leaky.replace(**{"model.update": "leaky_gated"}).model.alpha_param == "sigmoid"
    gated = make_config("smoke", **{"model.update": "gated"})
    assert gated.model.alpha_param == "softplus"
    assert gated.replace(**{"model.update": "leaky"}).model.alpha_param == "sigmoid"
    exp = make_config("smoke", **{"model.alpha_param": "exp"})
    assert exp.replace(**{"model.update": "leaky"}).model.alpha_param == "exp"
    # and the same identity as the explicit choice: the same model
    explicit = make_config("smoke", **{"model.update": "leaky", "model.alpha_param": "sigmoid"})
    assert leaky.identity() == explicit.identity() and leaky == explicit


def test_unknown_names_are_refused():
    with pytest.raises(ConfigError, match="dataset"):
        make_config("smoke", "mnist-3d")
    with pytest.raises(ConfigError, match="model.name"):
        make_config("smoke", model="transformerxl")
    with pytest.raises(ConfigError, match="unknown parameter"):
        make_config("smoke", **{"train.epocs": 3})
    with pytest.raises(ConfigError, match="size"):
        make_config("huge")


def test_ints_accepted_for_floats():
    assert TrainConfig(lr=1).lr == 1.0 and isinstance(TrainConfig(lr=1).lr, float)
    with pytest.raises(ConfigError):
        ModelConfig(alpha_init=0.0)


def test_data_name_override_sets_the_model_input():
    # overriding data.name must not leave the model built for the default data set
    cfg = make_config("demo", **{"data.name": "cifar10"})
    assert (cfg.data.name, cfg.model.in_channels, cfg.model.image_size) == ("cifar10", 3, 32)
    with pytest.raises(ConfigError, match="data.name"):
        make_config("demo", "digits", **{"data.name": "cifar10"})
    with pytest.raises(ConfigError, match="data.name"):
        RunConfig().replace(**{"data.name": "mnist-3d"})


def _before_reading(model):
    from frost_nb.repro.grids import RESIDUAL_SELECTION

    return make_config("demo", "fashion-mnist", model, **RESIDUAL_SELECTION)


def test_every_loss_setting_is_part_of_a_runs_identity():
    base = _before_reading("frost").replace(**{"loss.ranking": False})
    ponder = base.replace(**{"loss.ponder": True})
    assert ponder.identity() != base.identity()
    assert ponder.replace(**{"loss.ponder_prior": 0.2}).identity() != ponder.identity()
    assert ponder.replace(**{"loss.ponder_beta": 0.1}).identity() != ponder.identity()
    back = RunConfig.from_dict(json.loads(json.dumps(ponder.to_dict())))
    assert back == ponder and back.identity() == ponder.identity()


NEW_OPTIONS = {"model.update": ("leaky", "leaky_gated"), "model.scaled_inside": (True,),
               "model.halt_norm": (True,), "model.hurst_param": ("free",),
               "loss.rank_pairs": ("per_step",), "halting.sketch_window": ("run",)}


def test_each_option_value_is_a_run_of_its_own():
    base = _before_reading("frost")
    leaky = base.replace(**{"model.update": "leaky", "model.scaled_inside": True,
                            "model.learn_hurst": True})
    identities = {json.dumps(base.identity(), sort_keys=True)}
    for dotted, values in NEW_OPTIONS.items():
        for value in values:
            cfg = (leaky if dotted in ("model.scaled_inside", "model.hurst_param") else base)
            cfg = cfg.replace(**{dotted: value})
            back = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
            assert back == cfg and back.identity() == cfg.identity()
            identities.add(json.dumps(cfg.identity(), sort_keys=True))
    assert len(identities) == 1 + sum(len(v) for v in NEW_OPTIONS.values())


def test_adopted_reading_is_the_default_and_a_missing_field_reads_its_default():
    from frost_nb.repro.grids import ADOPTED_BUNDLE

    for size, dataset in (("smoke", None), ("demo", "digits"), ("demo", "fashion-mnist"),
                          ("paper", "imagenet100")):
        d = make_config(size, dataset, "frost").to_dict()
        for dotted, value in ADOPTED_BUNDLE.items():
            section, name = dotted.split(".")
            assert d[section][name] == value, (size, dotted)
    # a stored config that lacks a field (written before the field existed) reads its default:
    # no migration, so a new field's default must be the behaviour from before it (config.py)
    cfg = make_config("demo", "fashion-mnist", "frost", **{"model.update": "gated", "model.halt_norm": False})
    stored = cfg.to_dict()
    for section, name in (("model", "halt_norm"), ("loss", "rank_pairs"), ("train", "diagnostics_every")):
        stored[section].pop(name)
    back = RunConfig.from_dict(stored)
    assert back.model.halt_norm is True and back.model.halt_norm == ModelConfig().halt_norm
    assert back.loss.rank_pairs == LossConfig().rank_pairs and back.train.diagnostics_every == 0
    assert back.identity() != cfg.identity()  # halt_norm's default differs from what that run had


# Fields added after the committed runs were trained: their defaults are the behaviour the runs were
# trained with (FROST's recipe), so a stored config without them reads as the same run.
ADDED_SINCE_THE_RUNS = {"loss": {"deep_supervision", "distill", "halt_target", "lambda_halt", "teacher",
                                 "teacher_state", "teacher_kl", "raptor"},
                        "model": {"branch_steps"},
                        "train": {"compile"}}  # a speed setting (WHERE_FIELDS): never in a run's identity


def test_committed_runs_are_complete_and_found_by_their_config():
    """Every committed run folder holds its whole config (config.json, the same as its model.pt's),
    and ``find_run`` finds that folder from the config alone: fields added later (with defaults
    that reproduce the run) must not move it."""
    from frost_nb.checkpoint import load_checkpoint
    from frost_nb.paths import committed_runs_dir
    from frost_nb.runs import find_run, stored_runs

    runs = stored_runs(committed_runs_dir())
    assert len(runs) >= 70, "the committed runs are missing"
    fields = {section: {f.name for f in dataclasses.fields(klass)} for section, klass in
              (("data", DataConfig), ("model", ModelConfig), ("loss", LossConfig), ("train", TrainConfig))}
    for run in runs:
        stored = json.loads((run.folder / "config.json").read_text())
        assert load_checkpoint(run.checkpoint)["config"] == stored, run.name
        for section, names in fields.items():  # complete but for fields added since, read at their defaults
            assert set(stored[section]) <= names, (run.name, section)
            assert names - set(stored[section]) <= ADDED_SINCE_THE_RUNS.get(section, set()), (run.name, section)
        assert run.finished and find_run(run.config).folder == run.folder, run.name


def test_ponder_replaces_the_ranking_losses():
    with pytest.raises(ConfigError, match=r"loss\.ponder.*loss\.ranking=False"):
        make_config("smoke", **{"loss.ponder": True})
    cfg = make_config("smoke", **{"loss.ranking": False, "loss.ponder": True})
    assert cfg.loss.halting_trained and not make_config("smoke", model="vanilla").loss.halting_trained
    with pytest.raises(ConfigError, match="loss.ponder_prior"):
        make_config("smoke", **{"loss.ranking": False, "loss.ponder": True, "loss.ponder_prior": 1.0})


def test_configs_are_frozen_once_validated():
    """Models and losses trust a config validated on construction: so nothing may change it later
    (a stem stride set to 5 afterwards would build a wrong stem silently). Changes go through
    replace, which validates again."""
    import dataclasses

    cfg = make_config("smoke")
    for section, field, value in (("model", "stem_stride", 5), ("train", "lr", -1.0), ("loss", "rank_frac", 0.9)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(getattr(cfg, section), field, value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.size = "paper"
    with pytest.raises(ConfigError, match="stem_stride"):
        cfg.replace(**{"model.stem_stride": 5})


def test_the_defaults_are_the_demo_on_digits():
    """``RunConfig()`` is what ``make demo`` trains (demo size on the bundled digits), so it runs
    offline as it stands; every size states what it changes from it (the paper's SGD included)."""
    assert RunConfig() == make_config("demo", "digits")
    assert RunConfig().data.name == "digits" and RunConfig().model.in_channels == 1
    paper = make_config("paper", "imagenet100")
    assert (paper.train.optimizer, paper.train.weight_decay) == ("sgd", 5e-4)
    assert make_config("paper", "imagenet100", backbone="vit").train.optimizer == "adamw"


def test_every_preset_row_is_complete_and_builds():
    """One row per (size, data set, backbone), every preset field set (no lookup falls through
    to another row); each builds a valid config on a data set of its own."""
    from frost_nb.config import PRESET_FIELDS, PRESETS, preset
    from frost_nb.data.datasets import DATASETS

    for (size, dataset, backbone), row in PRESETS.items():
        assert len(row) == len(PRESET_FIELDS), (size, dataset, backbone)
        own = {d for (z, d, _) in PRESETS if z == size}  # "*": a data set without a row of its own
        name = dataset if dataset != "*" else next(d for d in sorted(DATASETS) if d not in own)
        cfg = make_config(size, name, "frost", "vit" if backbone == "vit" else "resnet")
        if cfg.model.image_size > 8 or size == "paper":  # 8 px images keep 8x8 states (one rule)
            assert {k: v for k, v in cfg.flat().items() if k in PRESET_FIELDS} == \
                dict(zip(PRESET_FIELDS, row)), (size, dataset, backbone)
    assert preset("demo", "imagenet100") == preset("demo", "*")  # another data set: the size's "*" row
    assert preset("paper", "imagenet100", "vit")["model.width"] == 768


@pytest.mark.parametrize("name", ["a/b", "cifar100-demo-families/vanilla-seed0"])
def test_one_rule_decides_a_run_name_for_the_config_and_the_run_store(name):
    from frost_nb.config import is_run_name
    from frost_nb.runs import check_name

    assert is_run_name(name) and check_name(name) == name


@pytest.mark.parametrize("name", ["a", "a/b/c", "a//b", "a/b/", "./a/b", "a/./b", "/a/b", "a/..", "a\\b/c",
                                  ""])
def test_an_odd_run_name_is_refused_by_both_the_config_and_the_run_store(name):
    from frost_nb.config import ConfigError, is_run_name
    from frost_nb.runs import check_name

    assert not is_run_name(name)
    with pytest.raises(ConfigError, match="expected GRID/LABEL"):
        check_name(name)
