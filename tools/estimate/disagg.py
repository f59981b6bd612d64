"""Disaggregated prefill/decode: each pool's rate and their balance.

KV hand-off: tools/core/handoff.py (validation quotes the same figure).

Rates.  A prefill replica turns out ``batch`` requests per pass, a new pass every
``max(prefill latency, transfer time)`` (the hand-off of one batch overlaps the next pass); a decode replica
finishes ``batch`` requests every ``output_len`` decode steps.  The deployment's request rate is the smaller
of the two pools' rates; ``pool_balance = prefill rate / decode rate`` (1 = balanced) and the replica ratio
that would balance them is ``decode replica rate / prefill replica rate`` prefill replicas per decode replica.
"""

from __future__ import annotations

import math


def _fewest(most: int, rate: float, target: float) -> int:
    """Fewest replicas in 1..most whose rate reaches ``target`` (extra ones would idle); ``most`` when none does.
    Closed form, then a step either way for rounding: the pool split runs this once per prefill count."""
    if most * rate < target:
        return most
    n = max(1, min(most, math.ceil(target / rate))) if rate > 0 else 1
    while n > 1 and (n - 1) * rate >= target:
        n -= 1
    while n < most and n * rate < target:
        n += 1
    return n


def balanced_split(rate_p: float, gpus_p: int, rate_d: float, gpus_d: int, gpus: int) -> tuple[int, int]:
    """(prefill replicas, decode replicas) within ``gpus`` GPUs that maximise min(prefill rate, decode rate);
    ties: fewer GPUs.  (0, 0) when one replica of each does not fit."""
    best: tuple[float, int, int, int] | None = None
    for n_p in range(1, gpus // gpus_p + 1):
        n_d = (gpus - n_p * gpus_p) // gpus_d
        if n_d < 1:
            break
        n_d = _fewest(n_d, rate_d, n_p * rate_p)
        rate = min(n_p * rate_p, n_d * rate_d)
        used = n_p * gpus_p + n_d * gpus_d
        key = (-rate, used, n_p, n_d)
        if best is None or key < best:
            best = key
    return (best[2], best[3]) if best else (0, 0)
