"""Pictures through MCP, over a real stdio session: `render: true` adds PNG image content beside a text summary."""

from __future__ import annotations

import base64
import re

import pytest
from mcp import Client

from tests.test_server_stdio import PARAMS

pytestmark = pytest.mark.anyio

MOE = {"model": "mixtral-8x7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8}}


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _pngs(result) -> list[bytes]:
    return [base64.b64decode(c.data) for c in result.content if c.type == "image"]


async def test_render_over_stdio():
    async with Client(PARAMS, read_timeout_seconds=120) as c:
        plain = await c.call_tool("estimate_performance", {"plan": MOE})
        assert not plain.is_error and not _pngs(plain)
        r = await c.call_tool("estimate_performance", {"plan": MOE, "render": True})
        assert not r.is_error, r.content
        images = [x for x in r.content if x.type == "image"]
        assert len(images) == 4 and all(x.mime_type == "image/png" for x in images)
        for png in _pngs(r):
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) < 300_000
        summary = next(x.text for x in r.content if x.type == "text" and x.text.startswith("Pictures"))
        assert "dag, timeline-prefill, timeline-decode, memory" in summary
        ttft = r.structured_content["ttft_ms"]  # rounded to 4 significant digits in the answer
        shown = re.search(r"TTFT ([\d.]+) ms", summary)
        assert shown and abs(float(shown.group(1)) - ttft) <= 0.06
        assert r.structured_content == plain.structured_content  # the answer itself is unchanged
        s = await c.call_tool("search_strategies", {"model": "llama-3.1-8b", "render": True,
                                                    "hardware": {"gpu": "h100-sxm", "num_gpus": 2}})
        assert not s.is_error and len(_pngs(s)) == 1
        assert any(x.type == "text" and x.text.startswith("Pictures (pareto)") for x in s.content)


async def test_render_from_a_dag_in_process():
    from server import create_server
    from tools import build_dag

    small = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2}}
    dag = build_dag(small).model_dump(mode="json")
    async with Client(create_server(), mode="legacy") as c:
        r = await c.call_tool("estimate_performance", {"dag": dag, "render": True})
        assert not r.is_error, r.content
        assert len(_pngs(r)) == 4
        bad = await c.call_tool("estimate_performance", {"render": True})
        assert bad.is_error and "plan" in bad.content[0].text
