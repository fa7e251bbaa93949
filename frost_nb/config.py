"""Run configuration: one dataclass per concept, validated on construction (docs/architecture.md).
Every default of docs/method.md section 13 is a field here; together they are the demo on digits."""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the parameter and the fix."""


def _fail(param: str, value: Any, expected: str, error: type[Exception] = ConfigError) -> None:
    raise error(f"{param}={value!r} is invalid: expected {expected}.")


# Checks shared by every validation (other code passes its own error type); each returns the value.

def check_finite(param: str, value: float, *, hint: str = "", error: type[Exception] = ConfigError) -> float:
    """``value`` is a finite number (not NaN, not infinite)."""
    if not math.isfinite(value):
        raise error(f"{param}={value!r} is {'not a number' if math.isnan(value) else 'not finite'}: "
                    f"expected a finite number{hint}.")
    return value


def check_range(param: str, value: float, low: float, high: float, *, low_open: bool = False,
                high_open: bool = False, what: str = "a value", hint: str = "",
                error: type[Exception] = ConfigError) -> float:
    """``low <= value <= high`` (``<`` on an open side; NaN is never in range)."""
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if not (above and below):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        found = "not a number" if value != value else f"outside {interval}"
        raise error(f"{param}={value!r} is {found}: expected {what} in {interval}{hint}.")
    return value


def check_non_negative_int(param: str, value: int, *, what: str = "an integer", high: int | None = None,
                           error: type[Exception] = ConfigError) -> int:
    """``value`` is an int (not a bool), ``>= 0`` and at most ``high`` when given."""
    if not (_type_ok(value, int) and value >= 0 and (high is None or value <= high)):
        _fail(param, value, f"{what} >= 0" + (f" and <= {high}" if high is not None else ""), error)
    return value


SEED_MAX = 2**64 - 1  # torch.Generator.manual_seed takes no more
LOSS_WEIGHT_MAX = 1e3  # loss weights and margins: larger ones swamp the task loss (a typo, not a setting)
LR_MAX = 10.0
# each field's resolved annotation, once per class (``from __future__ import annotations``: strings)
_field_types = functools.cache(typing.get_type_hints)


def _type_ok(value: Any, annotation: Any) -> bool:
    """isinstance for the simple annotations used here (int, float, str, bool, X | None)."""
    if isinstance(annotation, types.UnionType):
        return any(_type_ok(value, a) for a in typing.get_args(annotation))
    if isinstance(value, bool):  # an int to Python, never an int or float of ours
        return annotation is bool
    return isinstance(value, (int, float) if annotation is float else annotation)  # ints are floats


class _Validated:
    """Checks field types on construction, then runs the subclass's range checks."""

    _section = ""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value, annotation = getattr(self, f.name), _field_types(type(self))[f.name]
            if annotation is float and _type_ok(value, int):
                object.__setattr__(self, f.name, float(value))  # frozen: set once, here
            elif not _type_ok(value, annotation):
                _fail(f"{self._section}.{f.name}", value, f"a value of type {f.type}")
        self.validate()
        for f in dataclasses.fields(self):  # after validate(): its messages name the bounds
            if isinstance(value := getattr(self, f.name), float):
                check_finite(f"{self._section}.{f.name}", value)

    def _check(self, name: str, ok: bool, expected: str) -> None:
        if not ok:
            _fail(f"{self._section}.{name}", getattr(self, name), expected)


MODELS = ("vanilla", "recurrent", "basic_ssm", "frost")
BACKBONES = ("resnet", "vit")
LEAKY_UPDATES = ("leaky", "leaky_gated")  # the interpolating forms (docs/method.md section 5.4)
UPDATES = ("canonical", "convex", "gated") + LEAKY_UPDATES
ALPHA_PARAMS = ("softplus", "exp", "sigmoid")
HURST_PARAMS = ("sigmoid", "free")  # learnable H = sigmoid(raw) in (0, 1), or H = raw (unbounded)
# the scale ladder (docs/method.md section 15): the paper's ResNet structure at widths 32, 64, 128 (on a
# CPU) and 256 (the paper's width, on a GPU; not the cifar size, whose recipe is the paper's)
LADDER_WIDTHS = (32, 64, 128, 256)
LADDER_SIZES = tuple(f"ladder{w}" for w in LADDER_WIDTHS)
SIZES = ("smoke", "demo", *LADDER_SIZES, "paper", "cifar")
RANK_PAIRS = ("global", "per_step")
SKETCH_WINDOWS = ("epoch", "run")
# what a directly trained halting head predicts (docs/method.md section 14, the variant beyond the
# paper): "none" (FROST's ranking losses or PonderNet's train it, or nothing does), or a per-step
# binary target read off the detached readouts: the step's prediction is correct ("correct"), equals
# the final step's ("settled"), or stopping there loses nothing a later step would gain ("safe")
HALT_TARGETS = ("none", "correct", "settled", "safe")
CALIBRATION_SOURCES = ("last_epoch", "val", "last_epoch+val")
# Fields that say where and how fast a run happens, not what it learns: left out of identity().
WHERE_FIELDS = ("data.root", "data.download", "train.device", "train.num_workers", "train.eval_batch_size",
                "train.compile")


def default_alpha_param(update: str) -> str:
    """The alpha map of ``model.alpha_param="auto"``: sigmoid for the leaky forms (alpha is an
    interpolation weight in (0, 1)), softplus, as before they existed, for the residual forms."""
    return "sigmoid" if update in LEAKY_UPDATES else "softplus"


@dataclass(frozen=True)  # validated once, on construction: nothing changes it after
class DataConfig(_Validated):
    _section = "data"
    name: str = "digits"  # a key of frost_nb.data.prepare.DATASETS
    root: str | None = None  # data root: this, then $FROST_DATA, then <repo>/data
    val_fraction: float = 0.1  # seeded held-out part of the training split (threshold calibration)
    split_seed: int = 0
    augment: bool = True  # the usual augmentation of the set, drawn per image
    download: bool = True  # allow torchvision's download after local copies are tried
    limit: int | None = None  # keep only the first `limit` images of each split (quick runs)

    def validate(self) -> None:
        from .data.datasets import DATASETS

        self._check("name", self.name in DATASETS, f"one of {sorted(DATASETS)}")
        self._check("val_fraction", 0.0 <= self.val_fraction < 1.0, "a fraction in [0, 1)")
        check_non_negative_int("data.split_seed", self.split_seed, what="a seed", high=SEED_MAX)
        self._check("limit", self.limit is None or self.limit > 0, "None or a positive count")


@dataclass(frozen=True)  # validated once, on construction: nothing changes it after
class ModelConfig(_Validated):
    _section = "model"
    name: str = "frost"  # vanilla | recurrent | basic_ssm | frost (docs/method.md section 3)
    backbone: str = "resnet"  # resnet | vit
    in_channels: int = 1  # the defaults: demo size on digits (make_config("demo", "digits"))
    image_size: int = 8
    num_classes: int = 10
    steps: int = 16  # T: applications of the transition block
    width: int = 64  # state channels (resnet) or token dimension (vit)
    # resnet family
    bottleneck: int = 16  # inner width of the bottleneck branch
    dilation: int = 2  # of the branch's 3x3 convolution (no pooling inside the recurrence)
    stem_stride: int = 1  # total downsampling of the stem (1: 8x8 states from 8 px digits)
    norm_groups: int = 8  # GroupNorm: no running statistics in a shared block (docs/method.md section 12)
    # vit family
    patch_size: int = 2
    heads: int = 4
    mlp_ratio: float = 2.0
    # state-space maps B, C, D (basic_ssm and frost)
    bcd_kernel: int = 1  # kernel size of the B, C, D convolutions (resnet); vit uses linear maps
    bcd_hidden: int = 0  # 0: one linear map each; >0: a two-layer map with this hidden width
    init_state: str = "embedding"  # h_0 = e ("embedding") or zeros ("zeros"); the paper is silent
    update: str = "leaky"  # UPDATES: docs/method.md sections 4, 5, 13 (leaky: grids.ADOPTED_BUNDLE)
    alpha_param: str = "auto"  # ALPHA_PARAMS, or "auto": default_alpha_param, resolved on construction
    alpha_init: float = 0.5  # initial value of alpha (the raw parameter is its inverse)
    hurst: float = 0.5  # H, fixed by default
    learn_hurst: bool = False
    # learn_hurst only: H = sigmoid(raw) in (0, 1), or "free": H = raw ("a learnable H diverges")
    hurst_param: str = "sigmoid"
    # leaky forms only: A_a(h) = alpha^(1-H) A(alpha^H h), B_a = alpha B in the bracket (section 5.4)
    scaled_inside: bool = False
    halt_norm: bool = True  # halting head on LayerNorm(GAP(h_t)), not the raw GAP (section 6.1)
    # vanilla only: steps per distinct branch, each over consecutive steps ("5,11": branch 0 makes steps
    # 1-5, branch 1 steps 6-16; the block-recurrent student, docs/method.md section 16); "": one per step
    branch_steps: str = ""

    def validate(self) -> None:
        for name, choices in (("name", MODELS), ("backbone", BACKBONES), ("update", UPDATES),
                              ("alpha_param", ("auto",) + ALPHA_PARAMS), ("hurst_param", HURST_PARAMS)):
            self._check(name, getattr(self, name) in choices, f"one of {choices}")
        for name in ("in_channels", "image_size", "num_classes", "steps", "width", "bottleneck",
                     "dilation", "stem_stride", "norm_groups", "patch_size", "heads", "bcd_kernel"):
            self._check(name, getattr(self, name) >= 1, "a positive integer")
        self._check("num_classes", self.num_classes >= 2, "at least 2 classes")
        self._check("bcd_kernel", self.bcd_kernel % 2 == 1, "an odd kernel size (shape-preserving)")
        self._check("bcd_hidden", self.bcd_hidden >= 0, "0 or a positive width")
        self._check("mlp_ratio", self.mlp_ratio > 0, "a positive ratio")
        self._check("init_state", self.init_state in ("embedding", "zeros"), "'embedding' or 'zeros'")
        if self.alpha_param == "auto":  # resolved here: to_dict and identity() never see "auto"
            object.__setattr__(self, "alpha_param", default_alpha_param(self.update))
        upper = 1.0 if self.alpha_param == "sigmoid" else float("inf")
        self._check("alpha_init", 0.0 < self.alpha_init < upper, f"a value in (0, {upper})")
        self._check("hurst", 0.0 <= self.hurst <= 1.0, "a Hurst exponent in [0, 1]")
        self._check("hurst_param", self.hurst_param == "sigmoid" or self.learn_hurst,
                    "'sigmoid' unless model.learn_hurst (a fixed H has no parameterisation)")
        if self.learn_hurst and self.hurst_param == "sigmoid":  # sigmoid(raw) cannot start at 0 or 1
            self._check("hurst", 0.0 < self.hurst < 1.0, "a value in (0, 1) when model.learn_hurst")
        leaky = self.update in LEAKY_UPDATES
        self._check("scaled_inside", leaky or not self.scaled_inside, f"False unless model.update is one "
                    f"of {LEAKY_UPDATES} (the other forms fix their operators)")
        # with the plain A and B in the bracket H enters nowhere: a learnable H would get no gradient
        self._check("learn_hurst", not (self.learn_hurst and leaky and not self.scaled_inside),
                    f"False with model.update in {LEAKY_UPDATES} unless model.scaled_inside=True "
                    "(H enters only through the scaled operators)")
        self._check("stem_stride", self.stem_stride <= 3 or self.stem_stride % 4 == 0,
                    "1, 2, 3 or a multiple of 4")
        multiples = ((("width", "norm_groups"), ("bottleneck", "norm_groups"), ("image_size", "stem_stride"))
                     if self.backbone == "resnet" else (("width", "heads"), ("image_size", "patch_size")))
        for name, of in multiples:
            self._check(name, getattr(self, name) % getattr(self, of) == 0, f"a multiple of model.{of}")
        sizes, half = parse_branch_steps(self.branch_steps), self.steps // 2
        self._check("branch_steps", sizes == () or sizes is not None and sum(sizes) == self.steps,
                    f"step counts >= 1 separated by commas that sum to model.steps={self.steps}, e.g. "
                    f"'{half},{self.steps - half}', or '' for one branch per step")
        self._check("branch_steps", self.name == "vanilla" or not self.branch_steps,
                    "'' unless model.name is 'vanilla' (the weight-tied families have one branch)")
        # one spelling per model, so that identity() compares models: all ones is vanilla's ""
        object.__setattr__(self, "branch_steps", "" if set(sizes) == {1} else ",".join(map(str, sizes)))

    @property
    def branch_ranges(self) -> tuple[tuple[int, int], ...]:
        """The steps each distinct branch makes, (start, stop) with 0-based t in start..stop-1:
        one branch per step (vanilla), one for all (the weight-tied families), or ``branch_steps``."""
        if self.name != "vanilla":
            return ((0, self.steps),)
        sizes = parse_branch_steps(self.branch_steps) or (1,) * self.steps
        return tuple((sum(sizes[:i]), sum(sizes[:i + 1])) for i in range(len(sizes)))


def parse_branch_steps(text: str) -> tuple[int, ...] | None:
    """``model.branch_steps`` as step counts ("5,11" -> (5, 11); "" -> ()), None when it is not
    a list of positive integers."""
    parts = [p.strip() for p in text.split(",")] if text.strip() else []
    return tuple(map(int, parts)) if all(p.isascii() and p.isdigit() and int(p) >= 1 for p in parts) else None


def is_run_name(text: str) -> bool:
    """Whether ``text`` is a run name, two plain folder names GRID/LABEL (``runs.check_name``'s test)."""
    parts = text.split("/")
    return len(parts) == 2 and all(p and p not in (".", "..") and "\\" not in p for p in parts)


def _follow_update(old: ModelConfig, update: str) -> str:
    """alpha_param for ``old`` with its form changed to ``update``: an alpha map that was the old
    form's default (not chosen) becomes the new form's ("auto"); a chosen one stays."""
    follows = update != old.update and old.alpha_param == default_alpha_param(old.update)
    return "auto" if follows else old.alpha_param


def replace_model(cfg: ModelConfig, **fields: Any) -> ModelConfig:
    """``dataclasses.replace`` for a ModelConfig, except that an alpha map left at its form's
    default follows a change of ``update`` (as in RunConfig.replace and make_config)."""
    if "update" in fields and "alpha_param" not in fields:
        fields["alpha_param"] = _follow_update(cfg, fields["update"])
    return dataclasses.replace(cfg, **fields)


@dataclass(frozen=True)  # validated once, on construction: nothing changes it after
class LossConfig(_Validated):
    _section = "loss"
    ranking: bool = True  # False: task loss only (the paper's baselines)
    rank_frac: float = 0.5  # of the N x T losses in each of the easy and hard sets (grids.RANK_FRAC_VALUES)
    rank_pairs: str = "global"  # sets over all N x T entries, or "per_step": within each (method.md 13)
    margin: float = 0.2
    lambda_rel: float = 1.0
    lambda_abs: float = 0.1
    rank_grad_to_backbone: bool = True  # does the halting loss's gradient reach the backbone? (ambiguous)
    label_smoothing: float = 0.0
    ponder: bool = False  # PonderNet (Banino et al., 2021) in place of the ranking losses (section 10)
    ponder_prior: float = 0.125
    ponder_beta: float = 0.01
    # beyond the paper (docs/method.md section 14); the defaults are FROST's own recipe
    deep_supervision: float = 0.0  # weight of the mean over steps of the per-step task loss (0: final only)
    distill: float = 0.0  # weight of KL(stopgrad softmax(y_T) || softmax(y_t)), mean over t < T
    halt_target: str = "none"  # HALT_TARGETS: a BCE target for the halting head instead of ranking
    lambda_halt: float = 1.0  # weight of that BCE
    # block-recurrent distillation (docs/method.md section 16): the teacher, a finished run GRID/LABEL
    # (the local store, then outputs/runs/), and the weights of the terms that match it (read with it)
    teacher: str | None = None
    teacher_state: float = 1.0  # the per-step state error, normalised by the teacher state's norm
    teacher_kl: float = 1.0  # KL(teacher's final-step softmax || the student's)
    raptor: bool = False  # Raptor's schedule (training.forward_loss): no task loss, the class head frozen

    def validate(self) -> None:
        self._check("rank_frac", 0.0 < self.rank_frac <= 0.5, "a fraction in (0, 0.5]")
        self._check("rank_pairs", self.rank_pairs in RANK_PAIRS, f"one of {RANK_PAIRS}")
        check_range("loss.margin", self.margin, 0.0, LOSS_WEIGHT_MAX, what="a margin")
        for name in ("lambda_rel", "lambda_abs", "ponder_beta", "deep_supervision", "distill", "lambda_halt",
                     "teacher_state", "teacher_kl"):
            check_range(f"loss.{name}", getattr(self, name), 0.0, LOSS_WEIGHT_MAX, what="a loss weight")
        self._check("label_smoothing", 0.0 <= self.label_smoothing < 1.0, "a value in [0, 1)")
        self._check("ponder", not (self.ponder and self.ranking), "False while loss.ranking is on "
                    "(PonderNet's loss replaces the ranking losses: set loss.ranking=False with it)")
        self._check("ponder_prior", 0.0 < self.ponder_prior < 1.0, "a halting probability in (0, 1)")
        self._check("teacher", self.teacher is None or is_run_name(self.teacher),
                    "None or a run name GRID/LABEL, e.g. 'cifar100-demo-families/vanilla-seed0'")
        self._check("raptor", not self.raptor or self.teacher is not None, "False without loss.teacher")
        self._check("halt_target", self.halt_target in HALT_TARGETS, f"one of {HALT_TARGETS}")
        self._check("halt_target", self.halt_target == "none" or not (self.ranking or self.ponder),
                    "'none' while loss.ranking or loss.ponder is on (a target trains the head in their "
                    "place: set loss.ranking=False with it)")

    @property
    def halting_trained(self) -> bool:
        """Whether a loss trains the halting head (the ranking losses, PonderNet's, or a halt_target)."""
        return self.ranking or self.ponder or self.halt_target != "none"

    @property
    def score_halting(self) -> bool:
        """Whether the halting score is trained to be thresholded at a KLL quantile (FROST's rule):
        by the ranking losses or by a direct target (``halt_target``), not by PonderNet's loss."""
        return self.ranking or self.halt_target != "none"


@dataclass(frozen=True)  # validated once, on construction: nothing changes it after
class HaltingConfig(_Validated):
    _section = "halting"
    sketch_k: int = 200  # KLL size (rank error about 1.3% at 200)
    calibrate_on: str = "last_epoch+val"  # which halting scores feed the sketch (docs/method.md section 7)
    # "epoch": a fresh sketch every epoch; "run": one over every epoch's sources (docs/method.md 5.5, 7)
    sketch_window: str = "run"

    def validate(self) -> None:
        self._check("sketch_k", 8 <= self.sketch_k <= 65535, "a KLL size in [8, 65535]")
        self._check("calibrate_on", self.calibrate_on in CALIBRATION_SOURCES, f"one of {CALIBRATION_SOURCES}")
        self._check("sketch_window", self.sketch_window in SKETCH_WINDOWS, f"one of {SKETCH_WINDOWS}")


@dataclass(frozen=True)  # validated once, on construction: nothing changes it after
class TrainConfig(_Validated):
    _section = "train"
    epochs: int = 30  # the defaults: demo size on digits (about a minute on a 2-core CPU)
    batch_size: int = 64
    eval_batch_size: int = 512
    optimizer: str = "adamw"  # sgd | adamw
    lr: float = 5e-3
    weight_decay: float = 0.05
    momentum: float = 0.9
    warmup_epochs: float = 1.0  # linear warm-up, then cosine decay to zero (per optimiser step)
    grad_clip: float = 0.0  # 0: off
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | mps
    amp: str = "auto"  # auto (bf16 on CUDA) | bf16 | off
    channels_last: str = "auto"  # auto (off: no GPU measured a gain yet) | on | off
    compile: str = "auto"  # torch.compile of the training step: auto (on CUDA, one process) | on | off
    num_workers: int = 0  # DataLoader workers for folder data sets (ImageNet-100)
    # every this many optimiser steps, record the cosine between the task and ranking gradients
    # (losses.gradient_conflict; extra passes, the trained weights unchanged); 0: never
    diagnostics_every: int = 0

    def validate(self) -> None:
        self._check("epochs", self.epochs >= 1, "at least 1 epoch")
        self._check("batch_size", self.batch_size >= 1, "a positive batch size")
        self._check("eval_batch_size", self.eval_batch_size >= 1, "a positive batch size")
        self._check("optimizer", self.optimizer in ("sgd", "adamw"), "'sgd' or 'adamw'")
        check_range("train.lr", self.lr, 0.0, LR_MAX, what="a learning rate", low_open=True)
        self._check("weight_decay", self.weight_decay >= 0, "a non-negative weight decay")
        self._check("momentum", 0 <= self.momentum < 1, "a momentum in [0, 1)")
        self._check("warmup_epochs", 0 <= self.warmup_epochs <= self.epochs, "between 0 and train.epochs")
        self._check("grad_clip", self.grad_clip >= 0, "0 (off) or a positive norm")
        check_non_negative_int("train.seed", self.seed, what="a seed", high=SEED_MAX)
        for name, choices in (("device", ("auto", "cpu", "cuda", "mps")), ("amp", ("auto", "bf16", "off")),
                              ("channels_last", ("auto", "on", "off")), ("compile", ("auto", "on", "off"))):
            self._check(name, getattr(self, name) in choices, f"{', '.join(choices[:-1])} or {choices[-1]}")
        self._check("num_workers", self.num_workers >= 0, "a non-negative count")
        self._check("diagnostics_every", self.diagnostics_every >= 0, "0 (off) or a step count")


# A field added later must default to the behaviour from before it: a stored config that lacks it
# (runs.find_run, checkpoint.load_model) reads the default, so the run is still what it was.
@dataclass(frozen=True)  # validated once, on construction: nothing changes it after
class RunConfig:
    """Everything that defines one training run (and so one cached model)."""

    size: str = "demo"  # every default together: make_config("demo", "digits"), what make demo trains
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    halting: HaltingConfig = field(default_factory=HaltingConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            _fail("size", self.size, f"one of {SIZES}")
        if self.loss.teacher is not None and self.model.name != "vanilla":
            _fail("loss.teacher", self.loss.teacher, "None unless model.name is 'vanilla' (a student is a "
                  "vanilla model with k distinct branches, model.branch_steps)")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """Every setting as ``section.field -> value`` ("size" first), as ``frost_nb config`` shows it."""
        d = self.to_dict()
        return {"size": d.pop("size"), **{f"{section}.{name}": value for section, fields in d.items()
                                          for name, value in fields.items()}}

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        sections = {k: v for k, v in _field_types(cls).items() if k != "size"}  # name -> dataclass
        if unknown := set(d) - set(sections) - {"size"}:
            raise ConfigError(f"unknown config sections {sorted(unknown)}; expected {sorted(sections)}")
        kwargs: dict[str, Any] = {"size": d.get("size", RunConfig.size)}
        for name, klass in sections.items():
            values = d.get(name, {})  # a field it lacks (stored before the field existed) reads its default
            names = {f.name for f in dataclasses.fields(klass)}
            if bad := set(values) - names:
                raise ConfigError(f"unknown {name} parameters {sorted(bad)}; known: {sorted(names)}")
            kwargs[name] = klass(**values)
        return cls(**kwargs)

    def identity(self) -> dict[str, Any]:
        """Everything that changes the trained model: the config without WHERE_FIELDS. Two configs
        with the same identity are the same run (``runs.find_run``)."""
        d = self.to_dict()
        for section, _, name in (dotted.partition(".") for dotted in WHERE_FIELDS):
            d[section].pop(name)
        return d

    def replace(self, **overrides: Any) -> RunConfig:
        """A copy with dotted overrides, e.g. ``replace(**{"train.epochs": 3})``."""
        d = self.to_dict()
        for dotted, value in overrides.items():
            section, _, name = dotted.partition(".")
            if not name and section == "size":
                d["size"] = value
            elif not name:
                raise ConfigError(f"override {dotted!r} must look like 'section.field'")
            elif not isinstance(d.get(section), dict):
                raise ConfigError(f"override {dotted!r}: unknown section {section!r}")
            elif name not in d[section]:
                raise ConfigError(f"override {dotted!r}: unknown parameter; known: {sorted(d[section])}")
            else:
                d[section][name] = value
        if "model.alpha_param" not in overrides:
            d["model"]["alpha_param"] = _follow_update(self.model, d["model"]["update"])
        return RunConfig.from_dict(d)


def parse_settings(pairs) -> dict[str, Any]:
    """``--set SECTION.FIELD=VALUE`` pairs as overrides: JSON values when they parse, else strings; a
    text setting keeps a number as written (``model.branch_steps=16`` is "16")."""
    text = {"size"} | {f"{s}.{name}" for s, cls in _field_types(RunConfig).items() if s != "size"
                       for name, hint in _field_types(cls).items() if hint in (str, str | None)}
    overrides = {}
    for pair in pairs:
        key, sep, value = (part.strip() for part in pair.partition("="))
        if not sep:
            raise ConfigError(f"--set {pair!r}: expected section.field=value, e.g. train.lr=0.1")
        try:
            parsed = json.loads(value)
        except (ValueError, RecursionError):  # not JSON (or an int past Python's 4,300 digits, or too deep)
            parsed = value
        overrides[key] = value if key in text and isinstance(parsed, (int, float)) else parsed  # bools too
    return overrides


def config_difference(a: RunConfig, b: RunConfig, most: int = 3) -> str:
    """The first ``most`` settings whose values differ in the identities of ``a`` and ``b``, as text."""
    fa, fb = ({k: v for k, v in c.flat().items() if k not in WHERE_FIELDS} for c in (a, b))
    return ", ".join([f"{k} {fa[k]!r} -> {fb[k]!r}" for k in fa if fa[k] != fb[k]][:most]) or "none"


# The presets: one row per (size, data set, backbone), written as the changes to one of two full
# rows (_DEMO, _PAPER). "*" is any other data set of the size, "any" either backbone. The data set's
# facts (channels, image size, classes) come from frost_nb.data.prepare.DATASETS.
PRESET_FIELDS = ("model.steps", "model.width", "model.bottleneck", "model.stem_stride", "model.norm_groups",
                 "model.patch_size", "model.heads", "model.mlp_ratio", "model.bcd_kernel", "model.bcd_hidden",
                 "data.augment", "train.epochs", "train.batch_size", "train.optimizer", "train.lr",
                 "train.weight_decay", "train.momentum", "train.warmup_epochs", "train.num_workers", "train.amp")
Preset = collections.namedtuple("Preset", [f.split(".")[1] for f in PRESET_FIELDS])  # a row, its fields named
# demo: a CPU, minutes; the dataclasses' defaults are its digits row, which the other demo rows
# change only where written. No augmentation on the CPU data sets: small models underfit in such
# short runs (docs/results.md, "Setting")
_DEMO = Preset(steps=16, width=64, bottleneck=16, stem_stride=1, norm_groups=8, patch_size=2, heads=4,
               mlp_ratio=2.0, bcd_kernel=1, bcd_hidden=0, augment=True, epochs=30, batch_size=64,
               optimizer="adamw", lr=5e-3, weight_decay=0.05, momentum=0.9, warmup_epochs=1.0, num_workers=0,
               amp="auto")
# paper, ResNet-50 family: 16 bottleneck branches at 56x56; B, C, D 256 -> 896 -> 256 (+1.38M over
# recurrent, as Table 3; docs/parameters.md shows why no setting also fits its FLOPs); the other
# paper and cifar rows change it only where written
_PAPER = Preset(steps=16, width=256, bottleneck=64, stem_stride=4, norm_groups=32, patch_size=16, heads=12,
                mlp_ratio=4.0, bcd_kernel=1, bcd_hidden=896, augment=True, epochs=100, batch_size=256,
                optimizer="sgd", lr=0.1, weight_decay=5e-4, momentum=0.9, warmup_epochs=5.0, num_workers=8,
                amp="auto")
# CIFAR-10's model with 100 classes: about 45 minutes alone on the 2-core CPU
# (benchmarks/train_throughput.py --size demo --dataset cifar100: 423 images/s, 2 threads)
_DEMO_CIFAR100 = _DEMO._replace(stem_stride=2, patch_size=4, augment=False, epochs=20, batch_size=128)
PRESETS: dict[tuple[str, str, str], Preset] = {
    # smoke: CI, seconds. AdamW: on digits, 15 epochs reach about 0.9 test accuracy, SGD (lr 0.05) 0.7
    ("smoke", "*", "any"): _DEMO._replace(steps=4, width=16, bottleneck=8, norm_groups=4, heads=2, epochs=10),
    ("demo", "digits", "any"): _DEMO,
    # 28 px -> 7x7 states (ResNet stem); about 15 min on the 2-core CPU
    ("demo", "fashion-mnist", "any"): _DEMO._replace(stem_stride=4, patch_size=4, augment=False, epochs=15,
                                                     batch_size=128),
    # 16x16 states; about an hour
    ("demo", "cifar10", "any"): _DEMO_CIFAR100._replace(epochs=18),
    ("demo", "cifar100", "any"): _DEMO_CIFAR100,
    ("demo", "*", "any"): _DEMO._replace(stem_stride=4, patch_size=4, epochs=10, batch_size=128),
    ("paper", "*", "resnet"): _PAPER,
    # paper, ViT-B/16 family: 12 steps, 768-d tokens; B, C, D 768 -> 2816 -> 768 (+12.99M; Table 3: 12.98M)
    ("paper", "*", "vit"): _PAPER._replace(steps=12, width=768, bcd_hidden=2816, optimizer="adamw", lr=1e-3,
                                           weight_decay=0.05),
    # cifar: the paper's ResNet-50-family branch and B, C, D at CIFAR's resolution (16x16 states) for a
    # GPU: crops and flips, bf16 and torch.compile on CUDA ("auto"; channels-last stays off until a GPU
    # measurement shows it helps: training.use_channels_last); SGD as for CIFAR ResNets
    ("cifar", "*", "any"): _PAPER._replace(stem_stride=2, patch_size=2, heads=8, epochs=60, warmup_epochs=2.0,
                                           num_workers=0),
    # the scale ladder (docs/method.md section 15): the cifar row's structure (bottleneck width / 4, two-layer
    # B, C, D of hidden 3.5 x width, 8 channels per norm group, 16 steps, 16x16 states) at other widths,
    # trained with the demo CIFAR-100 row's recipe, so that the ladder varies size alone; bf16 autocast on
    # every device (2.6 times fp32's images/s on a 2-core CPU, compiled: docs/scaling.md)
    **{(f"ladder{w}", "*", "any"): _DEMO_CIFAR100._replace(width=w, bottleneck=w // 4, norm_groups=w // 8,
                                                          bcd_hidden=w * 7 // 2, amp="bf16")
       for w in LADDER_WIDTHS},
}
DEFAULT_DATASETS = {"smoke": "digits", "demo": "fashion-mnist", **{s: "cifar100" for s in LADDER_SIZES},
                    "paper": "imagenet100", "cifar": "cifar100"}


def preset(size: str, dataset: str, backbone: str = "resnet") -> dict[str, Any]:
    """The preset row of ``(size, dataset, backbone)`` as dotted values (PRESETS: the row of the
    data set, else the size's "*" row; the backbone's, else "any")."""
    for key in ((size, dataset, backbone), (size, dataset, "any"), (size, "*", backbone), (size, "*", "any")):
        if key in PRESETS:
            return dict(zip(PRESET_FIELDS, PRESETS[key]))
    raise ConfigError(f"no preset for size {size!r}: add its rows to config.PRESETS")


def make_config(size: str = "demo", dataset: str | None = None, model: str = "frost",
                backbone: str = "resnet", **overrides: Any) -> RunConfig:
    """The config of one size, data set, model and backbone (its PRESETS row), with dotted overrides.

    >>> make_config("smoke").model.steps
    4
    >>> make_config("demo", "cifar10", "recurrent", **{"train.epochs": 3}).train.epochs
    3
    """
    from .data.datasets import DATASETS

    if size not in SIZES:
        _fail("size", size, f"one of {SIZES}")
    if "data.name" in overrides:  # the data set decides the model's input and classes
        if dataset is not None and dataset != overrides["data.name"]:
            _fail("data.name", overrides["data.name"], f"the dataset argument {dataset!r} or nothing")
        dataset = overrides["data.name"]
    name = DEFAULT_DATASETS[size] if dataset is None else dataset
    if name not in DATASETS:
        _fail("dataset", name, f"one of {sorted(DATASETS)}")
    info = DATASETS[name]
    values = {**preset(size, name, backbone), "data.name": name, "model.in_channels": info.channels,
              "model.image_size": info.image_size, "model.num_classes": info.num_classes,
              "model.name": model, "model.backbone": backbone}
    if info.image_size <= 8 and size != "paper":
        values.update({"model.stem_stride": 1, "model.patch_size": 2})  # 8x8 states on 8 px images
    if model != "frost":
        values["loss.ranking"] = False  # baselines: task loss only (docs/method.md section 6)
    return RunConfig().replace(**{**values, **overrides, "size": size})
