"""Notebook 11's figures, from what ``report`` computed; each returns its figure and computes nothing."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .data import COLUMNS


def _finish(fig: plt.Figure, ax=None, **legend) -> plt.Figure:
    if ax is not None:
        ax.legend(fontsize=7, **legend)
    fig.tight_layout()
    return fig


def plot_forecasts(examples: dict) -> plt.Figure:
    """Figure 4: per window (``report.forecast_examples``) the look-back (grey), the truth (green), the
    forecast (red, dashed) and the border between them (dotted)."""
    n, length = examples["history"].shape
    future = np.arange(length, length + examples["truth"].shape[1])
    fig, axes = plt.subplots(n, 1, figsize=(7, 1.6 * n), sharex=True, squeeze=False)
    for ax, i, *curves in zip(axes[:, 0], examples["index"], examples["history"], examples["truth"],
                              examples["forecast"]):
        ax.plot(curves[0], color="grey", lw=0.8, label="look-back")
        ax.plot(future, curves[1], color="green", lw=0.8, label="truth")
        ax.plot(future, curves[2], "r--", lw=0.8, label="forecast")
        ax.axvline(length - 0.5, color="k", ls=":", lw=0.6)
        ax.set_ylabel(f"window {i}", fontsize=7)
    axes[-1, 0].set_xlabel(f"step ({examples['variable']}, standardised)")
    return _finish(fig, axes[0, 0], loc="upper left")


def plot_gate(gates: np.ndarray, variables: tuple[str, ...] = COLUMNS) -> plt.Figure:
    """Figure 2: the gate (C, L) of ``report.gate_map`` over the look-back, a row per variable."""
    fig, ax = plt.subplots(figsize=(7, 2.4))
    image = ax.imshow(gates, aspect="auto", vmin=0, vmax=1, interpolation="nearest")
    ax.set_yticks(range(len(variables)), variables, fontsize=7)
    ax.set_xlabel("look-back step")
    fig.colorbar(image, ax=ax, label="gate (0 local, 1 global)")
    return _finish(fig)


def plot_ablations(table: pd.DataFrame) -> plt.Figure:
    """Table 2 (``report.ablations``): each variant's MSE minus the full model's, ours (ETTh2; sd over
    seeds as error bars) beside the paper's (ETTm2)."""
    (fig, ax), x = plt.subplots(figsize=(6, 2.8)), np.arange(len(table))
    ax.bar(x - 0.2, table["change"], 0.4, yerr=table["mse_sd"], capsize=2, label="ours (ETTh2)")
    ax.bar(x + 0.2, table["paper_change"], 0.4, label="paper (ETTm2)")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xticks(x, table["variant"])
    ax.set_ylabel("MSE - the full model's")
    return _finish(fig, ax)


def plot_zero_shot(table: pd.DataFrame) -> plt.Figure:
    """Table 14 (``report.zero_shot_table``): the MSE against the pooling factor per label (mean, sd over
    seeds); the paper's dashed."""
    fig, ax = plt.subplots(figsize=(5, 3))
    for label, rows in table.groupby("label", sort=False):
        ax.errorbar(rows["scale"], rows["mse"], yerr=rows.get("mse_sd"), marker="o", capsize=2,
                    ls="--" if label.startswith("paper") else "-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4], ["x1", "x2", "x4"])
    ax.set(xlabel="input pooled by", ylabel="test MSE (H = 96)")
    return _finish(fig, ax)
