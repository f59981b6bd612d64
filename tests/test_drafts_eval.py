"""The drafts suite (evals/drafts.py) on a small seeded sample: the mistakes are caught, repaired and reported
as one root cause each; drafts without a mistake are accepted whatever their drawing style."""

from __future__ import annotations

import random

from evals.drafts import MISTAKES, draft, judge, passes, run_drafts
from evals.run import suite_config


def test_a_sample_meets_the_suite_thresholds():
    fig = run_drafts(40, seed=5)
    assert fig["cases"] == 40
    assert passes(fig, suite_config()["drafts"]), fig


def test_every_mistake_is_caught_and_repaired():
    rnd = random.Random(11)
    seen: set[str] = set()
    while seen != set(MISTAKES):
        made = draft(rnd)
        if made is None or made[0] in seen:
            continue
        out = judge(*made)
        assert out.detected and out.repaired and out.style_ok and out.roots >= 1, out
        seen.add(made[0])


def test_the_suite_is_reproducible():
    assert run_drafts(6, seed=3) == run_drafts(6, seed=3)
