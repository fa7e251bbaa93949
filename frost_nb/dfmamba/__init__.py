"""DF-Mamba ("Dynamic Fractal Mamba", ICML 2026) for forecasting on ETTh2: the model, its scan, the data,
the linear baselines, the trainer and its runs, notebook 11's numbers and figures (docs/df-mamba.md)."""

from .model import DFMamba, DFMambaConfig, Forecast, level_lengths, total_loss  # noqa: F401
from .scan import chunked_scan, sequential_scan  # noqa: F401
