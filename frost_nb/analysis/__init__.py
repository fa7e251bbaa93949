"""Measurements on trained models: trajectories, fractal dimensions, halting rules and exits, complexity, head refit."""
