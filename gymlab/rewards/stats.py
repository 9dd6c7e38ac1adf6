"""Exact statistics for reward profiles: unbiased pass@k, majority@k, the Student t quantile (no SciPy)."""

from __future__ import annotations

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


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t distribution with ``df`` degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
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
