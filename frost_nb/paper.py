"""The paper's published numbers (FROST, Yu and Hwang, ICML 2026; ``docs/method.md`` section 11), for
side-by-side tables only: nothing in the library decides anything by them."""

from __future__ import annotations

# Table 1 (ImageNet-100): cos(GAP(h_t), GAP(h_T)), mean (std) over 10K samples; no recurrent row
TABLE1_STEPS = (1, 3, 6, 9, 12, 15)
TABLE1_STEP = 3  # the step claim 1 and the ladder read (the largest frost - basic_ssm gap)
TABLE1 = {
    "vanilla": ((0.384, 0.11), (0.425, 0.11), (0.510, 0.11), (0.622, 0.13), (0.656, 0.13), (0.837, 0.11)),
    "basic_ssm": ((0.054, 0.24), (0.351, 0.19), (0.714, 0.10), (0.901, 0.04), (0.977, 0.01), (0.999, 0.00)),
    "frost": ((0.299, 0.19), (0.697, 0.12), (0.902, 0.04), (0.968, 0.01), (0.993, 0.00), (1.000, 0.00)),
}

# Table 2 (CIFAR-100, T = 16): the halting quantile sweep
TABLE2 = {"quantile": (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0),
          "mean_depth": (4.37, 6.06, 7.26, 8.30, 9.43, 10.77, 12.49, 16.00),
          "accuracy": (0.4539, 0.5240, 0.5578, 0.5772, 0.5947, 0.6070, 0.6177, 0.6199)}

# Minkowski dimension: the paper's number for FROST is lost; baselines "close to" the Koch curve
KOCH_DIMENSION = 1.2619  # log 4 / log 3


def table1_rows() -> list[dict]:
    """Table 1 as rows (model, step, mean, std)."""
    return [{"model": m, "step": t, "mean": mean, "std": std}
            for m, cells in TABLE1.items() for t, (mean, std) in zip(TABLE1_STEPS, cells)]

# Table 3 (ImageNet-100 at 224): parameters (M, backbone), GFLOPs per image at the mean depth,
# throughput (images/s, the paper's hardware); FROST at its mean depth (std in the paper)
TABLE3 = [dict(zip(("backbone", "model", "mean_depth", "params_m", "gflops", "images_per_s"), r)) for r in (
    ("resnet", "vanilla", 16, 1.24, 8.37, 33.1), ("resnet", "recurrent", 16, 0.11, 8.37, 32.9),
    ("resnet", "basic_ssm", 16, 1.49, 82.77, 23.3), ("resnet", "frost", 7.56, 1.49, 39.11, 47.2),
    ("vit", "vanilla", 12, 85.80, 35.13, 21.5), ("vit", "recurrent", 12, 7.83, 35.13, 22.0),
    ("vit", "basic_ssm", 12, 20.81, 65.45, 16.0), ("vit", "frost", 4.53, 20.81, 24.71, 42.3))]
# Table 3: the standard deviation of FROST's exit depth beside its mean depth (the rows above)
TABLE3_FROST_DEPTH_STD = {"resnet": 2.83, "vit": 2.34}


def table3_frost_depth(backbone: str) -> dict[str, float]:
    """FROST's exit depth in Table 3 for ``backbone``: mean, std, T (the baselines' depth) and mean / T."""
    depth = {r["model"]: r["mean_depth"] for r in TABLE3 if r["backbone"] == backbone}
    return {"mean_depth": depth["frost"], "std_depth": TABLE3_FROST_DEPTH_STD[backbone], "steps": depth["vanilla"],
            "depth_fraction": depth["frost"] / depth["vanilla"]}


# DF-Mamba (Fang, Sun and Zhou, "Dynamic Fractal Mamba", ICML 2026; ../shared/papers/df-mamba.txt), the
# sources' system on another axis (docs/df-mamba.md). Table 1, ETTh2, look-back 336: horizon -> (MSE, MAE)
# on standardised values; DLinear's are its own repository's (look-back 336), RLinear's as DF-Mamba quotes them
DFMAMBA_HORIZONS = (96, 192, 336, 720)
DFMAMBA_TABLE1_ETTH2 = {
    "dfmamba": {96: (0.232, 0.323), 192: (0.287, 0.364), 336: (0.329, 0.393), 720: (0.408, 0.437)},
    "dlinear": {96: (0.289, 0.353), 192: (0.383, 0.418), 336: (0.448, 0.465), 720: (0.605, 0.551)},
    "rlinear": {96: (0.288, 0.338), 192: (0.374, 0.390), 336: (0.415, 0.426), 720: (0.420, 0.440)},
}
# Table 2, ETTm2, horizon 96: variant -> (MSE, MAE, parameters in M)
DFMAMBA_TABLE2_ETTM2 = {"full": (0.158, 0.261, 0.658), "S2": (0.210, 0.288, 0.699), "S3": (0.180, 0.282, 0.757),
                        "T2": (0.194, 0.288, 0.658), "T3": (0.186, 0.284, 0.658), "C2": (0.169, 0.274, 0.641),
                        "C3": (0.163, 0.261, 0.649), "L4": (0.174, 0.270, 0.658)}
# Table 14, ETTm2, horizon 96, zero-shot: scale factor -> MSE, DF-Mamba and Affirm
DFMAMBA_TABLE14_ETTM2 = {"dfmamba": {1: 0.158, 2: 0.173, 4: 0.192}, "affirm": {1: 0.167, 2: 0.251, 4: 0.305}}
