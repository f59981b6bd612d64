"""Reports lead with root causes, every violation has a location, hints are computed for this input and the
arithmetic in messages adds up (issue 13)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from tests.fixtures.generate import P_DENSE, TINY_MOE, dag_of, plan, set_attr
from tools import validate_dag
from tools.core.build import build_full_dag

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rules"


def tp_at_root() -> dict:
    """TP drawn as two whole-model copies under the RequestNode, one per rank."""
    one = build_full_dag(plan(gpus=1))
    d = copy.deepcopy(one)
    d["plan"] = copy.deepcopy(dag_of(P_DENSE)["plan"])
    nodes, edges = [], []
    for n in d["nodes"]:
        if n["type"] == "RequestNode":
            nodes.append({**n, "devices": [0, 1]})
            continue
        nodes.extend({**n, "id": f"{n['id']}@t{r}", "devices": [r], "tp_rank": r} for r in (0, 1))
    for e in d["edges"]:
        for r in (0, 1):
            s = e["source"] if e["source"] == "request" else f"{e['source']}@t{r}"
            edges.append({**e, "source": s, "target": f"{e['target']}@t{r}"})
    d["nodes"], d["edges"] = nodes, edges
    return d


def test_tp_at_the_root_is_one_root_cause():
    v = validate_dag(dag=tp_at_root())
    roots = [x for x in v.violations if x.severity == "error" and x.caused_by is None]
    assert [x.rule_id for x in roots] == ["TP-NOT-EMBED-NORM-ROUTER"]
    assert v.errors > 10  # the consequences are still listed, under their root
    assert all(x.caused_by.startswith("TP-NOT-EMBED-NORM-ROUTER at ") for x in v.violations if x.caused_by)
    assert v.violations[0] is roots[0] or v.violations[0].rule_id == roots[0].rule_id
    assert "draw one replica on GPUs [0, 1]" in roots[0].hint


def test_a_lone_defect_is_its_own_root():
    d = set_attr(copy.deepcopy(dag_of(P_DENSE)), "r0.prefill.L1.norm_attn", type="AllReduceNode")
    v = validate_dag(dag=d)
    assert [x.rule_id for x in v.violations if x.caused_by is None and x.severity == "error"] == \
        ["COMM-REDUCE-OF-SHARDS"]


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_every_violation_has_a_location_and_no_template_hint(path: Path):
    case = json.loads(path.read_text())["reject"]
    kind, value = next(iter(case.items()))
    for v in validate_dag(**{kind: value}).violations:
        assert v.location.nodes or v.location.field, (v.rule_id, v.message)
        assert not (v.hint or "").startswith("the rule is met by e.g."), (v.rule_id, v.hint)


def test_hints_speak_of_this_model():
    """A 4-expert model is never advised with another model's numbers."""
    p = plan(TINY_MOE, 8, parallel={"ep": 8})
    for v in validate_dag(plan=p).violations:
        assert "ep 32" not in (v.hint or "") and "DeepSeek" not in (v.hint or ""), v.hint


def test_gpu_arithmetic_adds_up():
    d = copy.deepcopy(dag_of(P_DENSE))
    set_attr(d, "r0.prefill.L0.norm_attn", devices=[0, 1, 2])
    d["plan"]["hardware"]["num_gpus"] = 2
    msgs = [v.message for v in validate_dag(dag=d).violations if v.rule_id == "GPU-EXCEEDS-CLUSTER"]
    for m in msgs:
        for total, dp, pp, w in re.findall(r"needs (\d+) GPUs \(dp (\d+) x pp (\d+) x W (\d+)\)", m):
            assert int(total) == int(dp) * int(pp) * int(w), m
        assert "use 3 distinct GPUs" in m or "needs 3" not in m, m


def test_pp_drawn_as_replication_is_one_root_cause():
    from tests.fixtures.generate import P_PP

    d = copy.deepcopy(dag_of(P_PP))
    for n in d["nodes"]:
        if n.get("stage") == 1 and n.get("layer") is not None:
            n["layer"] -= 2  # stage 1 runs layers 0-1 again instead of 2-3
        if n["type"] == "PipelineStageNode" and n.get("stage") == 1:
            n["layers"] = [0, 2]
    v = validate_dag(dag=d)
    roots = [x for x in v.violations if x.severity == "error" and x.caused_by is None]
    assert [x.rule_id for x in roots] == ["PP-NOT-REPLICATION"] and v.errors > 3
    assert "instead of layers 0-1 again" in roots[0].hint
