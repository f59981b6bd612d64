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
    for spelling, role in roles.items():  # a role's spelling names the node the role lives on
        meaning = types.setdefault(spelling, lives_on[role])
        if meaning != lives_on[role]:
            raise ValueError(f"dag_vocabulary.json: '{spelling}' is both a {meaning} and a {role} "
                             f"({lives_on[role]}); a spelling may carry one meaning only")
    return {"document": _aliases("document"), "node_fields": _aliases("node_fields"),
            "edge_fields": _aliases("edge_fields"), "edge_types": _aliases("edge_types"),
            "phases": _aliases("phases"), "node_types": types, "roles": roles}


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
