"""Published deployment recipes (knowledge/recipes/recipes.json) against search_strategies' top plans."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tools.search.strategies import search_strategies

RECIPES_FILE = Path(__file__).resolve().parent.parent / "knowledge" / "recipes" / "recipes.json"
RECIPES: list[dict[str, Any]] = json.loads(RECIPES_FILE.read_text(encoding="utf-8"))["recipes"]
TOP_N = 3
DEGREES = {"tp", "pp", "dp", "ep"}


def run_recipe(recipe: dict[str, Any]) -> tuple[int | None, list[str]]:
    """Searched with the recipe's own engine profile and weight format.  (rank, among the top plans of the
    recipe's kind, of the first one matching the recipe's stated degrees,
    or None; the labels of those plans).  Plans of the other kind (aggregated / disaggregated) are skipped:
    a disaggregated plan's ``parallel`` holds only its prefill pool."""
    return _run(recipe["id"])


@cache
def _run(recipe_id: str) -> tuple[int | None, list[str]]:
    recipe = next(r for r in RECIPES if r["id"] == recipe_id)
    result = search_strategies(
        model=recipe["model"],
        hardware={"gpu": recipe["gpu"], "num_gpus": recipe["num_gpus"], "gpus_per_node": recipe["gpus_per_node"]},
        workload=recipe.get("workload"),
        objective=recipe["objective"],
        dtype=recipe.get("dtype", "bf16"),
        kv_dtype=recipe.get("kv_dtype"),
        weights=recipe.get("weights"),
        checkpoint=recipe.get("checkpoint"),  # trtllm-serve serves quantized weights only from such a checkpoint
        engine=recipe["engine"],
        top_k=3 * TOP_N,
    )
    kind = recipe.get("kind", "aggregated")
    same = [p for p in result.top if p.kind == kind][:TOP_N]
    stated = {k: v for k, v in recipe["parallel"].items() if v is not None}
    stated.setdefault("attn_dp", 1)
    for rank, plan in enumerate(same, 1):
        par = plan.plan["parallel"]
        if all(par.get(k, 1) == v for k, v in stated.items()):
            return rank, [p.label for p in same]
    return None, [p.label for p in same]


def test_recipes_are_well_formed() -> None:
    assert len(RECIPES) >= 10
    ids = [r["id"] for r in RECIPES]
    assert len(ids) == len(set(ids))
    for r in RECIPES:
        assert r["source"].startswith("https://")
        assert r["objective"] in ("latency", "throughput")
        assert DEGREES <= set(r["parallel"]) <= DEGREES | {"attn_dp"}
        assert r.get("kind", "aggregated") in ("aggregated", "disaggregated")
        assert r["engine"] in ("vllm", "sglang", "trtllm")
        if r["engine"] in ("vllm", "sglang") and r.get("dtype", "bf16") not in ("bf16", "fp16"):
            assert r.get("kv_dtype"), f"{r['id']}: these engines keep a 16-bit KV cache unless told; state kv_dtype"


@pytest.mark.parametrize("recipe", RECIPES, ids=[r["id"] for r in RECIPES])
def test_recipe_search_runs(recipe: dict[str, Any]) -> None:
    rank, labels = run_recipe(recipe)
    assert labels, f"search found no plan for {recipe['id']}"


def test_recipe_match_count(capsys: pytest.CaptureFixture[str]) -> None:
    """At least 10 recipes have their degrees in the top-3 plans of their kind, and at least one attention-DP
    recipe is matched; the count is printed."""
    top1 = top3 = adp = 0
    lines = []
    for recipe in RECIPES:
        rank, labels = run_recipe(recipe)
        top1 += rank == 1
        top3 += rank is not None
        adp += rank is not None and recipe["parallel"].get("attn_dp", 1) > 1
        lines.append(f"{recipe['id']}: rank {rank} (top: {', '.join(labels)})")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
        print(f"recipes matched: top-1 {top1}/{len(RECIPES)}, top-{TOP_N} {top3}/{len(RECIPES)}")
    assert top3 >= 10
    assert adp >= 1
