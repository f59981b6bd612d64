"""The evaluation suite: case files, the scripted agent through the real loop and server, scoring, reports,
recording and replay, and one run over stdio."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals import CASES_DIR
from evals.agent import AgentResult, Transcript
from evals.agents import ReplayAgent, ScriptedAgent
from evals.cases import Case, load_cases, merge_patch, strategies_used
from evals.run import main, run_suite
from evals.scoring import score_case

CATALOG = Path(__file__).resolve().parents[1] / "knowledge" / "rules" / "catalog.json"
CASES = {c.id: c for c in load_cases()}
REPAIR_CASE = "llama70b-h100x8-latency-dp"
INFEASIBLE_CASE = "deepseek-v3-h100x8-infeasible"
ADP_OPT_IN_CASE = "deepseek-v3-h200x8-adp-optin"  # fixed by the case's own fix (opting in)
DISAGG_OPT_IN_CASE = "llama70b-h100x16-disagg-optin"  # fixed through autofix_dag's opt-in alternative


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_cases_cover_the_brief():
    cases = list(CASES.values())
    assert len(cases) >= 30
    models = {c.setting.model for c in cases}
    assert models >= {
        "llama-3.1-8b",
        "llama-3.1-70b",
        "llama-3.1-405b",
        "mistral-7b",
        "mixtral-8x7b",
        "mixtral-8x22b",
        "qwen2.5-72b",
        "qwen3-30b-a3b",
        "qwen3-235b-a22b",
        "deepseek-v3",
        "gpt-oss-120b",
    }
    assert {c.setting.gpu for c in cases} >= {"h100-sxm", "h200", "a100-80gb", "l40s", "mi300x", "b200"}
    sizes = {c.setting.num_gpus for c in cases}
    assert min(sizes) == 1 and max(sizes) == 64
    assert {c.setting.objective for c in cases} == {"latency", "throughput"}
    assert sum(not c.expect.feasible for c in cases) >= 2
    tags = {t for c in cases for t in c.tags}
    assert {"dense", "moe", "long-context", "memory-tight", "infeasible"} <= tags
    assert any("ep" in c.expect.must_use and c.setting.objective == "throughput" for c in cases)
    assert any("dp" in c.expect.must_not_use and c.setting.objective == "latency" for c in cases)


def test_cases_cover_the_opt_in_strategies():
    cases = list(CASES.values())
    rules = {r for c in cases for m in c.mistakes for r in m.rules}
    assert {"ADP-OPT-IN", "ADP-MOE-ONLY", "ADP-EP-SPANS-GROUPS", "DISAGG-OPT-IN"} <= rules
    assert sum("attention-dp" in c.tags for c in cases) >= 4 and sum("disaggregated" in c.tags for c in cases) >= 3
    assert any("attn_dp" in c.expect.must_use and "attn_dp" not in c.task.lower() for c in cases)
    assert any("attn_dp" in c.expect.must_not_use and c.setting.model.startswith("llama") for c in cases)
    assert any({"disaggregated", "attn_dp"} <= set(c.expect.must_use) for c in cases)
    # a disaggregated case whose pools sit on different nodes (DISAGG-TRANSFER-LINK warns, nothing fails)
    assert any("disaggregated" in c.expect.must_use and c.setting.num_gpus > c.setting.gpus_per_node for c in cases)


def test_mistakes_name_catalog_rules():
    known = {r["id"] for r in json.loads(CATALOG.read_text())["rules"]}
    for case in CASES.values():
        assert case.mistakes, case.id
        for m in case.mistakes:
            assert set(m.rules) <= known, (case.id, set(m.rules) - known)


def test_merge_patch_and_strategies():
    plan = {"parallel": {"dp": 2, "tp": 4}, "phases": {"decode": {"tp": 2}}}
    fixed = merge_patch(plan, {"parallel": {"dp": 1}, "phases": None})
    assert fixed == {"parallel": {"dp": 1, "tp": 4}} and plan["parallel"]["dp"] == 2
    assert strategies_used(fixed) == {"tp"}
    assert strategies_used({"parallel": {"sp": 1}, "phases": {"prefill": {"sp": 4}}}) == {"sp"}
    adp = {"parallel": {"attn_dp": 8, "ep": 8}, "options": {"allow_attention_dp": True}}
    assert strategies_used(adp) == {"attn_dp", "ep"}
    assert strategies_used({"parallel": {"attn_dp": 1, "dp": 2}, "options": {"allow_attention_dp": True}}) == {"dp"}
    disagg = {"parallel": {"tp": 8}, "phases": {"decode": {"dp": 2, "tp": 4}}, "options": {"disaggregated": True}}
    assert strategies_used(disagg) == {"tp", "dp", "disaggregated"}
    assert "disaggregated" not in strategies_used({**disagg, "options": {"disaggregated": False}})


def _result(text: str) -> AgentResult:
    return AgentResult(final_text=text, stop_reason="end_turn", turns=1)


def test_scoring_of_infeasible_answers():
    case = CASES[INFEASIBLE_CASE]
    good = score_case(case, _result("No plan fits: it cannot fit on 8 GPUs; it would need 32 H100 GPUs."), [], False)
    assert good.passed and good.answer == "declined"
    vague = score_case(case, _result("Sorry, I am not sure."), [], False)
    assert not vague.passed and not vague.checks["explained"]
    claimed = score_case(case, _result("<plan>" + json.dumps(case.draft) + "</plan> fits fine"), [], False)
    assert not claimed.passed and "gave a plan although nothing fits" in claimed.reasons


def test_scoring_rejects_a_changed_setting_and_an_unvalidated_plan():
    case = CASES[REPAIR_CASE]
    plan = merge_patch(case.draft, {"model": "llama-3.1-8b", "parallel": {"dp": 1, "tp": 8}})
    sc = score_case(case, _result(f"<plan>{json.dumps(plan)}</plan>"), [], False)
    assert not sc.passed and not sc.checks["setting_kept"] and not sc.checks["validated_before_answer"]


@pytest.mark.anyio
async def test_scripted_agent_repairs_and_declines(tmp_path):
    cases = [CASES[REPAIR_CASE], CASES[INFEASIBLE_CASE]]
    res = await run_suite(cases, ScriptedAgent(), transport="inprocess", out_dir=tmp_path)
    repair, infeasible = res.scores
    assert repair.passed, repair.reasons
    assert repair.answer == "plan" and repair.final_plan["parallel"]["dp"] == 1
    assert repair.mistakes[0]["caught_by"] == ["DP-NOT-FOR-LATENCY"]
    assert infeasible.passed, infeasible.reasons
    assert infeasible.answer == "declined"
    assert res.summary["passed"] == 2 and res.summary["mistakes_caught"] == 2
    assert (tmp_path / "report.json").exists() and (tmp_path / "report.md").exists()
    assert (tmp_path / "transcripts" / f"{REPAIR_CASE}.jsonl").exists()


def test_scoring_wants_the_opt_in_strategy_kept():
    case = CASES[ADP_OPT_IN_CASE]
    # autofix_dag's main repair of the draft: attention TP over the same GPUs, valid but not what was asked
    plan = merge_patch(case.draft, {"parallel": {"attn_dp": 1, "tp": 8}})
    sc = score_case(case, _result(f"<plan>{json.dumps(plan)}</plan>"), [], False)
    assert sc.checks["valid"] and not sc.checks["strategies"] and "should use attn_dp" in sc.reasons


@pytest.mark.anyio
async def test_scripted_agent_repairs_opt_in_strategies(tmp_path):
    cases = [CASES[ADP_OPT_IN_CASE], CASES[DISAGG_OPT_IN_CASE]]
    res = await run_suite(cases, ScriptedAgent(), transport="inprocess", out_dir=tmp_path)
    adp, disagg = res.scores
    assert adp.passed and disagg.passed, (adp.reasons, disagg.reasons)
    assert adp.final_plan["options"] == {"allow_attention_dp": True} and adp.final_plan["parallel"]["attn_dp"] == 8
    assert adp.mistakes[0]["caught_by"] == ["ADP-OPT-IN"]
    # autofix_dag would fold the pools into one DP2 x TP8 layout; the agent takes its opt-in alternative instead
    assert disagg.final_plan["options"] == {"disaggregated": True}
    assert disagg.final_plan["phases"] == CASES[DISAGG_OPT_IN_CASE].draft["phases"]
    assert disagg.mistakes[0]["caught_by"] == ["DISAGG-OPT-IN"]
    calls = [json.loads(line) for line in (tmp_path / "transcripts" / f"{DISAGG_OPT_IN_CASE}.jsonl").open()]
    assert "autofix_dag" in [r.get("name") for r in calls if r["type"] == "tool_call"]


@pytest.mark.anyio
async def test_record_then_replay(tmp_path):
    case = CASES[REPAIR_CASE]
    rec = await run_suite([case], ScriptedAgent(), transport="inprocess", record_dir=tmp_path)
    records = Transcript.read(tmp_path / f"{case.id}.jsonl")
    assert records[0]["type"] == "meta" and records[0]["agent"] == "scripted"
    replay = ReplayAgent(tmp_path)
    assert replay.injects_mistakes(case)
    again = await run_suite([case], replay, transport="inprocess", out_dir=tmp_path / "replayed")
    first, second = rec.scores[0], again.scores[0]
    assert second.passed and second.final_plan == first.final_plan
    assert (second.turns, second.tool_calls) == (first.turns, first.tool_calls)

    # a transcript cut short: the replay runs out of responses and the case fails cleanly
    path = tmp_path / f"{case.id}.jsonl"
    kept = [r for r in records if r["type"] != "response"][:1] + [r for r in records if r["type"] == "response"][:1]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    cut = await run_suite([case], ReplayAgent(tmp_path), transport="inprocess")
    assert not cut.scores[0].passed and cut.scores[0].stop_reason == "api_error"


def test_cli_exit_status_and_reports(tmp_path, capsys):
    args = ["--cases", REPAIR_CASE, "--transport", "inprocess", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "1 cases, 1 passed" in out and "mistakes caught 1/1" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["summary"]["pass_rate"] == 1.0 and report["cases"][0]["id"] == REPAIR_CASE
    assert main([*args, "--threshold", "1.01"]) == 1


@pytest.mark.anyio
async def test_one_case_over_stdio():
    res = await run_suite([CASES[REPAIR_CASE]], ScriptedAgent(), transport="stdio")
    assert res.scores[0].passed, res.scores[0].reasons


def test_case_files_parse_strictly(tmp_path):
    bad = json.loads(next(CASES_DIR.glob("*.json")).read_text()) | {"surprise": 1}
    with pytest.raises(ValueError):
        Case.model_validate(bad)
