"""Speculative decoding and prefix caching: plan fields, validation, memory, pricing, engine import/export."""

from __future__ import annotations

import pytest

from tools.core.errors import PdagInputError
from tools.core.plan import parse_plan

R1 = {"model": "deepseek-v3", "hardware": {"gpu": "h200", "num_gpus": 8}, "parallel": {"tp": 8, "ep": 8},
      "dtype": "fp8", "engine": "vllm"}


def test_old_plans_parse_without_the_new_fields():
    p = parse_plan(R1)
    assert p.speculative is None and p.prefix_caching is None and p.prefix_hit_fraction == 0.0


def test_fields_parse_and_state_their_hit_fraction():
    p = parse_plan({**R1, "speculative": {"method": "mtp", "num_draft_tokens": 3},
                    "prefix_caching": {"shared_prefix_len": 512}, "workload": {"input_len": 1024}})
    assert p.speculative.num_draft_tokens == 3 and p.prefix_hit_fraction == 0.5
    assert parse_plan({**R1, "prefix_caching": {"enabled": False, "hit_rate": 0.9}}).prefix_hit_fraction == 0.0


@pytest.mark.parametrize("bad", [
    {"speculative": {"method": "medusa"}},
    {"speculative": {"method": "mtp", "acceptance_rate": 0.8, "mean_accepted_tokens": 1.8}},
    {"speculative": {"method": "mtp", "num_draft_tokens": 1, "mean_accepted_tokens": 2.5}},
    {"speculative": {"method": "eagle", "draft_tp": 1}},
    {"prefix_caching": {"shared_prefix_len": 4096}, "workload": {"input_len": 1024}},
    {"prefix_caching": {"shared_prefix_len": 10, "hit_rate": 0.5}},
])
def test_inconsistent_fields_are_input_errors(bad):
    with pytest.raises(PdagInputError):
        parse_plan({**R1, **bad})
