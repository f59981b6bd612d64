"""Issue 41, autofix: a warning never changes the user's degrees; an error that forces a change says which
intent it could not keep; a rebuilt drawing is a change; MEM-FITS tries the other ways to fit, ranked by how many
fields they change and then by the objective, and returns those it did not apply as alternatives."""

from __future__ import annotations

from tools import autofix_dag, build_dag, estimate_performance, validate_dag


def test_a_warning_never_changes_a_degree() -> None:
    """Before: Llama-3.1-70B TP4 x PP2 on 8 H100 became PP 1 with 4 GPUs idle (PP-MEMORY-DRIVEN, a warning)."""
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 4, "pp": 2}}
    r = autofix_dag(plan=plan)
    assert r.valid and r.plan["parallel"] == {"tp": 4, "pp": 2} and r.changes == []
    left = {v.rule_id: v for v in r.violations}
    assert "PP-MEMORY-DRIVEN" in left and "parallel degrees" in left["PP-MEMORY-DRIVEN"].reason


def test_an_error_changes_only_what_it_must_and_says_so() -> None:
    """PP 64 over a 32-layer model: PP-DEGREE-LE-LAYERS forces pp down, and nothing else (no DP 2 for the GPUs
    it frees: GPU-IDLE is a warning)."""
    plan = {"model": "llama-3.1-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 64}, "parallel": {"pp": 64}}
    r = autofix_dag(plan=plan)
    assert r.valid and r.plan["parallel"] == {"pp": 32}
    assert r.intents_not_kept == ["parallel.pp 64 -> 32 (forced by PP-DEGREE-LE-LAYERS)"]
    assert any(n.startswith("could not keep:") for n in r.notes)


def test_a_rebuilt_drawing_is_listed_as_a_change() -> None:
    """Before: a drawing replaced by a rebuild reported changes: [] (here a 70B model drawn on one H100)."""
    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}, "parallel": {"tp": 1}}
    dag = build_dag(plan=plan).dag
    r = autofix_dag(dag=dag if isinstance(dag, dict) else dag.model_dump(mode="json"))
    assert r.repair == "rebuilt" and r.valid
    assert any(c.field == "dag" and "replaced the submitted drawing" in c.message for c in r.changes)
    assert any(c.field == "plan.dtype" for c in r.changes)  # the MEM-FITS option that made it fit


def test_mem_fits_tries_the_other_ways_to_fit_ranked_by_the_objective() -> None:
    """Before: MEM-FITS came back with no change although its hint listed fp8 and smaller batches."""
    base = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 2}, "parallel": {"tp": 2},
            "workload": {"batch_size": 64, "input_len": 8192}}
    lat = autofix_dag(plan=base)
    thr = autofix_dag(plan={**base, "objective": "throughput"})
    assert lat.valid and thr.valid and lat.plan["parallel"] == thr.plan["parallel"] == {"tp": 2}
    assert "for the latency objective" in lat.changes[0].message
    assert "for the throughput objective" in thr.changes[0].message
    # the other ways to fit are alternatives (they used to be named only in the change message), best first,
    # each a complete repair: a plan that validates
    for r, objective in ((lat, "latency"), (thr, "throughput")):
        fits = [a for a in r.alternatives if a.note.startswith("MEM-FITS")]
        assert fits and all(objective in a.note for a in fits)
        assert all(validate_dag(plan=a.plan).valid and a.max_gpu_bytes <= a.capacity_bytes for a in fits)
        keys = [(more_than_needed(base, a.plan, r.alternatives, r.plan), autofix_score(a, objective)) for a in fits]
        assert keys == sorted(keys)  # a repair that adds edits to another one last, then by the objective
        assert (more_than_needed(base, r.plan, r.alternatives, r.plan), autofix_score_of(r.plan, objective)) \
            <= keys[0]
    assert lat.plan["workload"]["batch_size"] < thr.plan["workload"]["batch_size"]  # latency: smallest batch
    one = autofix_dag(plan={"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1}})
    assert one.valid and one.plan.get("dtype") == "fp8"


def test_mem_fits_makes_the_fewest_changes_that_fit() -> None:
    """Before: Llama-4-Maverick on 8 H100 got fp8 weights and an fp8 KV cache because the pair scored a lower e2e,
    although fp8 weights alone fit (its own alternatives showed it); autofix promises minimal changes."""
    plan = {"model": "llama-4-maverick", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
            "parallel": {"tp": 8, "ep": 8}, "workload": {"input_len": 1024, "output_len": 256, "concurrency": 32}}
    r = autofix_dag(plan=plan)
    assert r.valid and [c.field for c in r.changes] == ["plan.dtype"]
    assert any(edits(plan, a.plan) > edits(plan, r.plan) for a in r.alternatives)  # the pair is still offered


def edits(before: object, after: object, where: str = "") -> set[tuple[str, str]]:
    """The leaf fields a repair changed, with their new values."""
    if isinstance(before, dict) or isinstance(after, dict):
        b, a = before if isinstance(before, dict) else {}, after if isinstance(after, dict) else {}
        return set().union(*(edits(b.get(k), a.get(k), f"{where}.{k}") for k in set(b) | set(a)))
    return {(where, repr(after))} if before != after else set()


def more_than_needed(base: dict, plan: dict, alternatives: list, applied: dict) -> bool:
    """The repair makes every edit of another repair found, and more."""
    mine = edits(base, plan)
    return any(edits(base, other) < mine for other in [a.plan for a in alternatives] + [applied])


def autofix_score(a, objective: str) -> float:
    """The objective's figure of an alternative: e2e latency (lower is better), or minus output tokens/s."""
    return autofix_score_of(a.plan, objective)


def autofix_score_of(plan: dict, objective: str) -> float:
    e = estimate_performance(plan=plan)
    return e.e2e_latency_ms if objective == "latency" else -e.throughput.output_tokens_per_s
