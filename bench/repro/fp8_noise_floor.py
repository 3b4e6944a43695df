"""How much top-1 agreement a given cosine buys on a classifier's logits: the noise floor of issue 21's FP8 target.

Adds isotropic Gaussian noise of a chosen relative L2 size to the FP32 logits of held-out samples (as saved
by ``bench/quant_accuracy.py --save-logits``, e.g. ``OUT/ViT_random_small_fp32.npy``) and measures top-1 agreement with the clean logits, averaged over
many draws. Random-weight classifiers have near-tied top-2 logits, so the same cosine costs them far more
top-1 agreement than a trained model; this script puts a number on it.

Usage:
    python bench/repro/fp8_noise_floor.py LOGITS.npy [--cosine 0.9968 0.999 0.9995]
"""

from __future__ import annotations

import argparse

import numpy as np


def top1_under_noise(logits: np.ndarray, rel_l2: float, draws: int = 200, seed: int = 0) -> tuple[float, float]:
    """(mean, standard deviation) over ``draws`` of the top-1 agreement of ``logits`` plus noise whose L2 norm is
    ``rel_l2`` times each sample's own."""
    rng = np.random.default_rng(seed)
    top = logits.argmax(1)
    norms = np.linalg.norm(logits, axis=1, keepdims=True)
    agree = []
    for _ in range(draws):
        noise = rng.standard_normal(logits.shape)
        noise *= rel_l2 * norms / np.linalg.norm(noise, axis=1, keepdims=True)
        agree.append(float(np.mean((logits + noise).argmax(1) == top)))
    return float(np.mean(agree)), float(np.std(agree))


def rel_l2_of_cosine(cos: float) -> float:
    """The relative L2 of isotropic noise that leaves cosine ``cos`` with the clean vector (1 / sqrt(1 + r²))."""
    return float(np.sqrt(1.0 / cos**2 - 1.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logits", help=".npy of FP32 logits, (samples, classes)")
    parser.add_argument("--cosine", type=float, nargs="+", default=[0.9965, 0.998, 0.999, 0.9995, 0.9999])
    parser.add_argument("--draws", type=int, default=200)
    args = parser.parse_args()
    logits = np.load(args.logits).astype(np.float64)
    srt = np.sort(logits, axis=1)
    gap = np.median((srt[:, -1] - srt[:, -2]) / logits.std(axis=1))
    print(f"{len(logits)} samples, {logits.shape[1]} classes; median top-1/top-2 gap {gap:.3f} logit std")
    print("| cosine vs FP32 | relative L2 | expected top-1 agreement (mean ± sd) |\n|---:|---:|---|")
    for cos in args.cosine:
        r = rel_l2_of_cosine(cos)
        mean, sd = top1_under_noise(logits, r, args.draws)
        print(f"| {cos:.5f} | {r:.4f} | {mean:.3f} ± {sd:.3f} |")


if __name__ == "__main__":
    main()
