"""The spellings pdag reads in a hand-drafted DAG (``knowledge/dag_vocabulary.json``): node types, fields, edge
kinds, phases and roles by alias, and the word lists the draft readers match, all compared in one key form."""

from __future__ import annotations

import difflib
import re
from functools import cache
from typing import Any

import knowledge
from tools.core.dag import NodeType

_MIN_PREFIX = 4  # an alias this long or longer also matches a type spelled with a qualifier after it


_MIN_SUFFIX = 5  # and one this long a type spelled with a word before it

SAMPLER = "sampler"  # the role of a node that turns the LM head's logits into the next token


def key(text: str) -> str:
    """The comparison form of a spelling: lower case, letters and digits only."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


@cache
def vocabulary() -> dict[str, Any]:
    return knowledge.load_json("dag_vocabulary.json")


@cache
def words(name: str) -> frozenset[str]:
    """One list of ``readings`` in the vocabulary, in key form."""
    return frozenset(key(w) for w in vocabulary()["readings"][name])


def _aliases(section: str) -> dict[str, str]:
    """alias key -> canonical name of one section (the canonical names themselves included)."""
    out: dict[str, str] = {}
    for canon, names in vocabulary()[section].items():
        out[key(canon)] = canon
        for name in names:
            out.setdefault(key(name), canon)
    return out


@cache
def tables() -> dict[str, dict[str, str]]:
    types = _aliases("node_types")
    for t in NodeType:  # "AttentionNode" and "Attention" alike
        types[key(t.value)] = t.value
        types.setdefault(key(t.value.removesuffix("Node")), t.value)
    roles = _aliases("roles")
    lives_on = vocabulary()["role_node_types"]
    one_meaning_per_position()
    for spelling, role in roles.items():  # a role's spelling names the node the role lives on
        types.setdefault(spelling, lives_on[role])
    initials = {key(w): canon for canon, ws in vocabulary()["phase_initials"].items() for w in ws}
    return {"document": _aliases("document"), "node_fields": _aliases("node_fields"),
            "edge_fields": _aliases("edge_fields"), "edge_types": _aliases("edge_types"),
            "phases": _aliases("phases"), "node_types": types, "roles": roles, "phase_initials": initials}


_ALIAS_TABLES = ("document", "node_fields", "edge_fields", "edge_types", "phases", "node_types", "roles",
                 "phase_initials")


def one_meaning_per_position() -> None:
    """Refuse the vocabulary when two of its tables or word lists read one spelling at one position of a draft
    (``positions``) with different meanings, unless ``shared_spellings`` names that spelling there and says what
    in the draft decides; refuse a table without a position and a shared entry that names no conflict."""
    vocab = vocabulary()
    positions, lives_on = vocab["positions"], vocab["role_node_types"]
    spelled: dict[str, list[tuple[str, str]]] = {}  # table -> (spelling key, meaning)
    for table in _ALIAS_TABLES:
        for canon, names in vocab[table].items():
            meaning = f"a {lives_on[canon] if table == 'roles' else canon}" if table in ("roles", "node_types") \
                else f"{table} '{canon}'"  # a role's spelling, read as a type, names the node it lives on
            own = [] if table == "phase_initials" else [canon]
            spelled[table] = spelled.get(table, []) + [(key(n), meaning) for n in [*own, *names]]
    for name, ws in vocab["readings"].items():
        if name != "about":
            spelled[name] = [(key(w), f"a word of {name}") for w in ws]
    at: dict[tuple[str, str], dict[str, str]] = {}  # (position, spelling) -> table -> meaning
    for table, pairs in spelled.items():
        if table not in positions:
            raise ValueError(f"dag_vocabulary.json: '{table}' has no entry in 'positions' (where a draft is read "
                             "for it); add one")
        for position in positions[table]:
            for spelling, meaning in pairs:
                at.setdefault((position, spelling), {}).setdefault(table, meaning)
    declared = {(position, key(s)): set(e["tables"]) for e in vocab["shared_spellings"]["entries"]
                for position in [e["position"]] for s in e["spellings"]}
    for (position, spelling), by_table in sorted(at.items()):
        if len(set(by_table.values())) < 2:
            continue
        if not set(by_table) <= declared.pop((position, spelling), set()):
            (t1, m1), (t2, m2) = sorted(by_table.items())[:2]
            raise ValueError(f"dag_vocabulary.json: '{spelling}' as a {position} is both {m1} ({t1}) and {m2} "
                             f"({t2}); a spelling may carry one meaning only at one position, unless "
                             "'shared_spellings' says what in the draft decides")
    if declared:
        raise ValueError(f"dag_vocabulary.json: shared_spellings names {sorted(declared)[0]}, which no two tables "
                         "read there with different meanings; remove the entry")


def node_type(text: str) -> str | None:
    """The canonical node type a spelling names, or None.  Bracketed qualifiers are dropped; an alias of
    ``_MIN_PREFIX`` characters or more also matches a spelling it begins when a qualifier follows
    ("allreducetp", "attentionlayer3"), one of ``_MIN_SUFFIX`` or more a spelling it ends ("gqaattention"); the
    longest match wins."""
    alias = _type_alias(text)
    return tables()["node_types"][alias] if alias is not None else None


def names_sampler(text: str) -> bool:
    """Whether a spelling names a sampler (``Sample``, ``token_sampler``, ``decode_sample``): the alias it is read
    by, matched as ``node_type`` matches, is one of the sampler role's spellings, and what comes before that alias
    does not name the LM head (``lm_head + sampling`` is the head that samples)."""
    alias = _type_alias(text)
    if alias is None or tables()["roles"].get(alias) != SAMPLER:
        return False
    k = key(re.sub(r"[(\[{].*?[)\]}]", "", text))
    rest = k[:k.rfind(alias)] if k.endswith(alias) else ""
    return not rest or node_type(rest) != NodeType.LM_HEAD.value


def _type_alias(text: str) -> str | None:
    """The alias (key form) a node type spelling is read by: itself, or the longest alias it begins or ends."""
    types = tables()["node_types"]
    k = key(re.sub(r"[(\[{].*?[)\]}]", "", text))
    if k.endswith("node") and k[:-4] in types:
        k = k[:-4]
    if k in types:
        return k
    starts = [a for a in types if len(a) >= _MIN_PREFIX and k.startswith(a) and _qualifier().fullmatch(k[len(a):])]
    ends = [a for a in types if len(a) >= _MIN_SUFFIX and k.endswith(a)]  # "gqaattention", "postattnlayernorm"
    found = starts + ends
    return max(found, key=lambda a: (len(a), a)) if found else None


@cache
def _qualifier() -> re.Pattern[str]:
    """What may follow a type's name ("allreducetp", "attentionlayer0", "ffnshard3"); anything else
    ("contextparallel") is another word, not a qualified type."""
    return re.compile("(?:" + "|".join(sorted(words("type_qualifiers"), key=len, reverse=True)) + r"|\d+)*")


SUGGEST_CUTOFF = 0.6  # difflib ratio: a suggestion below it is noise ("Banana" is not "a typo of" RouterNode)


def closest_types(text: str, n: int = 3) -> list[str]:
    """Canonical node types whose name (key form, without the ``Node`` every type shares) is near a spelling no
    table names, for the error message; none when nothing is near."""
    by_key = {key(t.value.removesuffix("Node")): t.value for t in NodeType}  # the shared suffix is no evidence
    near = difflib.get_close_matches(key(str(text)).removesuffix("node"), list(by_key), n=n, cutoff=SUGGEST_CUTOFF)
    return [by_key[k] for k in near]


def is_int(x: Any) -> bool:
    """A JSON integer (``True`` is not one)."""
    return isinstance(x, int) and not isinstance(x, bool)
