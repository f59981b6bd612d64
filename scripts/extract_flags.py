"""Extract the launch flags an engine release accepts from its source, as a flag table for ``pdag export``.

Run while developing, on an unpacked release (never at test or run time); the output is committed under
``knowledge/engines/flags/``.  The source is read with ``ast`` only, nothing is imported or executed:

* vLLM (a wheel or sdist unpacked at ``SRC``): ``vllm serve`` registers its flags in
  ``vllm/engine/arg_utils.py`` (``add_argument("--x", **<config>_kwargs["field"])``, the value type coming from
  the config dataclass's annotation in ``vllm/config/``) and in ``vllm/entrypoints/*/cli_args.py`` (the frontend
  dataclass, one flag per field, plus explicit ``add_argument`` calls such as ``--headless``).
* SGLang (sdist unpacked at ``SRC``): ``sglang/srt/server_args.py``, ``ServerArgs.add_cli_args``.
* TensorRT-LLM: the ``@click.option`` decorators of ``serve`` in ``tensorrt_llm/commands/serve.py``.

Usage: ``python scripts/extract_flags.py ENGINE VERSION SRC SOURCE_NOTE > knowledge/engines/flags/ENGINE-VERSION.json``
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

Entry = dict[str, Any]


def _strings(nodes: list[ast.expr]) -> list[str]:
    return [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _literal_list(node: ast.expr | None, consts: dict[str, list[Any]]) -> list[Any] | None:
    """A literal list/tuple of constants, or a module-level name bound to one."""
    if node is None:
        return None
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        vals = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return vals if len(vals) == len(node.elts) else None
    return None


def _module_consts(trees: list[ast.Module]) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """Module-level list constants (``CHOICES = [...]``) and Literal aliases (``CacheDType = Literal[...]``)."""
    lists: dict[str, list[Any]] = {}
    literals: dict[str, list[Any]] = {}
    for tree in trees:
        for node in tree.body:
            target, value = None, None
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target, value = node.targets[0].id, node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                target, value = node.target.id, node.value
            if target is None or value is None:
                continue
            got = _literal_list(value, {})
            if got is not None:
                lists[target] = got
            lit = _literal_values(value, literals)
            if lit is not None:
                literals[target] = lit
    return lists, literals


def _literal_values(node: ast.expr, aliases: dict[str, list[Any]]) -> list[Any] | None:
    """The values of ``Literal[...]`` (or of a union containing Literals / Literal aliases), else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
        sl = node.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        return [e.value for e in elts if isinstance(e, ast.Constant)]
    if isinstance(node, ast.Name) and node.id in aliases:
        return aliases[node.id]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        left = _literal_values(node.left, aliases)
        right = _literal_values(node.right, aliases)
        if left is None and right is None:
            return None
        return (left or []) + (right or [])
    return None


def _kind_of_annotation(node: ast.expr, literals: dict[str, list[Any]], classes: dict[str, Any]) -> Entry:
    """How ``vllm.engine.arg_utils._compute_kwargs`` turns a dataclass annotation into an argparse option."""
    text = ast.unparse(node)
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    if names & set(classes) and not (names & {"int", "str", "float", "bool"}):
        return {"kind": "json"}
    if "bool" in names and "str" in names:
        return {"kind": "optional_str"}
    if "bool" in names:
        return {"kind": "bool", "negatable": True}
    choices = _literal_values(node, literals)
    if choices:
        return {"kind": "choice", "choices": sorted(map(str, choices)), "open": "str" in names}
    for coll in ("list", "tuple", "set"):
        if coll in names:
            return {"kind": "list"}
    if "int" in names:
        return {"kind": "int"}
    if "float" in names:
        return {"kind": "float"}
    if "dict" in names or "Any" in names or text.startswith("dict"):
        return {"kind": "json"}
    return {"kind": "str"}


def _kind_of_kwargs(call: ast.Call, consts: dict[str, list[Any]]) -> Entry:
    """The value kind of an explicit ``add_argument``/``click.option`` call from its keyword arguments."""
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    action = kw.get("action")
    if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
        return {"kind": "bool"}
    if isinstance(action, ast.Name) and action.id == "DeprecatedAction":
        return {"kind": "deprecated"}
    if isinstance(kw.get("is_flag"), ast.Constant) and kw["is_flag"].value is True:
        return {"kind": "bool"}
    choices = _literal_list(kw.get("choices"), consts)
    typ = kw.get("type")
    if isinstance(typ, ast.Call) and ast.unparse(typ.func) in ("ChoiceWithAlias", "click.Choice") and typ.args:
        choices = _literal_list(typ.args[0], consts)
        if choices is None:
            return {"kind": "str"}
    if choices is not None:
        return {"kind": "choice", "choices": sorted(map(str, choices)), "open": False}
    name = ast.unparse(typ) if typ is not None else "str"
    if name in ("int", "human_readable_int", "human_readable_int_or_auto"):
        return {"kind": "int"}
    if name == "float":
        return {"kind": "float"}
    if name in ("json.loads",):
        return {"kind": "json"}
    if isinstance(kw.get("nargs"), ast.Constant) and kw["nargs"].value in ("+", "*"):
        return {"kind": "list"}
    return {"kind": "str"}


def _add(table: dict[str, Entry], names: list[str], entry: Entry) -> None:
    longs = [n for n in names if n.startswith("-")]
    if not longs:
        return
    canonical = longs[0]
    table[canonical] = {**entry, "aliases": longs[1:]} if len(longs) > 1 else dict(entry)


def _parse(paths: list[Path]) -> list[ast.Module]:
    return [ast.parse(p.read_text(encoding="utf-8"), filename=str(p)) for p in paths]


def _class_fields(trees: list[ast.Module]) -> dict[str, tuple[list[str], dict[str, ast.expr]]]:
    out: dict[str, tuple[list[str], dict[str, ast.expr]]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                fields = {s.target.id: s.annotation for s in node.body
                          if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                          and "ClassVar" not in ast.unparse(s.annotation)}
                out.setdefault(node.name, ([ast.unparse(b) for b in node.bases], fields))
    return out


def _all_fields(name: str, classes: dict[str, tuple[list[str], dict[str, ast.expr]]]) -> dict[str, ast.expr]:
    bases, fields = classes.get(name, ([], {}))
    merged: dict[str, ast.expr] = {}
    for base in bases:
        merged.update(_all_fields(base, classes))
    merged.update(fields)
    return merged


def extract_vllm(src: Path) -> dict[str, Entry]:
    root = src / "vllm"
    quant = root / "model_executor" / "layers" / "quantization" / "__init__.py"
    paths = sorted((root / "config").glob("*.py")) + [root / "engine" / "arg_utils.py", quant]
    paths += sorted((root / "entrypoints").glob("*/cli_args.py"))
    trees = _parse(paths)
    lists, literals = _module_consts(trees)
    classes = _class_fields(trees)
    table: dict[str, Entry] = {}
    # the frontend dataclass: one flag per field (BaseFrontendArgs.add_cli_args)
    for name in classes:
        if name == "FrontendArgs":
            for field, ann in _all_fields(name, classes).items():
                _add(table, [f"--{field.replace('_', '-')}"], _kind_of_annotation(ann, literals, classes))
    for tree in trees:
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            kwvars: dict[str, tuple[str, str | None]] = {}  # var -> (config class, single field or None)
            for node in ast.walk(func):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    v = node.value
                    sub_field = None
                    if isinstance(v, ast.Subscript) and isinstance(v.slice, ast.Constant):
                        sub_field, v = v.slice.value, v.value
                    if isinstance(v, ast.Call) and ast.unparse(v.func) == "get_kwargs" and v.args:
                        kwvars[node.targets[0].id] = (ast.unparse(v.args[0]), sub_field)
            for node in ast.walk(func):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "add_argument"):
                    continue
                names = _strings(node.args)
                starred = [k.value for k in node.keywords if k.arg is None]
                for st in list(starred):  # **{**kwargs["field"], "default": None}
                    if isinstance(st, ast.Dict):
                        starred += [v for k, v in zip(st.keys, st.values, strict=True) if k is None]
                entry: Entry | None = None
                for st in starred:
                    cls, field = None, None
                    if isinstance(st, ast.Subscript) and isinstance(st.value, ast.Name) and st.value.id in kwvars:
                        cls = kwvars[st.value.id][0]
                        field = st.slice.value if isinstance(st.slice, ast.Constant) else None
                    elif isinstance(st, ast.Name) and st.id in kwvars:
                        cls, field = kwvars[st.id]
                    if cls and field:
                        ann = _all_fields(cls, classes).get(field)
                        if ann is not None:
                            entry = _kind_of_annotation(ann, literals, classes)
                if entry is None:
                    entry = _kind_of_kwargs(node, lists)
                _add(table, names, entry)
    return table


def extract_sglang(src: Path) -> dict[str, Entry]:
    trees = _parse([src / "sglang" / "srt" / "server_args.py"])
    lists, _ = _module_consts(trees)
    table: dict[str, Entry] = {}
    for node in ast.walk(trees[0]):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            _add(table, _strings(node.args), _kind_of_kwargs(node, lists))
    return table


def extract_trtllm(src: Path) -> dict[str, Entry]:
    trees = _parse([src / "tensorrt_llm" / "commands" / "serve.py"])
    lists, _ = _module_consts(trees)
    table: dict[str, Entry] = {}
    for node in ast.walk(trees[0]):
        if isinstance(node, ast.FunctionDef) and node.name == "serve":
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and ast.unparse(dec.func) == "click.option":
                    _add(table, _strings(dec.args), _kind_of_kwargs(dec, lists))
    return table


EXTRACTORS = {"vllm": extract_vllm, "sglang": extract_sglang, "trtllm": extract_trtllm}


def main(argv: list[str]) -> int:
    if len(argv) != 5 or argv[1] not in EXTRACTORS:
        print(__doc__, file=sys.stderr)
        return 2
    engine, version, src, source = argv[1], argv[2], Path(argv[3]), argv[4]
    flags = EXTRACTORS[engine](src)
    doc = {"engine": engine, "version": version, "source": source,
           "extracted_by": "scripts/extract_flags.py", "flags": dict(sorted(flags.items()))}
    json.dump(doc, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
