"""Determinism harness of the serving simulator: a spread of plans and loads, each result's JSON digest pinned.

Why: the simulator is optimised for speed (issue 40), and an optimisation must not move a figure.  The digests are
those of the simulator before the optimisation; a change that alters any simulated result, on purpose or not, fails
here (a deliberate model change re-pins them with ``python -m tests.test_simulate_golden``, saying why).
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.fixtures.generate import ADP_DSV3, DIS_ADP_DSV3, P_ADP, P_DIS, TINY, TINY_MOE
from tools.core.plan import parse_plan
from tools.estimate.simulate import simulate

H100 = {"gpu": "h100-sxm", "num_gpus": 1}
BASE: dict[str, Any] = {"model": "llama-3.1-8b", "hardware": H100, "engine": "vllm"}
RANGED = {"input_len_range": [500, 1500], "output_len_range": [32, 192]}


def _wl(**kw: Any) -> dict[str, Any]:
    return {"input_len": 1024, "output_len": 128, **kw}


CASES: dict[str, dict[str, Any]] = {
    "closed fixed vllm": {**BASE, "workload": _wl(concurrency=16, num_requests=96)},
    "closed ranged vllm": {**BASE, "workload": _wl(concurrency=24, num_requests=120, seed=3, **RANGED)},
    "closed ranged sglang": {**BASE, "engine": "sglang", "workload": _wl(concurrency=24, num_requests=120, **RANGED)},
    "closed ranged trtllm": {**BASE, "engine": "trtllm", "workload": _wl(concurrency=24, num_requests=120, **RANGED)},
    "poisson uncapped vllm": {**BASE, "workload": _wl(request_rate=30.0, num_requests=150, **RANGED)},
    "poisson capped sglang": {**BASE, "engine": "sglang",
                              "workload": _wl(request_rate=60.0, concurrency=8, num_requests=120, seed=7)},
    "poisson capped trtllm": {**BASE, "engine": "trtllm", "workload": _wl(request_rate=200.0, concurrency=12,
                                                                          num_requests=100, **RANGED)},
    "burst vllm": {**BASE, "workload": _wl(num_requests=150, output_len_range=[16, 512])},
    "burst sglang": {**BASE, "engine": "sglang", "workload": _wl(num_requests=100, output_len_range=[16, 256])},
    "kv wall vllm preempts": {**BASE, "engine_options": {"kv_cache_tokens": 20_000},
                              "workload": _wl(concurrency=32, num_requests=96, output_len=1024, **{
                                  "output_len_range": [512, 1536]})},
    "kv wall sglang retracts": {**BASE, "engine": "sglang", "engine_options": {"kv_cache_tokens": 20_000},
                                "workload": _wl(concurrency=32, num_requests=96, output_len=1024)},
    "kv wall trtllm reserves": {**BASE, "engine": "trtllm", "engine_options": {"kv_cache_tokens": 20_000},
                                "workload": _wl(concurrency=32, num_requests=64, output_len=1024)},
    "vllm max_num_seqs": {**BASE, "engine_options": {"max_num_seqs": 8},
                          "workload": _wl(concurrency=20, num_requests=80, **RANGED)},
    "dp replicas": {**BASE, "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"dp": 2},
                    "workload": _wl(concurrency=20, num_requests=100, **RANGED)},
    "dp replicas poisson sglang": {**BASE, "engine": "sglang", "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
                                   "parallel": {"dp": 2}, "workload": _wl(request_rate=40.0, num_requests=100)},
    "tiny dense tp2": {"model": TINY, "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2},
                       "workload": _wl(concurrency=8, num_requests=40, output_len=64)},
    "attention-dp moe": {**P_ADP, "workload": _wl(concurrency=32, num_requests=96, **RANGED)},
    "attention-dp moe sglang kv wall": {**P_ADP, "engine": "sglang", "engine_options": {"kv_cache_tokens": 30_000},
                                        "workload": _wl(concurrency=32, num_requests=64, output_len=512)},
    "tiny moe ep2 trtllm": {"model": TINY_MOE, "hardware": {"gpu": "h100-sxm", "num_gpus": 2},
                            "parallel": {"ep": 2, "tp": 2}, "engine": "trtllm",
                            "workload": _wl(request_rate=100.0, num_requests=80)},
    "disaggregated vllm": {**P_DIS, "workload": _wl(concurrency=16, num_requests=64, **RANGED)},
    "disaggregated sglang poisson": {**P_DIS, "engine": "sglang", "workload": _wl(request_rate=50.0,
                                                                                  num_requests=80)},
    "disaggregated trtllm burst": {**P_DIS, "engine": "trtllm", "workload": _wl(num_requests=60)},
    "disaggregated kv wall": {**P_DIS, "engine_options": {"kv_cache_tokens": 8_000},
                              "workload": _wl(concurrency=24, num_requests=72, output_len=512)},
    "deepseek-v3 attention-dp pp2": {**ADP_DSV3, "workload": _wl(concurrency=128, num_requests=256, **RANGED)},
    "deepseek-v3 disaggregated attention-dp decode sglang": {
        **DIS_ADP_DSV3, "engine": "sglang", "workload": _wl(concurrency=64, num_requests=128, **RANGED)},
    "sharegpt lengths vllm": {**BASE, "workload": {"length_dataset": "sharegpt", "concurrency": 24,
                                                   "num_requests": 120}},
    "attention-dp moe sharegpt poisson": {**P_ADP, "workload": {"length_dataset": "sharegpt", "request_rate": 200.0,
                                                                 "num_requests": 120}},
}

GOLDEN: dict[str, str] = {
    'closed fixed vllm': 'ca4e2afa72487286dc43',
    'closed ranged vllm': 'b9d4eb218bdbd88d2f63',
    'closed ranged sglang': 'cbdaa761b9ea8c17f3dd',
    'closed ranged trtllm': 'e76c4dde382e9bb4d1da',
    'poisson uncapped vllm': 'b38cfa342f5369a24f88',
    'poisson capped sglang': 'a32871c38d27c2fc5c02',
    'poisson capped trtllm': '431bceb332e3f2b9335d',
    'burst vllm': 'f34266b28a9c6d93b580',
    'burst sglang': '7b6096b249874e328131',
    'kv wall vllm preempts': 'b3f4a3e464193222f4c1',
    'kv wall sglang retracts': '66c15ac8f7bcb8f54a83',
    'kv wall trtllm reserves': '2957bfd939182615f005',
    'vllm max_num_seqs': 'a353a8d11f4d005a496e',
    'dp replicas': '5c47483168f0eb6217f1',
    'dp replicas poisson sglang': 'a2d1eecad9729030d772',
    'tiny dense tp2': '2763537ad16d03235a9a',
    'attention-dp moe': '7a36ed1663af1dd8c610',
    'attention-dp moe sglang kv wall': '0be5cc23b31da85ab61d',
    'tiny moe ep2 trtllm': '97afd8b1f1230af3d5a9',
    'disaggregated vllm': 'bd526be3323da44a6c57',
    'disaggregated sglang poisson': '31e7cee5bc2433873031',
    'disaggregated trtllm burst': '26e1121b4afb7c1ac266',
    'disaggregated kv wall': '206a43ffab67fc473e9e',
    'deepseek-v3 attention-dp pp2': '5e48391e115afe25ed29',
    'deepseek-v3 disaggregated attention-dp decode sglang': 'ecad380433d430f89dc0',
    'sharegpt lengths vllm': 'b6b6905af707829178c0',
    'attention-dp moe sharegpt poisson': '3e6fb6066e0e12ae6434',
}


def digest(name: str) -> str:
    return hashlib.sha256(simulate(parse_plan(CASES[name])).model_dump_json().encode()).hexdigest()[:20]


@pytest.mark.parametrize("name", sorted(CASES))
def test_simulation_reproduces_its_pinned_digest(name: str) -> None:
    assert digest(name) == GOLDEN[name]


if __name__ == "__main__":
    for case in CASES:
        print(f"    {case!r}: {digest(case)!r},")
