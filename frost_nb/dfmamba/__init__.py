"""DF-Mamba ("Dynamic Fractal Mamba: A Neural Renormalization Group Flow for Scale-Invariant Sequence
Modeling", ICML 2026) for long-term forecasting on ETTh2: the model (``model``), its selective scan
(``scan``), the data, the linear baselines and the trainer. docs/df-mamba.md describes what is built
and what the paper's text leaves open.
"""

from .model import DFMamba, DFMambaConfig, Forecast, level_lengths, total_loss
from .scan import chunked_scan, sequential_scan

__all__ = ["DFMamba", "DFMambaConfig", "Forecast", "chunked_scan", "level_lengths", "sequential_scan",
           "total_loss"]
