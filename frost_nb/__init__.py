"""frost_nb: a notebook-first reproduction of FROST (Yu and Hwang, ICML 2026, arXiv 2601.19551).

Weight-tied state-space refinement over a shared ResNet or ViT block, a ranking-trained
halting score and a KLL streaming quantile that decides per sample when to stop.
"""

__version__ = "0.1.0"
