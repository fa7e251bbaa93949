"""Figures from histories and results. Plotting functions return figures and compute nothing
beyond smoothing for display."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle

from ..analysis.halting_rules import HINDSIGHT, sorted_points
from ..analysis.ladder import QUANTITIES, quantity_points


def _smooth(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Moving average over a fiftieth of the series for display (training curves are noisy per
    step), with the x values it lines up with."""
    x, y = np.asarray(x), np.asarray(y, dtype=float)
    w = max(1, len(y) // 50)
    return x[w - 1:], np.convolve(y, np.ones(w) / w, mode="valid")


def _finish(fig: plt.Figure, ax=None, title: str | None = None, fontsize: int | None = 7,
            title_size: int | None = None, **legend: Any) -> plt.Figure:
    """Common last lines of a figure: a legend on ``ax``, one axes or several (small by default), a suptitle
    (of ``title_size``, default matplotlib's), a tight layout."""
    for each in np.ravel([] if ax is None else ax):
        each.legend(fontsize=fontsize, **legend)
    if title is not None:
        fig.suptitle(title, size=title_size or plt.rcParams["figure.titlesize"])
    fig.tight_layout()
    return fig


def plot_training(history: dict[str, Any], title: str = "") -> plt.Figure:
    """Loss per step, training accuracy per step and held-out accuracy per epoch."""
    steps, epochs = history["steps"], history["epochs"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    ax1.plot(*_smooth(steps["step"], steps["loss"]), label="total")
    ax1.plot(*_smooth(steps["step"], steps["task"]), label="task (final step)")
    ax1.set(xlabel="optimiser step", ylabel="loss", yscale="log")
    ax2.plot(*_smooth(steps["step"], steps["accuracy"]), label="train batch (final step)")
    # optimiser steps per epoch from the last step logged, not from the number of entries: a lean
    # export (checkpoint.lean_state) keeps only some steps of the series
    per_epoch = float(np.asarray(steps["step"])[-1]) / max(1, len(epochs["epoch"]))
    ax2.plot(np.asarray(epochs["epoch"]) * per_epoch, epochs["val_accuracy"], "o-",
             label="held-out split (full depth)")
    ax2.set(xlabel="optimiser step", ylabel="accuracy", ylim=(0, 1))
    return _finish(fig, (ax1, ax2), title, fontsize=None)


def plot_alpha(history: dict[str, Any], title: str = "") -> plt.Figure:
    """alpha (and H when learnable) per optimiser step: the paper's figure 1."""
    steps = history["steps"]
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(steps["step"], steps["alpha"], label="alpha")
    if not np.all(np.isnan(np.asarray(steps["hurst"], dtype=float))):
        ax.plot(steps["step"], steps["hurst"], label="H")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="optimiser step", ylabel="value", title=title or "alpha over training")
    return _finish(fig, ax, fontsize=None)


def _halting_scores_on(ax, history: dict[str, Any], title: str) -> None:
    steps = history["steps"]
    ax.plot(*_smooth(steps["step"], steps["easy_score"]), label="easy set")
    ax.plot(*_smooth(steps["step"], steps["hard_score"]), label="hard set")
    ax.plot(*_smooth(steps["step"], steps["threshold_median"]), label="median threshold (KLL)", ls="--")
    ax.set(xlabel="optimiser step", ylabel="halting score", ylim=(0, 1), title=title)


def plot_halting_scores(history: dict[str, Any], title: str = "") -> plt.Figure:
    """Mean halting score of the easy and hard sets and the median threshold: figure 2."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    _halting_scores_on(ax, history, title or "halting scores over training")
    return _finish(fig, ax, fontsize=None)


def plot_halting_panels(histories: dict[str, dict[str, Any]], title: str = "") -> plt.Figure:
    """Figure 2 for several runs side by side (one panel per run, same axes)."""
    n = len(histories)
    fig, axes = plt.subplots(1, n, figsize=(3.3 * n, 3.2), sharey=True, squeeze=False)
    for ax, (label, history) in zip(axes[0], histories.items()):
        _halting_scores_on(ax, history, label)
    return _finish(fig, axes[0][0], title or "halting scores over training")


def plot_series(histories: dict[str, dict[str, Any]], key: str, section: str = "steps",
                ylabel: str | None = None, title: str = "", hline: float | None = None,
                smooth: bool = False, log_y: bool = False) -> plt.Figure:
    """One history series (e.g. alpha, hurst, grad_cosine) of several runs against the step."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for label, history in histories.items():
        x, y = history[section]["step"], np.asarray(history[section][key], dtype=float)
        ax.plot(*(_smooth(x, y) if smooth else (x, y)), label=label)
    if hline is not None:
        ax.axhline(hline, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="optimiser step", ylabel=ylabel or key, title=title or key, yscale="log" if log_y else "linear")
    return _finish(fig, ax)


def plot_sweeps(tables: dict[str, Any], title: str = "") -> plt.Figure:
    """Accuracy against mean depth of several halting sweeps (pandas tables) on one plot."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for label, table in tables.items():
        ax.plot(table["mean_depth"], table["accuracy"], "o-", ms=3, label=label)
    ax.set(xlabel="mean depth (steps)", ylabel="accuracy", title=title or "halting sweeps")
    return _finish(fig, ax)


def plot_accuracy_per_step(accuracy: Sequence[float], title: str = "") -> plt.Figure:
    """Accuracy of the readout at every step t (all samples stopped at t)."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(np.arange(1, len(accuracy) + 1), accuracy, "o-")
    ax.set(xlabel="step t", ylabel="test accuracy", ylim=(0, 1), title=title or "fixed-depth accuracy")
    return _finish(fig)


def plot_sweep(table, title: str = "") -> plt.Figure:
    """Accuracy against mean depth over the halting quantile sweep (a pandas table)."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(table["mean_depth"], table["accuracy"], "o-")
    for q, d, a in zip(table["quantile"], table["mean_depth"], table["accuracy"]):
        ax.annotate(f"q={q:g}", (d, a), textcoords="offset points", xytext=(4, -10), fontsize=7)
    ax.set(xlabel="mean depth (steps)", ylabel="test accuracy", title=title or "halting sweep")
    return _finish(fig)


def plot_scale_consistency(table, paper_rows: Sequence[dict] = (), title: str = "") -> plt.Figure:
    """cos(GAP(h_t), GAP(h_T)) against t per model: the mean over seeds of the per-run means,
    a band of the mean within-run std over samples; the paper's Table 1 as crosses."""
    fig, ax = plt.subplots(figsize=(6, 3.8))
    colors = {}
    for model, part in table.groupby("model", sort=False):
        g = part.groupby("step")
        mean, std = g["mean"].mean(), g["std"].mean()
        colors[model] = ax.plot(mean.index, mean.values, "o-", ms=3, label=model)[0].get_color()
        ax.fill_between(mean.index, mean - std, mean + std, color=colors[model], alpha=0.12)
    for model in sorted({r["model"] for r in paper_rows}):
        rows = [r for r in paper_rows if r["model"] == model]
        ax.plot([r["step"] for r in rows], [r["mean"] for r in rows], "x", ms=7,
                color=colors.get(model, "k"), label=f"paper: {model}")
    ax.set(xlabel="step t", ylabel="cos(GAP(h_t), GAP(h_T))", ylim=(-0.1, 1.05),
           title=title or "scale consistency (Table 1)")
    return _finish(fig, ax, ncol=2)


def plot_similarity_matrices(matrices: dict[str, Any], title: str = "") -> plt.Figure:
    """One heatmap per model of the mean cosine between the pooled states of every two steps."""
    fig, axes = plt.subplots(1, len(matrices), figsize=(3.1 * len(matrices), 3.2), squeeze=False)
    for ax, (label, m) in zip(axes[0], matrices.items()):
        m = np.asarray(m)
        im = ax.imshow(m, vmin=-1, vmax=1, cmap="RdBu_r", origin="upper")
        ticks = np.arange(0, m.shape[0], max(1, m.shape[0] // 4))
        ax.set(title=label, xlabel="step t", ylabel="step s", xticks=ticks, yticks=ticks)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="mean cosine")
    fig.suptitle(title or "step-by-step similarity of the pooled states (h_0 .. h_T)")
    return fig


def plot_step_sizes(step_norms: dict[str, Any], kappa: dict[str, float], title: str = "") -> plt.Figure:
    """Median ||h_{t+1} - h_t|| against t (log scale, quartile band) per model, with the
    geometric line of the fitted rate kappa through the median at t = 0."""
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for label, s in step_norms.items():
        s = np.asarray(s, dtype=float)  # (N, T)
        t = np.arange(s.shape[1])
        q25, med, q75 = np.quantile(s, [0.25, 0.5, 0.75], axis=0)
        line, = ax.plot(t, med, "o-", ms=3, label=label)
        ax.fill_between(t, q25, q75, color=line.get_color(), alpha=0.12)
        if label in kappa:
            ax.plot(t, med[0] * kappa[label] ** t, ls=":", color=line.get_color(), lw=1)
    ax.set(xlabel="step t", ylabel="||h_{t+1} - h_t||", yscale="log",
           title=title or "step sizes (dotted: fitted kappa^t)")
    return _finish(fig, ax)


def plot_dimension_fits(fits: dict[str, Any], title: str = "") -> plt.Figure:
    """log N(eps) against log(1/eps) (box counting) with the fitted lines, one per set."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, fit in fits.items():
        x = np.log(1 / np.asarray(fit.scales))
        line, = ax.plot(x, np.log(fit.counts), "o", ms=4)
        ax.plot(x, fit.intercept + fit.dimension * x, color=line.get_color(), lw=1,
                label=f"{label}: slope {fit.dimension:.3f}")
    ax.set(xlabel="log(1/eps)", ylabel="log N(eps)", title=title or "box counting")
    return _finish(fig, ax)


def plot_planar_trajectories(planar: dict[str, Any], title: str = "") -> plt.Figure:
    """The first 8 projected trajectories (N, T+1, 2) of each model, one panel each; a dot marks h_0."""
    fig, axes = plt.subplots(1, len(planar), figsize=(3.1 * len(planar), 3.1), squeeze=False)
    for ax, (label, xy) in zip(axes[0], planar.items()):
        for path in np.asarray(xy)[:8]:
            line, = ax.plot(path[:, 0], path[:, 1], "-", lw=0.9, marker=".", ms=2)
            ax.plot(path[0, 0], path[0, 1], "o", ms=4, color=line.get_color())
        ax.set(title=label, xticks=[], yticks=[])
    return _finish(fig, title=title or "pooled-state trajectories on the top-2 principal components")


def plot_exit_histogram(histogram: Sequence[int], title: str = "") -> plt.Figure:
    """Number of samples exiting at each step 1..T (``Exits.histogram()``)."""
    counts = np.asarray(histogram)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.bar(np.arange(1, len(counts) + 1), counts, width=0.8)
    ax.set(xlabel="exit step", ylabel="samples", title=title or "exit steps", xlim=(0.3, len(counts) + 0.7))
    return _finish(fig)


def plot_depth_per_class(table, steps: int, title: str = "") -> plt.Figure:
    """Mean exit depth (bars, with the std over samples) and accuracy (dots) of each class."""
    fig, ax = plt.subplots(figsize=(6, 3.4))
    x = np.arange(len(table))
    ax.bar(x, table["mean_depth"], yerr=table["std_depth"], capsize=2, alpha=0.8, label="mean exit depth")
    ax.set(ylabel="exit depth (steps)", ylim=(0, steps + 0.5), title=title or "exit depth per class")
    ax.set_xticks(x, [str(c) for c in table["class"]], rotation=40, ha="right", fontsize=7)
    acc = ax.twinx()
    acc.plot(x, table["accuracy"], "ko", ms=4, label="accuracy")
    acc.set(ylabel="accuracy", ylim=(0, 1.02))
    bars, dots = ax.get_legend_handles_labels(), acc.get_legend_handles_labels()
    return _finish(fig, ax, handles=bars[0] + dots[0], labels=bars[1] + dots[1], loc="lower left")


def plot_exit_examples(images, earliest, latest, depth, labels: Sequence[str], title: str = "") -> plt.Figure:
    """Two rows of test images: those that exit earliest and those that exit latest, each
    titled with its class and exit step. ``images`` (N, C, H, W): uint8, or floats in [0, 1]."""
    n = max(len(earliest), len(latest))
    fig, axes = plt.subplots(2, n, figsize=(1.3 * n, 3.8), squeeze=False)  # room for two lines of titles
    for row, (name, picks) in enumerate((("earliest", earliest), ("latest", latest))):
        for col, ax in enumerate(axes[row]):
            ax.axis("off")
            i = int(picks[col])
            img = np.asarray(images[i])
            img = (img / 255.0 if img.dtype == np.uint8 else img.astype(float)).transpose(1, 2, 0)
            ax.imshow(img.squeeze(-1) if img.shape[-1] == 1 else img.clip(0, 1), cmap="gray", vmin=0, vmax=1)
            ax.set_title(f"{labels[i]}\nstep {int(depth[i])}", fontsize=7)
        axes[row][0].text(-0.15, 0.5, name, transform=axes[row][0].transAxes, rotation=90,
                          va="center", ha="right", fontsize=8)
    return _finish(fig, title=title or "earliest and latest exits", title_size=9)


def plot_depth_accuracy(sweeps: dict[str, Any], fixed: dict[str, Any], paper=None, title: str = "",
                        rivals: dict[str, Any] | None = None) -> plt.Figure:
    """Accuracy against mean depth: each run's halting sweep (solid), the fixed-depth curve of each run
    (all samples stopped at step t; dashed), each run's ``rivals`` curve if given (the confidence rule's
    ``curves.curve`` table; dotted) and the paper's Table 2 if given (crosses)."""
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for i, (label, table) in enumerate(sweeps.items()):
        colour = f"C{i}"
        ax.plot(table["mean_depth"], table["accuracy"], "o-", ms=3, color=colour, label=f"{label}: halting")
        if label in fixed:
            ax.plot(fixed[label]["mean_depth"], fixed[label]["accuracy"], "--", lw=1, color=colour,
                    label=f"{label}: fixed depth")
        if rivals and label in rivals:
            ax.plot(*sorted_points(rivals[label]), ":", lw=1.2, color=colour, label=f"{label}: confidence")
    if paper is not None:
        ax.plot(paper["mean_depth"], paper["accuracy"], "kx--", lw=0.8, label="paper (CIFAR-100)")
    ax.set(xlabel="mean depth (steps)", ylabel="accuracy", ylim=(0, 1), title=title or "accuracy against depth")
    return _finish(fig, ax)


def plot_complexity_ratios(table, title: str = "") -> plt.Figure:
    """GFLOPs and throughput over vanilla's, ours beside the paper's (Table 3), per row of a
    table with columns backbone, model, depth and the ratio columns (``paper ...`` for theirs)."""
    labels = [f"{b} {m}" + ("" if d == "full depth" else f"\n{d}") for b, m, d in
              zip(table["backbone"], table["model"], table["depth"])]
    x = np.arange(len(table))
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharex=True)
    for ax, col in zip(axes, ("gflops / vanilla", "images_per_s / vanilla")):
        ax.bar(x - 0.2, table[col], width=0.4, label="ours")
        ax.bar(x + 0.2, table[f"paper {col}"], width=0.4, label="paper")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set(ylabel=col, title=col)
        ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=6)
    return _finish(fig, axes, title or "cost relative to vanilla (same backbone)")


FIXED_STYLE, ORACLE_STYLE = dict(ls="--", color="k", lw=1), dict(ls=":", color="grey", lw=1)
HINDSIGHT_STYLE = dict(ls="-.", color="grey", lw=1)


def plot_rule_curves(curves, fixed, oracle, title: str = "", hindsight=None) -> plt.Figure:
    """Accuracy against mean depth of every halting rule (``curves.curve`` tables), one panel per model:
    a line per rule, the fixed depth (dashed), the oracle's bound (dotted), the hindsight exit
    (``hindsight``, dash-dot) and random exits with rule frost's own depths (thin); one legend."""
    colours = {rule: f"C{i}" for i, rule in enumerate(dict.fromkeys(curves["rule"]))}

    def lines(model):
        for rule, part in curves[curves["model"] == model].groupby("rule", sort=False):
            yield part, rule, dict(marker="o", ms=2, lw=1, color=colours[rule])
            if rule == "frost" and "random_accuracy" in part:
                yield part.assign(accuracy=part["random_accuracy"]), f"random exits, {rule}'s depths", \
                    dict(lw=0.8, ls=(0, (1, 1)), color=colours[rule])
        yield fixed[fixed["model"] == model], "fixed depth", FIXED_STYLE
        yield oracle[oracle["model"] == model], "oracle (any step correct: bound)", ORACLE_STYLE
        if hindsight is not None:
            yield hindsight[hindsight["model"] == model], "hindsight exit (needs step T: no rule)", HINDSIGHT_STYLE

    models = list(dict.fromkeys(curves["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(3.6 * len(models), 3.6), sharey=True, squeeze=False)
    handles = {}
    for ax, model in zip(axes[0], models):
        for part, label, style in lines(model):
            part = part.sort_values("mean_depth", kind="stable")
            ax.plot(part["mean_depth"], part["accuracy"], label=label, **style)
        ax.set(title=model, xlabel="mean depth (steps)")
        handles.update((lab, h) for h, lab in zip(*ax.get_legend_handles_labels()) if lab not in handles)
    axes[0][0].set(ylabel="test accuracy")
    _finish(fig, title=title or "halting rules: accuracy against mean depth")
    fig.legend(handles.values(), handles.keys(), fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


def plot_gain_split(split, auroc, title: str = "", curves=None) -> plt.Figure:
    """Why a rule gains or loses against a fixed depth: ``split`` (``curves.split_by_quantile`` rows,
    one ``group`` each, e.g. a model family) as spread and ranking against the quantile's mean depth,
    bars from the least to the largest seed; ``auroc`` (``settled_summary``'s per-step table, a
    ``group`` column) as the score's and the confidence's AUROC for "settled for good by t". With
    ``curves`` (one model's rule, fixed depth, oracle and hindsight exit), a first panel draws them
    and random exits with the rule's depths."""
    fig, axes = plt.subplots(1, 2 + (curves is not None), figsize=(5 * (2 + (curves is not None)), 3.6))
    ax1, ax2 = axes[-2:]
    if curves is not None:
        styles = {"fixed depth": FIXED_STYLE, "oracle": ORACLE_STYLE, HINDSIGHT: HINDSIGHT_STYLE}
        for rule, part in curves.groupby("rule", sort=False):
            part = part.sort_values("mean_depth", kind="stable")
            axes[0].plot(part["mean_depth"], part["accuracy"], label=rule,
                         **styles.get(rule, dict(marker="o", ms=3, lw=1, color="C0")))
            if rule not in styles and "random_accuracy" in part:
                axes[0].plot(part["mean_depth"], part["random_accuracy"], marker="s", ms=3, ls=(0, (1, 1)), lw=0.8,
                             color="C1", label=f"random exits, {rule}'s depths")
        axes[0].set(xlabel="mean depth (steps)", ylabel="test accuracy", title=curves["model"].iloc[0])
    for i, (group, part) in enumerate(split.groupby("group", sort=False)):
        for column, marker in (("spread", "s"), ("ranking", "o")):
            err = [100 * (part[column] - part[f"{column}_min"]), 100 * (part[f"{column}_max"] - part[column])]
            ax1.errorbar(part["mean_depth"], 100 * part[column], yerr=err, marker=marker, ms=3, lw=1, capsize=2,
                         color=f"C{i}", ls="-" if column == "ranking" else "--", label=f"{group}: {column}")
    ax1.axhline(0, color="k", lw=0.6)
    ax1.set(xlabel="mean depth (steps)", ylabel="points of accuracy",
            title="gain over a fixed depth = spread + ranking")
    for i, (group, part) in enumerate(auroc.groupby("group", sort=False)):
        by = part.groupby("step")[["score_auroc", "confidence_auroc"]].mean()
        ax2.plot(by.index, by["score_auroc"], "o-", ms=3, lw=1, color=f"C{i}", label=f"{group}: halting score")
        ax2.plot(by.index, by["confidence_auroc"], lw=0.8, ls=":", color=f"C{i}", label=f"{group}: confidence")
    ax2.axhline(0.5, color="k", lw=0.6)
    ax2.set(xlabel="step t", ylabel="AUROC", title='"settled for good by t"')
    return _finish(fig, axes, title or "what the halting score knows")


def plot_rule_throughput(table, title: str = "") -> plt.Figure:
    """Accuracy against measured throughput (``complexity.rule_throughput``): a line per rule
    through its thresholds, the median images/s with the spread over rounds as a bar; beside it
    the same points against mean depth, which is what the FLOP count alone would predict."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.6), sharey=True)
    for i, (rule, part) in enumerate(table.groupby("rule", sort=False)):
        part = part.sort_values("images_per_s", kind="stable")
        rate = part["images_per_s"]
        spread = [rate - part["images_per_s_min"], part["images_per_s_max"] - rate]
        ax1.errorbar(part["images_per_s"], part["accuracy"], xerr=spread, fmt="o-", ms=3, lw=1,
                     capsize=2, color=f"C{i}", label=rule)
        part = part.sort_values("mean_depth", kind="stable")
        ax2.plot(part["mean_depth"], part["accuracy"], "o-", ms=3, lw=1, color=f"C{i}")
    threads, batch = int(table["threads"].iloc[0]), int(table["batch_size"].iloc[0])
    ax1.set(xlabel=f"images / s (batch {batch}, {threads} thread{'s' * (threads > 1)})",
            ylabel="test accuracy")
    ax2.set(xlabel="mean depth (steps)")
    return _finish(fig, ax1, title or "halting rules: accuracy against measured throughput")


def plot_collapse(table, title: str = "") -> plt.Figure:
    """Per family and seed: full-depth accuracy with the ranking losses against the task-only
    reference (a red cross marks a collapsed run), and the gradient-conflict cosine of both."""
    families = list(dict.fromkeys(table["model"]))
    pos = np.array([families.index(m) for m in table["model"]], dtype=float)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.4))
    ok = ~np.asarray(table["collapsed"], dtype=bool)
    for ax, col, kept in ((ax1, "accuracy", ok), (ax2, "gradient_cosine", slice(None))):
        ax.plot(pos - 0.1, table[f"reference_{col}"], "o", color="C0", label="task loss only")
        ax.plot(pos[kept] + 0.1, np.asarray(table[col])[kept], "o", color="C1", label="with ranking losses")
    ax1.plot(pos[~ok] + 0.1, np.asarray(table["accuracy"])[~ok], "x", color="C3", ms=8, label="collapsed")
    ax1.set(ylabel="test accuracy (full depth)", ylim=(0, 1.02), title="accuracy")
    ax2.axhline(0.0, color="grey", lw=0.8, ls="--")
    ax2.set(ylabel="cos(grad task, grad ranking)", title="gradient conflict")
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(families)), families)
    return _finish(fig, (ax1, ax2), title or "the ranking losses on the non-fractal families")


def plot_stream_throughput(table, title: str = "") -> plt.Figure:
    """Images/s against the halting quantile q (``benchmarks/adaptive_inference.py --stream`` rows):
    full depth, batch-at-a-time (mode eager, compact_below 1), the stream (a line per refill_at and
    embed_batch) and the ideal (``ideal_images_per_s``); one panel per batch size B and thread count."""
    batch = table[(table["mode"] == "eager") & (table["compact_below"] == 1.0)]
    stream = table[table["mode"] == "stream"]
    panels = sorted(set(zip(stream["threads"], stream["batch_size"])))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.8 * len(panels), 3.4), sharey=True, squeeze=False)
    for ax, (threads, b) in zip(axes[0], panels):
        at = lambda part: part[(part["threads"] == threads) & (part["batch_size"] == b)].sort_values("quantile")
        rows = at(batch)
        ax.plot(rows["quantile"], rows["full_images_per_s"], "--", color="k", lw=1, label="full depth")
        ax.plot(rows["quantile"], rows["images_per_s"], "o-", ms=3, lw=1, color="C0", label="batch-at-a-time")
        for i, ((refill, embed), part) in enumerate(at(stream).groupby(["refill_at", "embed_batch"])):
            ax.plot(part["quantile"], part["images_per_s"], "s-", ms=3, lw=1, color=f"C{1 + i}",
                    label=f"stream (refill at {int(refill)}, embed {int(embed)} ahead)")
        ideal = at(stream).drop_duplicates("quantile")
        ax.plot(ideal["quantile"], ideal["ideal_images_per_s"], ":", color="grey", lw=1.2, label="ideal (FLOPs)")
        ax.set(title=f"B = {b}, {threads} thread{'s' * (threads > 1)}", xlabel="halting quantile q")
    axes[0][0].set(ylabel="images / s")
    return _finish(fig, axes[0][-1], title or "adaptive inference: throughput against q")


def plot_ladder_quantities(rows: Sequence[dict], readout: Sequence[dict], paper_params: float,
                           title: str = "") -> plt.Figure:
    """One panel per quantity of the scale ladder against parameters (log axis): each run a point
    (the demo control hollow, never fitted), the fitted line with its reading, the paper's value as
    a star at ``paper_params`` (a bound or sign as a dotted line)."""
    points = quantity_points(list(rows))
    fits = {r["quantity"]: r for r in readout}
    names, cols = list(QUANTITIES), 4
    grid = -(-len(names) // cols)  # rows of panels
    xy = lambda pts: ([p["params"] for p in pts], [p["value"] for p in pts])
    fig, axes = plt.subplots(grid, cols, figsize=(3.4 * cols, 2.6 * grid), squeeze=False)
    for ax, name in zip(axes.flat, names):
        q, pts = QUANTITIES[name], points.get(name, [])
        ladder_pts = [p for p in pts if p["size"] != "demo"]
        demo_pts = [p for p in pts if p["size"] == "demo"]
        ax.scatter(*xy(ladder_pts), s=14, color="C0")
        ax.scatter(*xy(demo_pts), s=14, facecolors="none", edgecolors="C1", label="demo (not fitted)")
        f = fits.get(name, {})
        if np.isfinite(f.get("slope", np.nan)) and ladder_pts:  # the fit's line, a + b ln N
            x = np.geomspace(min(p["params"] for p in ladder_pts), paper_params, 20)
            ax.plot(x, f["intercept"] + f["slope"] * np.log(x), color="C0", lw=1, ls="--")
        if q.paper is not None and q.direction == "value":
            ax.scatter([paper_params], [q.paper], marker="*", s=60, color="C3", label="paper")
        elif q.paper is not None:
            ax.axhline(q.paper, color="C3", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_title(f"{q.label}\n{f.get('reading', 'no fit')}", fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.supxlabel("parameters (log)", fontsize=8)
    return _finish(fig, axes.flat[0], title or None, fontsize=6, title_size=9)


def plot_ladder_curves(rows: Sequence[dict], title: str = "") -> plt.Figure:
    """Fixed-depth accuracy by step of every frost run of the ladder (and the demo control), one
    colour per size, seeds as thin lines."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for i, size in enumerate(dict.fromkeys(r["size"] for r in rows if r["model"] == "frost")):
        for j, r in enumerate(r for r in rows if r["model"] == "frost" and r["size"] == size):
            acc = r["accuracy_per_step"]
            ax.plot(range(1, len(acc) + 1), acc, color=f"C{i}", lw=1.4 if j == 0 else 0.7,
                    ls=":" if size == "demo" else "-", label=f"{size} ({r['params']:,} params)" if j == 0 else None)
    ax.set(xlabel="fixed depth t", ylabel="test accuracy")
    ax.set_title(title, fontsize=9)
    return _finish(fig, ax)


def plot_block_ranges(similarity, ranges: dict[int, Sequence[tuple[int, int]]],
                      equal: dict[int, Sequence[tuple[int, int]]], title: str = "") -> plt.Figure:
    """The teacher's step similarity once per k, the ranges its k-branch student was given drawn as
    solid boxes and the equal ranges of the control as dashed ones (steps 1..T)."""
    m = np.asarray(similarity)
    fig, axes = plt.subplots(1, len(ranges), figsize=(3.0 * len(ranges) + 0.6, 3.2), squeeze=False)
    for ax, (k, chosen) in zip(axes[0], ranges.items()):
        im = ax.imshow(m, vmin=-1, vmax=1, cmap="RdBu_r", origin="upper",
                       extent=(0.5, m.shape[0] + 0.5, m.shape[0] + 0.5, 0.5))
        for boxes, style in ((equal.get(k, ()), dict(ls="--", ec="0.4", lw=1.0)), (chosen, dict(ls="-", ec="k", lw=1.6))):
            for a, b in boxes:  # steps a+1 .. b
                ax.add_patch(Rectangle((a + 0.5, a + 0.5), b - a, b - a, fill=False, **style))
        ticks = np.arange(1, m.shape[0] + 1, max(1, m.shape[0] // 4))
        ax.set(title=f"k = {k}: steps {', '.join(f'{a + 1}-{b}' for a, b in chosen)}", xlabel="step t",
               ylabel="step s" if ax is axes[0][0] else "", xticks=ticks, yticks=ticks)
        ax.title.set_fontsize(8)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="mean cosine")
    fig.suptitle(title or "teacher's step similarity; solid: the ranges chosen, dashed: equal ranges", fontsize=9)
    return fig


def plot_against_k(students, per_k, margin: float, title: str = "") -> plt.Figure:
    """Three panels against k: the accuracy recovered (each student a point, a line through the first
    seed's students, whose teacher every k shares, a diamond for a k's mean over several seeds, the
    claim's ``margin`` dashed, the teacher at 1); the students' accuracy beside the same k from scratch
    and the teachers' (the gain is the gap); the per-step state cosine to the teacher, one line per k
    (mean over students). ``students`` as ``block_recurrent.summary``, ``per_k`` as ``against_k``."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(11, 3.3))
    ks = list(per_k["k"])
    first = students[students["seed"] == students["seed"].min()].sort_values("k")  # one teacher across k
    pooled = per_k[per_k["students"] > 1]
    a.scatter(students["k"], students["recovered"], s=16, color="C0", alpha=0.7, label="student (a seed)")
    a.plot(first["k"], first["recovered"], color="C0", marker="o", label=f"seed {students['seed'].min()}")
    a.scatter(pooled["k"], pooled["recovered"], s=40, color="C2", marker="D", label="mean over seeds", zorder=3)
    a.axhline(margin, color="C3", ls="--", lw=1, label=f"claim: {margin:g}")
    a.axhline(1.0, color="0.5", ls=":", lw=1, label="teacher")
    a.set(xlabel="k (distinct branches)", ylabel="student / teacher accuracy", xticks=ks, title="accuracy recovered")
    b.scatter(students["k"], students["accuracy"], s=16, color="C0", alpha=0.7, label="student")
    b.plot(first["k"], first["accuracy"], color="C0", marker="o")
    b.scatter(pooled["k"], pooled["accuracy"], s=40, color="C2", marker="D", zorder=3)
    b.plot(ks, per_k["scratch_accuracy"], color="C1", marker="s", ls="--", label="same k from scratch")
    teachers = students.drop_duplicates("teacher")["teacher_accuracy"]  # each teacher once, however many students
    b.axhline(float(np.mean(teachers)), color="0.5", ls=":", lw=1, label="teacher (vanilla, mean)")
    b.set(xlabel="k (distinct branches)", ylabel="test accuracy", xticks=ks, title="against the same k from scratch")
    for i, r in enumerate(per_k.to_dict(orient="records")):
        cos = r["state_cosine"]
        c.plot(range(1, len(cos) + 1), cos, color=f"C{i}", marker=".", label=f"k = {r['k']}")
    c.set(xlabel="step t", ylabel="cos(GAP(h_t), teacher's)", title="state similarity to the teacher")
    for ax in (a, b, c):
        ax.title.set_fontsize(9)
    return _finish(fig, (a, b, c), title or None, title_size=9)
