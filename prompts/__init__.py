"""Prompt texts for agents: the planning system prompt and the MCP prompts, kept as markdown next to this file.

Texts live in files so they can be reviewed and evaluated like code; ``render`` fills ``{{name}}`` slots
(double braces, so the JSON examples in the texts need no escaping).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

__all__ = ["NAMES", "load", "render", "system_prompt", "tool_guides"]

ROOT = Path(__file__).resolve().parent
NAMES = ("system", "plan_deployment", "review_plan", "review_command", "explain_violation")
_SLOT = re.compile(r"\{\{(\w+)\}\}")


@cache
def load(name: str) -> str:
    """The raw text of one prompt (``system``, ``plan_deployment``, ``review_plan``, ``review_command``,
    ``explain_violation``)."""
    if name not in NAMES:
        raise KeyError(f"unknown prompt {name!r}; known: {', '.join(NAMES)}")
    return (ROOT / f"{name}.md").read_text(encoding="utf-8")


def render(name: str, **values: object) -> str:
    """The prompt with its ``{{slots}}`` filled; a slot without a value is an error (catches typos)."""

    def fill(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in values:
            raise KeyError(f"prompt {name!r} needs a value for {key!r}")
        return str(values[key])

    return _SLOT.sub(fill, load(name))


def system_prompt() -> str:
    """The planning agent's system prompt."""
    return load("system")


@cache
def tool_guides() -> dict[str, str]:
    """The detailed guide of each tool whose description points to one (``tools.md``, one ``## <tool>`` section
    each): what does not fit in a tool description of at most 1,024 characters."""
    text = (ROOT / "tools.md").read_text(encoding="utf-8")
    sections = re.split(r"^## (\w+)\n", text, flags=re.MULTILINE)[1:]
    return {name: f"# {name}\n{body.rstrip()}\n" for name, body in zip(sections[::2], sections[1::2], strict=True)}
