"""Figures from histories and results. Plotting functions return figures and compute nothing
beyond smoothing for display."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np


def _smooth(values: Sequence[float], window: int) -> np.ndarray:
    """Moving average for display (training curves are noisy per step)."""
    v = np.asarray(values, dtype=float)
    if window <= 1 or len(v) < window:
        return v
    kernel = np.ones(window) / window
    return np.convolve(v, kernel, mode="valid")


def _window(n: int) -> int:
    return max(1, n // 50)


def plot_training(history: dict[str, Any], title: str = "") -> plt.Figure:
    """Loss per step, training accuracy per step and held-out accuracy per epoch."""
    steps, epochs = history["steps"], history["epochs"]
    w = _window(len(steps["step"]))
    x = np.asarray(steps["step"])[w - 1:] if w > 1 else np.asarray(steps["step"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.4))
    ax1.plot(x, _smooth(steps["loss"], w), label="total")
    ax1.plot(x, _smooth(steps["task"], w), label="task (final step)")
    ax1.set(xlabel="optimiser step", ylabel="loss", yscale="log")
    ax1.legend()
    ax2.plot(x, _smooth(steps["accuracy"], w), label="train batch (final step)")
    per_epoch = len(steps["step"]) / max(1, len(epochs["epoch"]))
    ax2.plot(np.asarray(epochs["epoch"]) * per_epoch, epochs["val_accuracy"], "o-",
             label="held-out split (full depth)")
    ax2.set(xlabel="optimiser step", ylabel="accuracy", ylim=(0, 1))
    ax2.legend()
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_alpha(history: dict[str, Any], title: str = "") -> plt.Figure:
    """alpha (and H when learnable) per optimiser step: the paper's figure 1."""
    steps = history["steps"]
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(steps["step"], steps["alpha"], label="alpha")
    if not np.all(np.isnan(np.asarray(steps["hurst"], dtype=float))):
        ax.plot(steps["step"], steps["hurst"], label="H")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="optimiser step", ylabel="value", title=title or "alpha over training")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_halting_scores(history: dict[str, Any], title: str = "") -> plt.Figure:
    """Mean halting score of the easy and hard sets and the median threshold: figure 2."""
    steps = history["steps"]
    w = _window(len(steps["step"]))
    x = np.asarray(steps["step"])[w - 1:] if w > 1 else np.asarray(steps["step"])
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(x, _smooth(steps["easy_score"], w), label="easy set")
    ax.plot(x, _smooth(steps["hard_score"], w), label="hard set")
    ax.plot(x, _smooth(steps["threshold_median"], w), label="median threshold (KLL)", ls="--")
    ax.set(xlabel="optimiser step", ylabel="halting score", ylim=(0, 1),
           title=title or "halting scores over training")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_accuracy_per_step(accuracy: Sequence[float], title: str = "") -> plt.Figure:
    """Accuracy of the readout at every step t (all samples stopped at t)."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    t = np.arange(1, len(accuracy) + 1)
    ax.plot(t, accuracy, "o-")
    ax.set(xlabel="step t", ylabel="test accuracy", ylim=(0, 1), title=title or "fixed-depth accuracy")
    fig.tight_layout()
    return fig


def plot_sweep(table, title: str = "") -> plt.Figure:
    """Accuracy against mean depth over the halting quantile sweep (a pandas table)."""
    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(table["mean_depth"], table["accuracy"], "o-")
    for q, d, a in zip(table["quantile"], table["mean_depth"], table["accuracy"]):
        ax.annotate(f"q={q:g}", (d, a), textcoords="offset points", xytext=(4, -10), fontsize=7)
    ax.set(xlabel="mean depth (steps)", ylabel="test accuracy", title=title or "halting sweep")
    fig.tight_layout()
    return fig
