"""The rule catalog and the knowledge documents: schema, ids, cross-references, seed coverage, conflicts."""

from __future__ import annotations

import json
import re

import pytest
from jsonschema import Draft202012Validator

import knowledge

SEEDS = (
    "000_345ec2aff96ba547.txt",
    "001_eb217ca81ef2506b.txt",
    "002_e383ebe04fda263e.txt",
    "003_d991c510ae16424c.txt",
    "004_5d78864cc5286a76.txt",
)
AREAS = (
    "DP",
    "PP",
    "TP",
    "SP",
    "EP",
    "PHASE",
    "DECODE",
    "ORDER",
    "COMBO",
    "GPU",
    "MEM",
    "HW",
    "COMM",
    "STRUCT",
    "KV",
    "PERF",
    "OBJ",
    "ADP",
    "DISAGG",
    "SPEC",
    "DCP",
)
ID_RE = re.compile(r"^(?:" + "|".join(AREAS) + r")-[A-Z0-9]+(?:-[A-Z0-9]+)*$")
MENTION_RE = re.compile(r"\b[A-Z]+(?:-[A-Z0-9]+)+\b")
RULE_KEYS = {
    "id",
    "title",
    "statement",
    "rationale",
    "scope",
    "strategies",
    "node_types",
    "severity",
    "kind",
    "source",
    "checker",
    "fixer",
    "examples",
    "related",
}

DOCS = (
    "README.md",
    "01_model_semantics/attention_structure.md",
    "01_model_semantics/kv_cache_semantics.md",
    "03_inference_phases/prefill_phase.md",
    "03_inference_phases/decode_phase.md",
    "04_parallel_primitives/tensor_parallelism.md",
    "04_parallel_primitives/sequence_parallelism.md",
    "04_parallel_primitives/pipeline_parallelism.md",
    "04_parallel_primitives/expert_parallelism.md",
    "04_parallel_primitives/dp_in_inference.md",
    "05_parallelism_by_module/attention_parallelism.md",
    "05_parallelism_by_module/ffn_parallelism.md",
    "05_parallelism_by_module/moe_parallelism.md",
    "05_parallelism_by_module/embedding_and_lm_head.md",
    "06_execution_and_scheduling/pipeline_scheduling.md",
    "06_execution_and_scheduling/microbatching.md",
    "06_execution_and_scheduling/overlap_compute_communication.md",
    "06_execution_and_scheduling/synchronization_points.md",
    "07_hardware_and_system_constraints/memory_constraints.md",
    "07_hardware_and_system_constraints/interconnect_topology.md",
    "07_hardware_and_system_constraints/latency_vs_throughput.md",
    "07_hardware_and_system_constraints/accelerator_specific_notes.md",
    "08_dag_construction_primitives.md",
    "09_metrics_and_objectives.md",
    "10_common_failure_modes.md",
    "11_dag_validation_and_autofix.md",
)

# Each required conflict, recognised by words that must all occur in its topic.
REQUIRED_CONFLICT_TOPICS = (
    {"tp", "experts"},  # TP inside experts
    {"sp", "scope", "attention"},  # SP scope
    {"kv", "tp"},  # KV cache under TP
    {"expert", "gpu"},  # one expert per GPU
    {"hierarchy", "construction", "reasoning"},  # the three orders
    {"dp", "closed", "set"},  # DP in the closed set
    {"sp", "decode"},  # SP in decode
    {"kv", "moe"},  # KV cache of MoE layers
    {"ep", "gpu_total"},  # EP spans the stage group
)


@pytest.fixture(scope="module")
def catalog() -> dict:
    return knowledge.load_json("rules/catalog.json")


@pytest.fixture(scope="module")
def rule_ids(catalog: dict) -> set[str]:
    return {rule["id"] for rule in catalog["rules"]}


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9_]+", text.lower()))


def test_catalog_matches_schema(catalog: dict) -> None:
    schema = knowledge.load_json("rules/catalog.schema.json")
    Draft202012Validator.check_schema(schema)
    errors = sorted(Draft202012Validator(schema).iter_errors(catalog), key=lambda e: e.json_path)
    assert not errors, "\n".join(f"{e.json_path}: {e.message}" for e in errors[:20])


def test_rule_keys_exact(catalog: dict) -> None:
    for rule in catalog["rules"]:
        keys = set(rule)
        assert RULE_KEYS <= keys <= RULE_KEYS | {"decision", "parameters"}, rule["id"]


def test_ids_unique_and_well_formed(catalog: dict) -> None:
    ids = [rule["id"] for rule in catalog["rules"]]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    bad = [i for i in ids if not ID_RE.match(i)]
    assert not bad, bad
    conflict_ids = [c["id"] for c in catalog["conflicts"]]
    assert len(conflict_ids) == len(set(conflict_ids))


def test_cross_references_resolve(catalog: dict, rule_ids: set[str]) -> None:
    for rule in catalog["rules"]:
        missing = [r for r in rule["related"] if r not in rule_ids]
        assert not missing, (rule["id"], missing)
        assert rule["id"] not in rule["related"], rule["id"]
    for conflict in catalog["conflicts"]:
        missing = [r for r in conflict["rules"] if r not in rule_ids]
        assert not missing, (conflict["id"], missing)


def test_decisions_reference_known_conflicts(catalog: dict) -> None:
    conflict_ids = {c["id"] for c in catalog["conflicts"]}
    for rule in catalog["rules"]:
        for ref in re.findall(r"CONFLICT-[A-Z0-9-]*[A-Z0-9]", rule.get("decision", "")):
            assert ref in conflict_ids, (rule["id"], ref)


def test_sources_name_known_seeds(catalog: dict) -> None:
    allowed = set(SEEDS) | {"pdag"}
    for rule in catalog["rules"]:
        assert rule["source"], rule["id"]
        for source in rule["source"]:
            assert source["seed"] in allowed, (rule["id"], source)
            assert source["section"].strip(), rule["id"]
    for conflict in catalog["conflicts"]:
        for position in conflict["positions"]:
            assert position["seed"] in allowed, (conflict["id"], position)


def test_every_seed_is_cited(catalog: dict) -> None:
    cited = {source["seed"] for rule in catalog["rules"] for source in rule["source"]}
    assert set(SEEDS) <= cited, sorted(set(SEEDS) - cited)


def test_both_severities_and_kinds_present(catalog: dict) -> None:
    assert {r["severity"] for r in catalog["rules"]} == {"error", "warning"}
    assert {r["kind"] for r in catalog["rules"]} == {"hard_rule", "default_assumption"}


@pytest.mark.parametrize("keywords", REQUIRED_CONFLICT_TOPICS, ids=lambda k: "+".join(sorted(k)))
def test_required_conflict_present(catalog: dict, keywords: set[str]) -> None:
    topics = [c["topic"] for c in catalog["conflicts"]]
    assert any(keywords <= _words(topic) for topic in topics), (keywords, topics)


@pytest.mark.parametrize("relative", DOCS)
def test_doc_exists_and_is_not_empty(relative: str) -> None:
    path = knowledge.ROOT / relative
    assert path.is_file(), relative
    assert path.read_text(encoding="utf-8").strip(), relative


def test_docs_mention_only_known_ids(catalog: dict, rule_ids: set[str]) -> None:
    known = rule_ids | {c["id"] for c in catalog["conflicts"]}
    checked_areas = set(AREAS) | {"CONFLICT"}
    unknown: list[tuple[str, str]] = []
    for relative in DOCS:
        text = (knowledge.ROOT / relative).read_text(encoding="utf-8")
        for mention in MENTION_RE.findall(text):
            if mention.split("-", 1)[0] in checked_areas and mention not in known:
                unknown.append((relative, mention))
    assert not unknown, unknown


def test_docs_cite_rules(rule_ids: set[str]) -> None:
    mentioned: set[str] = set()
    for relative in DOCS:
        mentioned |= set(MENTION_RE.findall((knowledge.ROOT / relative).read_text(encoding="utf-8")))
    assert len(mentioned & rule_ids) >= len(rule_ids) // 2


def test_rule_thresholds_are_catalog_data(monkeypatch) -> None:
    """Checkers read their numbers from the catalog: changing the data changes the verdict."""
    import copy

    from tools import validate_dag
    from tools.rules import registry

    plan = {"model": "llama-3.1-70b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8}, "parallel": {"tp": 8},
            "phases": {"prefill": {"sp": 2}}, "workload": {"input_len": 4096, "output_len": 64}}

    def ids() -> set[str]:
        return {v.rule_id for v in validate_dag(plan=plan).violations}

    assert "SP-LONG-CONTEXT-ONLY" in ids()  # 4096 < the catalog's 8192
    edited = copy.deepcopy(registry.catalog())
    edited["SP-LONG-CONTEXT-ONLY"]["parameters"]["min_input_len"] = 2048
    monkeypatch.setattr(registry, "catalog", lambda: edited)
    assert "SP-LONG-CONTEXT-ONLY" not in ids()


DATA_FILES = sorted([*knowledge.ROOT.rglob("*.json"), *(knowledge.ROOT.parent / "evals").rglob("*.json")])


@pytest.mark.parametrize("path", DATA_FILES, ids=lambda p: str(p.relative_to(knowledge.ROOT.parent)))
def test_data_files_name_each_key_once(path) -> None:
    """A key written twice in one object loads as the last copy and silently drops the first (a merged source
    text, an efficiency figure): every data file keeps each key once."""
    def no_repeats(pairs: list[tuple[str, object]]) -> dict[str, object]:
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), f"{path}: repeated keys {sorted({k for k in keys if keys.count(k) > 1})}"
        return dict(pairs)

    json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=no_repeats)
