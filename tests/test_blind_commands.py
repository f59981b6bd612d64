"""Published launch commands gathered blind (``tests/data/blind_commands.json``: vLLM, SGLang, TensorRT-LLM,
Dynamo and llm-d recipes, 44 deployments on 2 to 36 GPUs, by a helper who never saw pdag): each one an engine
officially recommends imports into a plan that validates with the GPU count its source states.  The one pdag
cannot read, llm-d's, computes its data-parallel size in the shell, and the error says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools import validate_dag
from tools.core.errors import PdagInputError
from tools.engines.launch import import_deployment

DOC = json.loads((Path(__file__).parent / "data" / "blind_commands.json").read_text())
SHELL_ARITHMETIC = {"llmd-wide-ep-dsr1-0528-dep16-pd"}
CASES = [c for c in DOC["commands"] if c["id"] not in SHELL_ARITHMETIC]


def _import(c: dict[str, Any]) -> Any:
    return import_deployment(c["command"], gpu=c["gpu"], gpus_per_node=c["gpus_per_node"],
                             engine_config=c.get("engine_config"), replicas=c.get("replicas", 1),
                             decode_command=c.get("decode_command"),
                             decode_engine_config=c.get("decode_engine_config"),
                             decode_replicas=c.get("decode_replicas", 1))


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_a_published_command_is_accepted_with_its_gpu_count(case: dict[str, Any]) -> None:
    plan = _import(case).plan
    v = validate_dag(plan=plan)
    assert v.valid, [(x.rule_id, x.message[:120]) for x in v.violations if x.severity == "error"]
    assert v.gpus_used == case["gpus"]


def test_the_corpus_spans_engines_and_scales() -> None:
    assert {c["engine"] for c in DOC["commands"]} >= {"vllm", "sglang", "trtllm", "dynamo", "llm-d"}
    assert sum("decode_command" in c for c in DOC["commands"]) >= 8
    assert max(c["gpus"] for c in CASES) >= 32


@pytest.mark.parametrize("case", [c for c in DOC["commands"] if c["id"] in SHELL_ARITHMETIC])
def test_a_command_computed_in_the_shell_is_refused_with_that_reason(case: dict[str, Any]) -> None:
    with pytest.raises(PdagInputError) as err:
        _import(case)
    assert "shell" in err.value.problem and "expanded" in (err.value.allowed or "")


@pytest.mark.parametrize("command", ["vllm serve $MODEL_PATH --tensor-parallel-size 8",
                                     "vllm serve meta-llama/Llama-3.1-8B-Instruct --tensor-parallel-size ${TP}"])
def test_unexpanded_shell_variables_are_named_as_such(command: str) -> None:
    with pytest.raises(PdagInputError) as err:
        import_deployment(command)
    assert "shell" in err.value.problem
