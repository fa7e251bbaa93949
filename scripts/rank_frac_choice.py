"""The size of the adopted (global) ranking sets, chosen by notebook 04's tuning rule.

The three committed runs of ``grid("rank_frac")`` (Fashion-MNIST, demo size, ABLATION_EPOCHS,
seed 0; rank_frac in RANK_FRAC_VALUES, every other setting the adopted bundle's) are scored on
the held-out split (``run_summary``: mean accuracy over Table 2's quantile grid, each run's own
calibrator); ``adopted_label`` applies the rule fixed before the runs (docs/method.md section 13).
Writes ``outputs/metrics/04_rank_frac_global.json`` and prints the table:

    python scripts/rank_frac_choice.py
"""

from __future__ import annotations

from frost_nb.notebook.glue import write_metrics
from frost_nb.notebook.tables import summarise_runs
from frost_nb.repro.grids import RANK_FRAC_REFERENCE, adopted_label, grid
from frost_nb.runs import stored_name, train_or_load


def main() -> None:
    runs = grid("rank_frac", "demo", "fashion-mnist")
    table, _ = summarise_runs({label: train_or_load(cfg, progress=False) for label, cfg in runs.items()})
    reference = f"rank_frac = {RANK_FRAC_REFERENCE}"
    chosen = adopted_label(table["val_score"], reference)
    columns = ["val_score", "val_accuracy", "test_accuracy", "test_accuracy_q0.125", "test_depth_q0.125",
               "test_accuracy_q0.5", "test_depth_q0.5"]
    print(table[columns].round(4).to_string())
    print(f"chosen: {chosen} (reference {reference}; the rule adopts another value only above +0.01)")
    write_metrics("04_rank_frac_global", {
        "dataset": "fashion-mnist", "size": "demo", "bundle": "adopted", "seed": 0,
        "epochs": next(iter(runs.values())).train.epochs, "reference": reference, "chosen": chosen,
        "runs": {label: {"key": stored_name(cfg), "rank_frac": cfg.loss.rank_frac, **table.loc[label, columns].to_dict()}
                 for label, cfg in runs.items()}})


if __name__ == "__main__":
    main()
