"""Collective pricing against published all-reduce microbenchmarks (kernel timings nobody here measured)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.core.efficiency import efficiency_for
from tools.core.layout import Layout
from tools.core.plan import parse_plan
from tools.estimate.costs import CostModel

DATA = json.loads((Path(__file__).parent / "data" / "allreduce_microbench.json").read_text())
ROWS = [(s, r) for s in DATA["sets"] for r in s["rows"]]


def _all_reduce_us(gpu: str, engine: str, tp: int, size_bytes: float) -> float:
    plan = parse_plan({"model": "llama-3.1-70b", "hardware": {"gpu": gpu, "num_gpus": 8}, "engine": engine,
                       "parallel": {"tp": 2}, "workload": {"input_len": 128, "output_len": 8, "batch_size": 1}})
    eff = efficiency_for(plan.accelerator.id, engine=engine)
    model = CostModel(plan, Layout(plan), eff, False)
    devices = list(range(tp))
    link = model.link(devices)
    bw = link.bandwidth_bytes_per_s * eff["comm_bandwidth_efficiency"]
    return model.all_reduce(tp, size_bytes, link, bw, link.latency_us * eff["comm_latency_scale"] * 1e-6) * 1e6


@pytest.mark.parametrize("bench, row", ROWS, ids=[f"{s['engine']}-tp{s['tp']}-{r['bytes']}B" for s, r in ROWS])
def test_all_reduce_within_30_percent_of_the_published_kernel(bench: dict, row: dict) -> None:
    """The engine runs the faster of its kernels; pdag's fastest algorithm should land near it (a two-shot that
    paid the floor once priced 2 MB at 18 us where the kernel takes 26)."""
    got = _all_reduce_us(bench["gpu"], bench["engine"], bench["tp"], row["bytes"])
    best = min(row["one_stage_us"], row["two_stage_us"])
    assert best / 1.3 <= got <= best * 1.3, (got, best)


def test_all_reduce_grows_with_size_like_the_published_kernels() -> None:
    """From 0.5 to 4 MB the published two-stage time grows about 2.5x; a floor-only or bandwidth-only model
    would give about 1x or 8x."""
    for bench in DATA["sets"]:
        small, big = bench["rows"][0], bench["rows"][-1]
        ours = (_all_reduce_us(bench["gpu"], bench["engine"], bench["tp"], big["bytes"])
                / _all_reduce_us(bench["gpu"], bench["engine"], bench["tp"], small["bytes"]))
        theirs = min(big["one_stage_us"], big["two_stage_us"]) / min(small["one_stage_us"], small["two_stage_us"])
        assert theirs / 1.5 <= ours <= theirs * 1.5, (ours, theirs)
