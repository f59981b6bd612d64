"""A tiny retained-mode drawing surface: each picture is drawn once, then written as SVG (for the HTML report,
by hand: fast, deterministic, text stays searchable) or rasterised to PNG (for MCP hosts, through matplotlib's
Agg backend, imported only then)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from html import escape
from typing import Any

FONT = "DejaVu Sans, Helvetica, Arial, sans-serif"


@dataclass
class Shape:
    kind: str  # rect | line | text | poly | circle
    args: dict[str, Any]
    cls: str = ""
    title: str = ""


@dataclass
class Canvas:
    """Pixel coordinates, origin top left.  ``cls`` tags let tests and CSS find elements (e.g. ``critical``)."""

    width: float
    height: float
    shapes: list[Shape] = field(default_factory=list)

    def rect(self, x: float, y: float, w: float, h: float, fill: str = "none", stroke: str = "none",
             sw: float = 1.0, rx: float = 0.0, cls: str = "", title: str = "", dash: bool = False) -> None:
        self.shapes.append(Shape("rect", {"x": x, "y": y, "w": w, "h": h, "fill": fill, "stroke": stroke, "sw": sw,
                                          "rx": rx, "dash": dash}, cls, title))

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#444", sw: float = 1.0,
             dash: bool = False, cls: str = "", arrow: bool = False) -> None:
        self.shapes.append(Shape("line", {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "stroke": stroke, "sw": sw,
                                          "dash": dash, "arrow": arrow}, cls))

    def text(self, x: float, y: float, s: str, size: float = 12, anchor: str = "start", weight: str = "normal",
             fill: str = "#222", cls: str = "") -> None:
        """``y`` is the baseline."""
        self.shapes.append(Shape("text", {"x": x, "y": y, "s": s, "size": size, "anchor": anchor, "weight": weight,
                                          "fill": fill}, cls))

    def poly(self, points: list[tuple[float, float]], stroke: str = "#444", sw: float = 1.5, fill: str = "none",
             cls: str = "") -> None:
        self.shapes.append(Shape("poly", {"points": points, "stroke": stroke, "sw": sw, "fill": fill}, cls))

    def circle(self, x: float, y: float, r: float, fill: str, stroke: str = "none", sw: float = 1.0, cls: str = "",
               title: str = "") -> None:
        self.shapes.append(Shape("circle", {"x": x, "y": y, "r": r, "fill": fill, "stroke": stroke, "sw": sw},
                                 cls, title))

    def classes(self) -> list[str]:
        return [s.cls for s in self.shapes if s.cls]

    def texts(self) -> list[str]:
        return [s.args["s"] for s in self.shapes if s.kind == "text"]

    # ------------------------------------------------------------------------------------------------ SVG
    def to_svg(self, label: str = "") -> str:
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_n(self.width)} {_n(self.height)}" '
               f'width="{_n(self.width)}" height="{_n(self.height)}" role="img" aria-label="{escape(label)}" '
               f'font-family="{FONT}">',
               '<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" '
               'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#555"/></marker></defs>']
        for s in self.shapes:
            a = s.args
            c = f' class="{s.cls}"' if s.cls else ""
            tip = f"<title>{escape(s.title)}</title>" if s.title else ""
            if s.kind == "rect":
                dash = ' stroke-dasharray="4 3"' if a["dash"] else ""
                rx = f' rx="{_n(a["rx"])}"' if a["rx"] else ""
                body = (f'<rect x="{_n(a["x"])}" y="{_n(a["y"])}" width="{_n(a["w"])}" height="{_n(a["h"])}"{rx} '
                        f'fill="{a["fill"]}" stroke="{a["stroke"]}" stroke-width="{_n(a["sw"])}"{dash}{c}')
                out.append(f"{body}>{tip}</rect>" if tip else f"{body}/>")
            elif s.kind == "line":
                dash = ' stroke-dasharray="5 4"' if a["dash"] else ""
                mark = ' marker-end="url(#arr)"' if a["arrow"] else ""
                out.append(f'<line x1="{_n(a["x1"])}" y1="{_n(a["y1"])}" x2="{_n(a["x2"])}" y2="{_n(a["y2"])}" '
                           f'stroke="{a["stroke"]}" stroke-width="{_n(a["sw"])}"{dash}{mark}{c}/>')
            elif s.kind == "text":
                weight = ' font-weight="bold"' if a["weight"] == "bold" else ""
                out.append(f'<text x="{_n(a["x"])}" y="{_n(a["y"])}" font-size="{_n(a["size"])}" '
                           f'text-anchor="{a["anchor"]}" fill="{a["fill"]}"{weight}{c}>{escape(a["s"])}</text>')
            elif s.kind == "poly":
                pts = " ".join(f"{_n(x)},{_n(y)}" for x, y in a["points"])
                out.append(f'<polyline points="{pts}" fill="{a["fill"]}" stroke="{a["stroke"]}" '
                           f'stroke-width="{_n(a["sw"])}"{c}/>')
            elif s.kind == "circle":
                body = (f'<circle cx="{_n(a["x"])}" cy="{_n(a["y"])}" r="{_n(a["r"])}" fill="{a["fill"]}" '
                        f'stroke="{a["stroke"]}" stroke-width="{_n(a["sw"])}"{c}')
                out.append(f"{body}>{tip}</circle>" if tip else f"{body}/>")
        out.append("</svg>")
        return "\n".join(out)

    # ------------------------------------------------------------------------------------------------ PNG
    def to_png(self, scale: float = 1.0) -> bytes:
        """Rasterise with matplotlib's Agg backend (no display, no pyplot state); deterministic bytes."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch, Rectangle

        dpi = 100 * scale
        fig = Figure(figsize=(self.width / 100, self.height / 100), dpi=dpi)
        FigureCanvasAgg(fig)
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, self.width)
        ax.set_ylim(self.height, 0)
        ax.axis("off")
        pt = 72 / 100  # one canvas pixel in points
        for s in self.shapes:
            a = s.args
            if s.kind == "rect":
                fill = None if a["fill"] == "none" else a["fill"]
                edge = "none" if a["stroke"] == "none" else a["stroke"]
                style = "--" if a["dash"] else "-"
                if a["rx"]:
                    ax.add_patch(FancyBboxPatch((a["x"], a["y"]), a["w"], a["h"],
                                                boxstyle=f"round,pad=0,rounding_size={a['rx']}",
                                                facecolor=fill or "none",
                                                edgecolor=edge, linewidth=a["sw"] * pt, linestyle=style))
                else:
                    ax.add_patch(Rectangle((a["x"], a["y"]), a["w"], a["h"], facecolor=fill or "none",
                                           edgecolor=edge, linewidth=a["sw"] * pt, linestyle=style))
            elif s.kind == "line":
                style = "--" if a["dash"] else "-"
                if a["arrow"]:
                    ax.add_patch(FancyArrowPatch((a["x1"], a["y1"]), (a["x2"], a["y2"]), arrowstyle="-|>",
                                                 mutation_scale=8, color=a["stroke"], linewidth=a["sw"] * pt,
                                                 linestyle=style, shrinkA=0, shrinkB=0))
                else:
                    ax.add_line(Line2D([a["x1"], a["x2"]], [a["y1"], a["y2"]], color=a["stroke"],
                                       linewidth=a["sw"] * pt, linestyle=style))
            elif s.kind == "text":
                ha = {"start": "left", "middle": "center", "end": "right"}[a["anchor"]]
                ax.text(a["x"], a["y"], a["s"], fontsize=a["size"] * pt, ha=ha, va="baseline", color=a["fill"],
                        fontweight=a["weight"], family="DejaVu Sans")
            elif s.kind == "poly":
                xs, ys = zip(*a["points"], strict=True) if a["points"] else ((), ())
                ax.add_line(Line2D(list(xs), list(ys), color=a["stroke"], linewidth=a["sw"] * pt))
            elif s.kind == "circle":
                ax.add_patch(Circle((a["x"], a["y"]), a["r"], facecolor=a["fill"],
                                    edgecolor="none" if a["stroke"] == "none" else a["stroke"], linewidth=a["sw"] * pt))
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=dpi, facecolor="white", metadata={"Software": None})
        return buf.getvalue()


def _n(v: float) -> str:
    """Numbers in SVG: at most one decimal, no trailing zeros (smaller, stable output)."""
    r = round(float(v), 1)
    return str(int(r)) if r == int(r) else f"{r:.1f}"
