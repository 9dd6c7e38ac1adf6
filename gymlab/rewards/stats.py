"""Exact statistics for reward profiles: unbiased pass@k, majority@k, the Student t quantile (no SciPy)."""

from __future__ import annotations

import functools
import math


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` successes: ``1 - C(n-c, k) / C(n, k)``."""
    if not 0 < k <= n:
        raise ValueError(f"pass@k needs 0 < k <= n, got k={k}, n={n}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_at_k(n: int, c: int, k: int) -> float:
    """Unbiased majority@k: the chance more than half of ``k`` of ``n`` samples succeed (a tie: one half)."""
    if not 0 < k <= n:
        raise ValueError(f"majority@k needs 0 < k <= n, got k={k}, n={n}")
    total = 0.0
    for j in range(max(0, k - (n - c)), min(c, k) + 1):
        weight = 1.0 if 2 * j > k else 0.5 if 2 * j == k else 0.0
        total += weight * math.comb(c, j) * math.comb(n - c, k - j)
    return total / math.comb(n, k)


def t_cdf(t: float, df: int) -> float:
    """CDF of Student's t distribution with ``df`` (whole) degrees of freedom: the finite series of
    Abramowitz and Stegun 26.7.3-4."""
    import numpy as np

    theta, even, j = math.atan(t / math.sqrt(df)), df % 2 == 0, np.arange(1, df // 2)
    ratios = math.cos(theta) ** 2 * ((2 * j - 1) / (2 * j) if even else 2 * j / (2 * j + 1))
    terms = np.cumprod(np.concatenate(([1.0 if even else math.cos(theta)], ratios)))[: df // 2]
    series = math.sin(theta) * float(terms.sum())
    return 0.5 + (series if even else (theta + series) * 2 / math.pi) / 2


@functools.cache
def t_quantile(p: float, df: int) -> float:
    """Inverse of ``t_cdf`` by bisection (to 1e-12)."""
    low, high = -1e3, 1e3
    for _ in range(200):
        mid = (low + high) / 2.0
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12:
            break
    return (low + high) / 2.0


def t_interval_95(mean: float, se: float, n: int) -> tuple[float, float]:
    """The 95 % t interval ``mean +- t(0.975, n-1) * se`` (the interval is the mean itself when se is 0)."""
    if se == 0.0 or n < 2:
        return mean, mean
    half = t_quantile(0.975, n - 1) * se
    return mean - half, mean + half
