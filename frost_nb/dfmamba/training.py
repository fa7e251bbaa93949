"""Forecasting runs (``python -m frost_nb forecast``): DF-Mamba and the linear baselines on ETTh1/ETTh2,
stored in ``forecast/GRID/LABEL`` of each run store with ``runs.py``'s helpers, found by their config's
identity, checkpointed after every epoch and resumed. The loop: AdamW (no decay on biases, norms, Mamba's
A and D), the MSE (DF-Mamba's ``total_loss`` adds its terms), shuffled batches, the last short one
dropped, early stopping on the validation MSE, the best epoch's weights tested on every test window.
``PRESETS``: dfmamba as appendix A.10.1 (``TrainSection``'s defaults; its 200 epochs capped), dlinear and
rlinear as their repositories' ETTh2 scripts (cure-lab/LTSF-Linear, plumprc/RTSF)."""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import torch
import torch.nn.functional as F

from .. import training as image_training
from ..checkpoint import CheckpointError, lean_state, load_checkpoint, save_checkpoint
from ..config import SEED_MAX, ConfigError, _Validated, parse_settings
from ..paths import DamagedInput, atomic_path, check_writable, committed_runs_dir, one_line, run_stores, shown_path
from ..runs import check_name, damaged_run_file, hardware, read_metrics, run_folder, store_run, write_json
from .baselines import DLinear, DLinearConfig, RLinear, RLinearConfig
from .data import COLUMNS, FILES, SPLITS, Windows, load_series, windows
from .model import DFMamba, DFMambaConfig, total_loss

log = logging.getLogger("frost_nb")
STORE, CONFIG, WEIGHTS, METRICS = "forecast", "config.json", "model.pt", "metrics.json"
CLASSES = {"dfmamba": (DFMamba, DFMambaConfig), "dlinear": (DLinear, DLinearConfig),
           "rlinear": (RLinear, RLinearConfig)}
MODELS = tuple(CLASSES)
WHERE_FIELDS = ("data.root", "train.eval_batch_size")  # not in a run's identity
INDEX_COLUMNS = ("run", "dataset", "model", "horizon", "seed", "epochs_run", "best_epoch",
                 "capped_before_convergence", "test_mse", "test_mae", "params", "minutes", "hardware")


@dataclass(frozen=True)
class DataSection(_Validated):
    _section = "data"
    name: str = "etth2"
    root: str | None = None  # the data root: this, then $FROST_DATA, then <repo>/data
    lookback: int = 336
    horizon: int = 96

    def validate(self) -> None:
        self._check("name", self.name in FILES, f"one of {sorted(FILES)}")
        self._check("lookback", self.lookback >= 1 and self.horizon >= 1, "positive look-back and horizon")


@dataclass(frozen=True)
class TrainSection(_Validated):
    _section = "train"
    epochs: int = 10  # the cap
    batch_size: int = 64
    lr: float = 1e-4
    weight_decay: float = 0.05
    grad_clip: float = 1.0  # 0: off
    schedule: str = "cosine"  # cosine: warm-up, cosine decay (per step); halve: lradj type1 (per epoch)
    warmup: float = 0.1  # cosine: the share of the capped epochs warmed up
    patience: int = 10
    seed: int = 0
    eval_batch_size: int = 256

    def validate(self) -> None:
        for name in ("epochs", "batch_size", "eval_batch_size", "patience"):
            self._check(name, getattr(self, name) >= 1, "a positive integer")
        for name in ("weight_decay", "grad_clip"):
            self._check(name, getattr(self, name) >= 0, "non-negative")
        self._check("seed", 0 <= self.seed <= SEED_MAX, f"a seed >= 0 and <= {SEED_MAX}")  # torch's range
        self._check("lr", 0 < self.lr <= 10, "a learning rate in (0, 10]")
        self._check("schedule", self.schedule in ("cosine", "halve"), "'cosine' or 'halve'")
        self._check("warmup", 0 <= self.warmup <= 1, "a share of the epochs in [0, 1]")


_LINEAR = dict(weight_decay=0.0, grad_clip=0.0, schedule="halve")
# DF-Mamba's epoch cap: 45 minutes on one CPU thread; an epoch takes 17.3 min at H = 96 (docs/df-mamba.md)
PRESETS = {"dfmamba": TrainSection(epochs=2),
           "dlinear": TrainSection(epochs=10, batch_size=32, lr=0.05, patience=3, **_LINEAR),
           "rlinear": TrainSection(epochs=15, batch_size=256, lr=0.005, patience=10, **_LINEAR)}


@dataclass(frozen=True)
class ForecastConfig:
    """One run: ``data``, ``model`` (a name in MODELS), ``arch`` (that model's config; its lookback,
    horizon and channels, where it has them, are the data's) and ``train``."""

    data: DataSection
    model: str
    arch: Any
    train: TrainSection

    def to_dict(self) -> dict[str, Any]:
        return {"kind": STORE, "data": asdict(self.data), "train": asdict(self.train),
                "model": {"name": self.model, **asdict(self.arch)}}

    @classmethod
    def from_dict(cls, d: Any) -> ForecastConfig:  # a dict; anything else (a damaged file's) is a ConfigError
        if not isinstance(d, dict):
            raise ConfigError(f"not a forecasting run's config: a {type(d).__name__}, not a JSON object")
        if bad := [s for s in ("data", "model", "train") if not isinstance(d.get(s, {}), dict)]:
            raise ConfigError(f"forecasting config: its {', '.join(bad)} section is not a JSON object")
        model = dict(d.get("model", {}))
        name = model.pop("name", None)
        if d.get("kind") != STORE or name not in MODELS:
            raise ConfigError(f"not a forecasting run's config: kind {d.get('kind')!r}, model {name!r} "
                              f"(expected 'forecast' and one of {MODELS})")
        try:
            data, arch = DataSection(**d.get("data", {})), CLASSES[name][1]
            model |= {k: v for k, v in (("lookback", data.lookback), ("horizon", data.horizon),
                                        ("channels", len(COLUMNS))) if k in arch.__dataclass_fields__}
            return cls(data, name, arch(**model), TrainSection(**d.get("train", {})))
        except TypeError as err:  # an unknown field (the sections' own checks raise ConfigError)
            raise ConfigError(f"forecasting config: {err}") from err

    def identity(self) -> str:
        d = self.to_dict()
        for section, _, name in (where.partition(".") for where in WHERE_FIELDS):
            d[section].pop(name)
        return json.dumps(d, sort_keys=True)

    def replace(self, **overrides: Any) -> ForecastConfig:
        """A copy with dotted overrides: ``data.horizon``, ``model.<field>``, ``train.lr``, ..."""
        d = self.to_dict()
        for dotted, value in overrides.items():
            section, _, name = dotted.partition(".")
            if name not in d.get(section, {}) or section == "kind":
                raise ConfigError(f"override {dotted!r}: expected data.FIELD, model.FIELD or train.FIELD, "
                                  "with a known field")
            d[section][name] = value
        return ForecastConfig.from_dict(d)

    @property
    def variant(self) -> str:  # DF-Mamba's ablation (Table 2); "full" for every model
        return getattr(self.arch, "variant", "full")

    def windows(self, split: str, scale: int = 1) -> Windows:
        return windows(self.data.name, split, self.data.lookback, self.data.horizon, scale=scale,
                       root=self.data.root)

    def new_model(self, state: dict[str, torch.Tensor] | None = None) -> torch.nn.Module:
        model = CLASSES[self.model][0](self.arch)
        if state is not None:
            model.load_state_dict(state)  # float16 weights widened back to float32
        return model


def make_forecast_config(dataset: str = "etth2", model: str = "dfmamba", horizon: int = 96,
                         **overrides: Any) -> ForecastConfig:
    """``model`` on ``dataset`` at ``horizon`` (look-back 336): its defaults, its ``PRESETS``, overrides."""
    if model not in MODELS:
        raise ConfigError(f"model={model!r} is invalid: expected one of {MODELS}.")
    base = {"kind": STORE, "data": {"name": dataset, "horizon": horizon}, "model": {"name": model},
            "train": asdict(PRESETS[model])}
    return ForecastConfig.from_dict(base).replace(**overrides)


def training_loss(cfg: ForecastConfig, forecast, target: torch.Tensor) -> tuple[torch.Tensor, dict]:
    if cfg.model == "dfmamba":
        return total_loss(forecast, target, cfg.arch)
    mse = F.mse_loss(forecast.prediction, target)
    return mse, {"task": mse}


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: Windows, batch_size: int = 256, per_window: bool = False) -> dict:
    """MSE and MAE over every window, step and variable of ``data``; ``per_window``: each window's MSE
    too (what claim 20's block bootstrap resamples for a single seed)."""
    sums, each = torch.zeros(2, dtype=torch.float64), []
    for x, y in data.batches(batch_size):
        err = (model.eval()(x).prediction.float() - y).double()
        sums += torch.stack([err.square().sum(), err.abs().sum()])
        each += err.square().mean((1, 2)).tolist() if per_window else []
    mse, mae = (sums / (len(data) * data.horizon * data.channels)).tolist()
    return {"mse": mse, "mae": mae, **({"per_window": each} if per_window else {})}


@dataclass
class ForecastResult:
    model: torch.nn.Module | None  # None: a stored run kept without its weights
    metrics: dict[str, Any]
    config: ForecastConfig
    history: dict[str, Any] = field(default_factory=dict)
    folder: Path | None = None
    from_store: bool = False


class ForecastTrainer:
    """Trains ``cfg``'s model on the CPU, checkpointing to ``checkpoint`` after every epoch (and
    resuming from it when it holds the same unfinished run)."""

    _KEPT = ("epoch", "best_epoch", "best_val", "bad_epochs", "seconds", "best_model", "stopped", "history")

    def __init__(self, cfg: ForecastConfig, checkpoint: str | Path | None = None,
                 progress: bool | None = None) -> None:
        t = cfg.train
        self.cfg, self.progress, self.checkpoint = cfg, progress, checkpoint and Path(checkpoint)
        if self.checkpoint:  # before any work
            check_writable(self.checkpoint, "checkpoint", "pass the path of a .pt file in a writable folder")
        self.splits = {s: cfg.windows(s) for s in SPLITS}
        torch.manual_seed(t.seed)
        self.model = cfg.new_model()
        self.steps = max(1, len(self.splits["train"]) // t.batch_size)  # an epoch's; the short batch dropped
        self.optimizer = image_training.make_optimizer(self.model, SimpleNamespace(
            optimizer="adamw", lr=t.lr, weight_decay=t.weight_decay, momentum=0.0))
        total = t.epochs * self.steps
        factor = ((lambda s: 0.5 ** max(0, s // self.steps - 1)) if t.schedule == "halve" else
                  (lambda s: image_training.lr_factor(s, round(t.warmup * total), total)))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, factor)
        self.generator = torch.Generator().manual_seed(t.seed)
        self.epoch, self.best_epoch, self.best_val, self.bad_epochs, self.seconds = 0, 0, math.inf, 0, 0.0
        self.best_model, self.stopped = None, None  # stopped: "early" or "cap"
        self.history = {"val_mse": [], "train_loss": [], "seconds": [], "parts": {}}  # per epoch
        if self.checkpoint is not None and self.checkpoint.exists():
            self._resume(load_checkpoint(self.checkpoint))

    def cost(self) -> str:
        """Said before the run: its size, and a step's forward and backward pass timed on a new model."""
        t, train, left = self.cfg.train, self.splits["train"], self.cfg.train.epochs - self.epoch
        x, y = train.batch(torch.arange(min(t.batch_size, len(train))))
        with torch.random.fork_rng(devices=[]):  # the run's random numbers stay as they are
            model = self.cfg.new_model()
            for _ in range(2):  # the first warms up
                start = time.perf_counter()
                training_loss(self.cfg, model(x), y)[0].backward()
        step = time.perf_counter() - start
        return (f"cost: {sum(p.numel() for p in model.parameters()):,} parameters, {len(train):,} training "
                f"windows, {self.steps} steps of {t.batch_size} an epoch, at most {left} more epoch(s) "
                f"(patience {t.patience}); {step:.3f} s a step here: at most "
                f"{left * self.steps * step / 60:.1f} min of steps, and a validation pass each epoch")

    def fit(self) -> ForecastResult:
        """Train to the cap or the early stop: the model is then its best validation epoch's, with its test
        metrics."""
        from tqdm.auto import tqdm

        cfg, t, d, history = self.cfg, self.cfg.train, self.cfg.data, self.history
        show = image_training.show_progress(self.progress)
        bar = tqdm(total=t.epochs * self.steps, initial=self.epoch * self.steps, unit="step",
                   desc=f"{cfg.model} on {d.name}-{d.horizon}", disable=not show or bool(self.stopped))
        while self.stopped is None:
            start = time.perf_counter()
            loss = self._train_epoch(bar)
            val = evaluate(self.model, self.splits["val"], t.eval_batch_size)["mse"]
            self.epoch, self.seconds = self.epoch + 1, self.seconds + time.perf_counter() - start
            if val < self.best_val:
                self.best_val, self.best_epoch, self.bad_epochs = val, self.epoch, 0
                self.best_model = {k: v.clone() for k, v in self.model.state_dict().items()}
            else:
                self.bad_epochs += 1
            self.stopped = ("early" if self.bad_epochs >= t.patience else "cap" if self.epoch >= t.epochs
                            else None)
            for key, value in (("val_mse", val), ("train_loss", loss), ("seconds", self.seconds)):
                history[key].append(value)
            (bar.write if show else log.info)(
                f"epoch {self.epoch}/{t.epochs}: train loss {loss:.4f}, val MSE {val:.4f} (best "
                f"{self.best_val:.4f}, epoch {self.best_epoch}), {self.seconds:.0f} s so far")
            if self.stopped is None and self.checkpoint is not None:
                save_checkpoint(self.checkpoint, self._state(complete=False))
        bar.close()
        if self.best_model is not None:  # None: resumed from a finished checkpoint, whose model is the best
            self.model.load_state_dict(self.best_model)
        test, val = evaluate(self.model, self.splits["test"], t.eval_batch_size), history["val_mse"]
        metrics = {
            "dataset": d.name, "model": cfg.model, "variant": cfg.variant, "lookback": d.lookback,
            "horizon": d.horizon, "seed": t.seed, "test_mse": test["mse"], "test_mae": test["mae"],
            "test_windows": len(self.splits["test"]), "val_mse": self.best_val, "best_epoch": self.best_epoch,
            "epochs_run": self.epoch, "epoch_cap": t.epochs, "stopped": self.stopped,
            "val_mse_per_epoch": val, "train_seconds": self.seconds, "minutes": round(self.seconds / 60, 2),
            "params": sum(p.numel() for p in self.model.parameters()),
            # stopped by the cap while the validation MSE fell by more than 1% over the last two epochs
            # (or before three epochs: nothing shows convergence then)
            "capped_before_convergence": self.stopped == "cap" and (len(val) < 3 or val[-1] < 0.99 * val[-3]),
            "data_sha256": load_series(d.name, d.root).sha256}
        if self.checkpoint is not None:
            save_checkpoint(self.checkpoint, self._state(complete=True, metrics=metrics))
        log.info("%s on %s-%d: test MSE %.4f, MAE %.4f (best epoch %d of %d, %.1f min)", cfg.model, d.name,
                 d.horizon, test["mse"], test["mae"], self.best_epoch, self.epoch, self.seconds / 60)
        return ForecastResult(self.model.eval(), metrics, cfg, history)

    def _train_epoch(self, bar) -> float:
        cfg, t, model, parts = self.cfg, self.cfg.train, self.model.train(), {}
        order = torch.randperm(len(self.splits["train"]), generator=self.generator)
        for x, y in self.splits["train"].batches(t.batch_size, order, drop_last=len(order) >= t.batch_size):
            loss, terms = training_loss(cfg, model(x), y)
            for k, v in {"loss": loss, **terms}.items():
                parts[k] = parts.get(k, 0.0) + float(torch.as_tensor(v).detach())
            if not math.isfinite(parts["loss"]):
                raise image_training.TrainingError(
                    f"the loss became {float(loss)} in epoch {self.epoch + 1}; training stopped (the "
                    f"checkpoint of epoch {self.epoch} is intact). Lower train.lr (now {t.lr}) or set "
                    "train.grad_clip")
            image_training.optimizer_step(model, self.optimizer, loss, t.grad_clip)  # tests replace it
            self.scheduler.step()
            bar.update(1)
        for k, v in parts.items():  # the mean of each term of the loss (DF-Mamba's auxiliary ones)
            self.history["parts"].setdefault(k, []).append(v / self.steps)
        return parts["loss"] / self.steps

    def _state(self, complete: bool, metrics: dict | None = None) -> dict[str, Any]:
        return {"config": self.cfg.to_dict(), "model": self.model.state_dict(), "complete": complete,
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "rng": {"torch": torch.get_rng_state(), "data": self.generator.get_state()},
                "metrics": metrics or {}, **{k: getattr(self, k) for k in self._KEPT},
                **({"best_model": None} if complete else {})}

    def _resume(self, state: dict[str, Any]) -> None:
        if state.get("lean") or ForecastConfig.from_dict(state["config"]).identity() != self.cfg.identity():
            raise CheckpointError(f"checkpoint {self.checkpoint} is a lean export or belongs to another run: "
                                  "it cannot be resumed; pass another path or delete it")
        for part in ("model", "optimizer", "scheduler"):
            getattr(self, part).load_state_dict(state[part])
        torch.set_rng_state(state["rng"]["torch"])
        self.generator.set_state(state["rng"]["data"])
        for key in self._KEPT:
            setattr(self, key, state[key])
        log.info("resumed %s after epoch %d of %d", self.checkpoint, self.epoch, self.cfg.train.epochs)


# ---------------------------------------------------------------- the run store

def stores() -> tuple[Path, ...]:  # the local store's, then the committed runs' (what a clone has)
    return tuple(root / STORE for root in run_stores())


def is_forecast_run(folder: str | Path) -> bool:
    try:
        return json.loads((Path(folder) / CONFIG).read_text()).get("kind") == STORE
    except (OSError, ValueError, AttributeError):
        return False


def damaged(path: Path, problem: str, error: type[Exception] = CheckpointError) -> Exception:
    """``runs.damaged_run_file``'s line (the file, ``problem``, how to restore it) for ``path``, a damaged
    file of a stored forecasting run, as an ``error``."""
    return error(str(damaged_run_file(path, problem)))


def read_config(folder: Path) -> ForecastConfig:
    try:
        return ForecastConfig.from_dict(json.loads((folder / CONFIG).read_text()))
    except (OSError, ValueError) as err:  # ConfigError is a ValueError
        raise damaged(folder / CONFIG, f"unreadable forecasting run config ({one_line(err)})") from err


def _differences(theirs: ForecastConfig, ours: ForecastConfig, shown: int = 3) -> str:
    """The fields of both identities that differ, the model's name and the data first: ``FIELD THEIRS vs
    OURS``, ``shown`` of them and how many more (another model's own fields, and the data's copied into
    the model's, left out)."""
    a, b = ({f"{s}.{k}": v for s, section in json.loads(c.identity()).items() if isinstance(section, dict)
             for k, v in section.items()} for c in (theirs, ours))
    keys = sorted(k for k in a.keys() & b.keys() - {"model.lookback", "model.horizon"} if a[k] != b[k])
    keys.sort(key=lambda k: (k != "model.name", not k.startswith("data.")))
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return ", ".join(f"{k} {a[k]!r} vs {b[k]!r}" for k in keys[:shown]) + more


def stored_model(path: Path, state: dict[str, Any], cfg: ForecastConfig) -> torch.nn.Module:
    """The model of the checkpoint dict ``state`` read from ``path``, a run folder's weights, checked to be
    its config's run (``cfg``) and to fit it; else CheckpointError (load_model's, for the image runs)."""
    try:
        theirs = ForecastConfig.from_dict(state["config"])
    except ConfigError as err:
        raise damaged(path, f"a checkpoint whose own config is unreadable ({one_line(err)})") from err
    if theirs.identity() != cfg.identity():
        raise damaged(path, f"the weights of another run (its config against config.json: "
                            f"{_differences(theirs, cfg)})")
    try:
        return cfg.new_model(state["model"])
    except (RuntimeError, TypeError, ValueError) as err:  # load_state_dict's missing or misshapen weights
        raise damaged(path, f"weights that do not fit the run's config ({one_line(err)})") from err


def stored_runs(finished: bool = True) -> list[Path]:  # the local store's first
    return [p.parent for root in stores() for p in sorted(root.glob(f"*/*/{CONFIG}"))
            if not finished or (p.parent / METRICS).is_file()]


def find_run(cfg: ForecastConfig, finished: bool = True) -> Path | None:
    return next((f for f in stored_runs(finished) if read_config(f).identity() == cfg.identity()), None)


def load_run(folder: str | Path) -> ForecastResult:
    """The finished run in ``folder``: its config, metrics and (when kept) model, in eval mode."""
    folder, cfg = Path(folder), read_config(Path(folder))
    model = (stored_model(folder / WEIGHTS, load_checkpoint(folder / WEIGHTS), cfg).eval()
             if (folder / WEIGHTS).is_file() else None)
    return ForecastResult(model, read_metrics(folder), cfg, folder=folder, from_store=True)


def default_name(cfg: ForecastConfig) -> str:
    """DATASET-L336-HH/MODEL-seedN; an ablation DATASET-L336-HH-ablations/MODEL-VARIANT-seedN."""
    d, v = cfg.data, cfg.variant
    grid, label = f"{d.name}-L{d.lookback}-H{d.horizon}", cfg.model
    if v != "full":
        grid, label = f"{grid}-ablations", f"{label}-{v.lower()}"
    return f"{grid}/{label}-seed{cfg.train.seed}"


def train_or_load(cfg: ForecastConfig, *, name: str | None = None, retrain: bool = False,
                  progress: bool | None = None) -> ForecastResult:
    """``cfg``'s stored run, else trained now into the local store as ``name`` (GRID/LABEL; default
    ``default_name``), resuming its unfinished run; ``retrain``: train it again."""
    if not retrain and (found := find_run(cfg)) is not None:
        return load_run(found)
    folder = find_run(cfg, finished=False)
    if folder is None or folder.parent.parent != stores()[0]:
        label = check_name(name or default_name(cfg))
        taken = run_folder(f"{STORE}/{label}", local_first=True)
        if taken and read_config(taken).identity() != cfg.identity():
            raise ConfigError(f"the run name {label} holds another run ({shown_path(taken)}): pass --name")
        folder = stores()[0] / label
    if retrain:
        for file in (METRICS, WEIGHTS):
            (folder / file).unlink(missing_ok=True)
    write_json(folder / CONFIG, cfg.to_dict())
    trainer = ForecastTrainer(cfg, folder / WEIGHTS, progress)
    log.info("%s: %s", folder.relative_to(stores()[0]).as_posix(), trainer.cost())
    result = trainer.fit()
    result.metrics, result.folder = store_run(folder, {**result.metrics, "hardware": hardware("cpu")}), folder
    return result


def zero_shot(run: str | Path | ForecastResult, scales: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    """Table 14's protocol: the trained model, unchanged, on the test windows of the standardised series
    average-pooled by each factor of ``scales`` (``data.windows(scale=)``). {"scales", "mse", "mae",
    "windows"}, lists in the order of ``scales``, and with 1 and 4 among them "ratio", r = MSE(x4) / MSE(x1)
    (claim 22). ``run``: a run folder or a ``ForecastResult``; a stored run keeps the result in its
    metrics.json ("zero_shot", written atomically) and gives it back from there for the same scales."""
    result, scales = run if isinstance(run, ForecastResult) else load_run(run), [int(s) for s in scales]
    if not isinstance(kept := result.metrics.get("zero_shot", {}), dict):  # written only as an object
        problem = f"a zero_shot entry that is {json.dumps(kept, default=repr)[:40]}, not a JSON object"
        stored = result.folder is not None
        raise damaged(result.folder / METRICS, problem, DamagedInput) if stored else DamagedInput(problem)
    if kept.get("scales") == scales:
        return kept
    if result.model is None:
        raise CheckpointError(f"{shown_path(result.folder)} is stored without its weights: no zero-shot")
    data = [result.config.windows("test", s) for s in scales]
    errors = [evaluate(result.model, w, result.config.train.eval_batch_size) for w in data]
    out = {"scales": scales, "mse": [e["mse"] for e in errors], "mae": [e["mae"] for e in errors],
           "windows": [len(w) for w in data]}
    if 1 in scales and 4 in scales:
        out["ratio"] = out["mse"][scales.index(4)] / out["mse"][scales.index(1)]
    if result.folder is not None and (result.folder / METRICS).is_file():
        result.metrics = {**read_metrics(result.folder), "zero_shot": out}
        write_json(result.folder / METRICS, result.metrics)
    return out


def export_run(source: str | Path, target_root: str | Path | None = None, weights: str = "float32") -> Path:
    """The finished run folder ``source``, lean and compressed, into ``<target_root>/forecast/<its name>``
    (default root ``outputs/runs``), and that folder's ``index.csv``. ``weights``: float32; float16
    (the test metrics then the rounded weights', float32's kept beside); none (config and metrics)."""
    if weights not in ("float32", "float16", "none"):
        raise ConfigError(f"weights={weights!r} is invalid: expected float32, float16 or none.")
    source = Path(source).resolve()
    if missing := [f for f in (CONFIG, WEIGHTS, METRICS) if not (source / f).is_file()]:
        raise CheckpointError(f"run {source} lacks {', '.join(missing)}: export a finished run folder")
    cfg, root = read_config(source), Path(target_root or committed_runs_dir()) / STORE
    folder = root / source.parent.name / source.name
    if (folder / CONFIG).is_file() and read_config(folder).identity() != cfg.identity():
        raise CheckpointError(f"{folder} holds another run: train this one under another name (--name)")
    metrics, state = read_metrics(source), load_checkpoint(source / WEIGHTS)
    stored_model(source / WEIGHTS, state, cfg)  # the weights of this run, fitting it
    lean = lean_state(state)
    if weights == "float16":
        lean["model"] = {k: v.half() if v.is_floating_point() else v for k, v in lean["model"].items()}
        test = evaluate(cfg.new_model(lean["model"]), cfg.windows("test"))
        metrics |= {"test_mse_float32_weights": metrics["test_mse"], "test_mse": test["mse"],
                    "test_mae_float32_weights": metrics["test_mae"], "test_mae": test["mae"],
                    "weights": "float16"}
        metrics.pop("zero_shot", None)  # the float32 weights': zero_shot() evaluates the stored ones
        lean |= {"metrics": metrics, "weights": "float16"}
    (folder / METRICS).unlink(missing_ok=True)  # until the export is whole it reads as unfinished
    if weights == "none":
        (folder / WEIGHTS).unlink(missing_ok=True)
    else:
        save_checkpoint(folder / WEIGHTS, lean, compress=True)
    store_run(folder, metrics, files={CONFIG: cfg.to_dict()})  # metrics.json last: the run is whole
    rows = [{**read_metrics(p.parent), "run": p.parent.relative_to(root).as_posix()}
            for p in sorted(root.glob(f"*/*/{METRICS}"))]
    index = pd.DataFrame(rows, columns=INDEX_COLUMNS).round({"test_mse": 4, "test_mae": 4})
    with atomic_path(root / "index.csv") as tmp:
        index.to_csv(tmp, index=False)
    return folder


def command(args) -> int:
    """``python -m frost_nb forecast``: train (or load) one run and print its summary as JSON; with
    ``--zero-shot``, its ``zero_shot`` errors too (kept in its metrics.json)."""
    overrides = parse_settings(args.set) | {k: v for k, v in (("train.epochs", args.epochs), (
        "train.seed", args.seed), ("data.root", args.root)) if v is not None}
    cfg = make_forecast_config(args.dataset, args.model, args.horizon, **overrides)
    result = train_or_load(cfg, name=args.name, retrain=args.retrain, progress=not args.no_progress and None)
    keys = ("dataset", "model", "variant", "horizon", "seed", "test_mse", "test_mae", "best_epoch",
            "epochs_run", "capped_before_convergence", "params", "minutes", "hardware")
    extra = {"zero_shot": zero_shot(result)} if args.zero_shot else {}
    print(json.dumps({"run": shown_path(result.folder), **{k: result.metrics.get(k) for k in keys},
                      "from_store": result.from_store, **extra}, indent=2))
    return 0
