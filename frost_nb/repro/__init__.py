"""The reproduction: named grids of runs, the fidelity experiments, the claims and their verdicts, provenance."""
