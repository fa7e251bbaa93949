"""Figures: what they draw where (plotting never computes results; these check the drawing)."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

from frost_nb.plotting import plot_training  # noqa: E402


def _history(logged_steps):
    n = len(logged_steps)
    return {"steps": {"step": logged_steps, "loss": np.linspace(2, 1, n), "task": np.linspace(2, 1, n),
                      "accuracy": np.linspace(0.1, 0.9, n)},
            "epochs": {"epoch": [1, 2, 3, 4], "val_accuracy": [0.5, 0.6, 0.7, 0.8]}}


def test_held_out_points_sit_at_the_end_of_their_epoch_in_full_and_lean_histories():
    """400 optimiser steps in 4 epochs: the held-out points at steps 100, 200, 300, 400, whether
    every step was logged or a lean export kept 21 of them (first and last included)."""
    full = list(range(1, 401))
    lean = [int(s) for s in np.linspace(1, 400, 21).round()]
    for logged in (full, lean):
        held_out = plot_training(_history(logged)).axes[1].lines[1]
        assert np.allclose(held_out.get_xdata(), [100, 200, 300, 400])
