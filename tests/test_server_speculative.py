"""Over MCP, an agent asking for "DeepSeek-R1 on 8 H200 with MTP" gets the speculative plan, its memory and its
served figures beside the plan without it: from estimate_performance on the plan it states, and from
search_strategies when it lets the search choose the draft length."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client

from server import create_server

pytestmark = pytest.mark.anyio

HW = {"gpu": "h200", "num_gpus": 8}
WL = {"input_len": 1024, "output_len": 1024, "concurrency": 8}
R1_MTP: dict[str, Any] = {"model": "deepseek-r1", "hardware": HW, "parallel": {"tp": 8, "ep": 8}, "dtype": "fp8",
                          "engine": "sglang", "workload": WL, "speculative": {"method": "mtp", "num_draft_tokens": 3}}


@pytest.fixture
def anyio_backend():
    return "asyncio"


async def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    async with Client(create_server(), mode="legacy") as c:
        r = await c.call_tool(name, args)
    assert not r.is_error, r.content
    return r.structured_content


async def test_estimate_gives_the_mtp_plan_its_memory_and_served_figures_beside_the_plain_plan() -> None:
    with_ = await _call("estimate_performance", {"plan": R1_MTP})
    plain = await _call("estimate_performance", {"plan": {k: v for k, v in R1_MTP.items() if k != "speculative"}})
    sp = with_["speculative"]
    assert sp["method"] == "mtp" and sp["num_draft_tokens"] == 3
    assert sp["tpot_with_ms"] == with_["tpot_ms"] < sp["tpot_without_ms"]
    assert sp["tpot_without_ms"] == pytest.approx(plain["tpot_ms"], rel=1e-3)  # the same load without MTP
    assert sp["output_tokens_per_s_with"] > sp["output_tokens_per_s_without"]
    assert with_["memory"]["max_gpu_bytes"] > plain["memory"]["max_gpu_bytes"]  # the MTP layer's weights and KV
    assert with_["memory"]["fits"]


async def test_search_lets_the_agent_allow_mtp_and_shows_the_plan_without_it() -> None:
    s = await _call("search_strategies", {"model": "deepseek-r1", "hardware": HW, "workload": WL, "dtype": "fp8",
                                          "engine": "sglang", "disaggregated": False, "top_k": 2,
                                          "speculative": {"method": "mtp", "num_draft_tokens": 3}})
    best = s["top"][0]
    assert best["plan"]["speculative"]["method"] == "mtp"
    assert "without it: TTFT" in best["reason"] and "GB" in best["reason"]
    assert best["memory_max_gpu_bytes"] > 0
