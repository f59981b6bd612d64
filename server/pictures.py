"""Pictures as MCP image content: PNGs of the plan report beside a text summary (for hosts that show no images)."""

from __future__ import annotations

import base64
from typing import Any

from mcp.types import CallToolResult, ImageContent, TextContent

from tools.pictures.canvas import Canvas

MAX_PNG_BYTES = 300_000


def png_under(canvas: Canvas, limit: int = MAX_PNG_BYTES) -> bytes:
    """The picture as PNG, shrunk until it is under ``limit`` bytes (a host may refuse larger images)."""
    scale = 1.0
    data = canvas.to_png(scale)
    while len(data) >= limit and scale > 0.3:
        scale *= 0.75
        data = canvas.to_png(scale)
    return data


def attach(result: CallToolResult, summary: str, canvases: dict[str, Canvas]) -> CallToolResult:
    """Append the summary and one image per picture to a tool's answer (its structured content is unchanged)."""
    names = ", ".join(canvases)
    content: list[Any] = [*result.content, TextContent(type="text", text=f"Pictures ({names}):\n{summary}")]
    for canvas in canvases.values():
        content.append(ImageContent(type="image", mime_type="image/png",
                                    data=base64.b64encode(png_under(canvas)).decode("ascii")))
    result.content = content
    return result


def plan_images(result: CallToolResult, plan: dict[str, Any]) -> CallToolResult:
    from tools.pictures.report import plan_pictures

    pics = plan_pictures(plan)
    return attach(result, pics.summary(), {k: v for k, v in pics.canvases.items() if k != "pareto"})


def search_images(result: CallToolResult, search: Any) -> CallToolResult:
    from tools.pictures.pareto import draw_pareto

    best = f"best: {search.top[0].label}, " if search.top else ""
    summary = (f"Pareto front of {len(search.pareto)} plans (output tok/s per GPU vs TPOT); {best}"
               f"rejected by rule: " + ", ".join(f"{k} {v}" for k, v in search.rejected.items()))
    return attach(result, summary, {"pareto": draw_pareto(search)})
