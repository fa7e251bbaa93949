"""Config validation, sizes, round trips and the cache key."""

import json

import pytest

from frost_nb.config import (
    ConfigError,
    ModelConfig,
    RunConfig,
    TrainConfig,
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


def test_baselines_train_with_task_loss_only():
    assert make_config("demo", model="frost").loss.ranking
    for name in ("vanilla", "recurrent", "basic_ssm"):
        assert not make_config("demo", model=name).loss.ranking


def test_round_trip_and_key():
    cfg = make_config("demo", "fashion-mnist", **{"train.epochs": 3})
    back = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.key() == cfg.key()
    assert cfg.replace(**{"train.seed": 1}).key() != cfg.key()
    # where data lives does not change the trained model
    assert cfg.replace(**{"data.root": "/elsewhere", "train.device": "cpu"}).key() == cfg.key()


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


# cache keys of runs committed in outputs/checkpoints before LossConfig grew the PonderNet
# fields (computed before the change): regression values, not results
KEY_DEMO_FASHION_FROST = "f1ccca2cbdda17b8"
KEY_DEMO_FASHION_VANILLA = "40dd98b9f1c7f51e"


def test_new_loss_fields_leave_existing_keys_alone():
    assert make_config("demo", "fashion-mnist", "frost").key() == KEY_DEMO_FASHION_FROST
    assert make_config("demo", "fashion-mnist", "vanilla").key() == KEY_DEMO_FASHION_VANILLA
    base = make_config("demo", "fashion-mnist", "frost", **{"loss.ranking": False})
    ponder = base.replace(**{"loss.ponder": True})
    assert ponder.key() != base.key()
    assert ponder.replace(**{"loss.ponder_prior": 0.2}).key() != ponder.key()
    assert ponder.replace(**{"loss.ponder_beta": 0.1}).key() != ponder.key()
    # off, the ponder settings change nothing, and neither does the key
    assert base.replace(**{"loss.ponder_prior": 0.2}).key() == base.key()
    back = RunConfig.from_dict(json.loads(json.dumps(ponder.to_dict())))
    assert back == ponder and back.key() == ponder.key()


def test_ponder_replaces_the_ranking_losses():
    with pytest.raises(ConfigError, match=r"loss\.ponder.*loss\.ranking=False"):
        make_config("smoke", **{"loss.ponder": True})
    cfg = make_config("smoke", **{"loss.ranking": False, "loss.ponder": True})
    assert cfg.loss.halting_trained and not make_config("smoke", model="vanilla").loss.halting_trained
    with pytest.raises(ConfigError, match="loss.ponder_prior"):
        make_config("smoke", **{"loss.ranking": False, "loss.ponder": True, "loss.ponder_prior": 1.0})
