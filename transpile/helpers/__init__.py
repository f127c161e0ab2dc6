"""The helpers a variant carries, as code: Gluon functions (`@gluon.jit`, `@gluon.constexpr_function`) and host
launchers, written in the modules of this package and copied into each variant from their source, so that the
variant stays self-contained (it imports only Triton, and torch where its source did).

The modules are ordinary Python: they import, ruff lints them, and the tests call their layout functions and
launchers directly (`tests/test_helpers.py`). What differs between targets is written as a *target parameter*, a
module-level name in capitals that the module binds to one target's value (so that it imports and runs), and that
`Helper.text` replaces, where a helper names it, by the value of the target it copies the helper for:

- a name (`MFMA_VERSION`, `WARP_SIZE`) becomes the value's expression (`4`, `64`);
- a call of a parameter (`FLOAT8_DEPTH(dtype)`) becomes the value's expression, written in the helper's own names
  (`64 if _f8f6f4(dtype) != "" else 16`): the call documents what the expression reads;
- an `if` whose test is a parameter of `True`/`False` (`if SCALED_FP8:`) keeps its body, or its `else`, or goes;
- a `{field}` in a docstring, a string or a comment takes the text of the value of that lower-case name (`{arch}`).

A helper is one or more top-level definitions of a module (a function, a class, an assignment) with the comment
lines written right above the first one (a comment separated from it by a blank line is the module's, not the
helper's). Modules are read and parsed once per process, only when a variant needs one of their helpers: translating
imports no Triton.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

_HERE = Path(__file__).parent


@dataclass(frozen=True)
class Helper:
    """Definitions `names` of module `module` of this package, for a target whose parameters take `values`
    (parameter name -> expression text for capitals, replacement text for lower-case `{field}`s)."""

    module: str
    names: tuple[str, ...]
    values: tuple[tuple[str, str], ...] = ()

    def text(self) -> str:
        """The helper's source text as a variant holds it (before the variant is formatted)."""
        return _text(self)


def helper(module: str, *names: str, **values: object) -> Helper:
    """`Helper(module, names, values)`; values other than strings are written as Python literals (`True`, `64`)."""
    return Helper(module, names, tuple((k, v if isinstance(v, str) else repr(v)) for k, v in sorted(values.items())))


@functools.lru_cache(maxsize=None)
def _module(name: str) -> tuple[cst.Module, dict[str, cst.BaseStatement]]:
    """The parsed module `name` of this package and its top-level definitions by name."""
    module = cst.parse_module((_HERE / f"{name}.py").read_text(encoding="utf-8"))
    defined: dict[str, cst.BaseStatement] = {}
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            defined[statement.name.value] = statement
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets = small.targets if isinstance(small, cst.Assign) else \
                    [small] if isinstance(small, cst.AnnAssign) else []
                for target in targets:
                    if isinstance(target.target, cst.Name):
                        defined[target.target.value] = statement
    return module, defined


@functools.lru_cache(maxsize=None)
def _text(helper: Helper) -> str:
    module, defined = _module(helper.module)
    missing = [n for n in helper.names if n not in defined]
    if missing:
        raise KeyError(f"transpile/helpers/{helper.module}.py defines no {', '.join(missing)}")
    values = dict(helper.values)
    code = {k: cst.parse_expression(v) for k, v in values.items() if k.isupper()}
    fill = _Fill(code, {k: v for k, v in values.items() if not k.isupper()},
                 {k for k in code if isinstance(defined.get(k), cst.FunctionDef)})
    statements: list[cst.BaseStatement] = []
    for name in helper.names:
        statement = defined[name]
        if any(s is statement for s in statements):
            continue  # (one statement binding several of the names)
        statement = statement.visit(fill)
        if not statements:  # the comment lines right above the first definition belong to the helper
            lines = list(statement.leading_lines)
            while lines and any(line.comment is None for line in lines):
                lines.pop(0)
            statement = statement.with_changes(leading_lines=lines)
        statements.append(statement)
    return "\n" + cst.Module(body=statements).code


class _Fill(cst.CSTTransformer):
    """Target parameters replaced by a target's values (see the module's docstring)."""

    def __init__(self, code: dict[str, cst.BaseExpression], fields: dict[str, str], calls: set[str]) -> None:
        super().__init__()
        self.code = code
        self.fields = fields
        self.calls = calls  # parameters the module defines as functions: their calls are replaced whole

    def _filled(self, text: str) -> str:
        for key, value in self.fields.items():
            text = text.replace("{" + key + "}", value)
        return text

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if isinstance(original.func, cst.Name) and original.func.value in self.calls:
            return self.code[original.func.value]
        return updated

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.code.get(original.value, updated)

    def leave_Attribute(self, original: cst.Attribute, updated: cst.Attribute) -> cst.Attribute:
        return updated.with_changes(attr=original.attr)  # (an attribute's name is not a parameter; its value may be)

    # Names that are not reads of a parameter keep their spelling: a parameter's, a keyword's, a definition's.
    def leave_Param(self, original: cst.Param, updated: cst.Param) -> cst.Param:
        return updated.with_changes(name=original.name)

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg) -> cst.Arg:
        return updated.with_changes(keyword=original.keyword)

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        return updated.with_changes(name=original.name)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        return updated.with_changes(name=original.name)

    def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.SimpleString:
        return updated.with_changes(value=self._filled(updated.value))

    def leave_Comment(self, original: cst.Comment, updated: cst.Comment) -> cst.Comment:
        return updated.with_changes(value=self._filled(updated.value))

    def leave_If(self, original: cst.If, updated: cst.If
                 ) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement] | cst.RemovalSentinel:
        test = updated.test
        if not (isinstance(original.test, cst.Name) and original.test.value in self.code
                and isinstance(test, cst.Name) and test.value in ("True", "False")):
            return updated
        if test.value == "True":
            return cst.FlattenSentinel(updated.body.body)  # type: ignore[arg-type]
        if isinstance(updated.orelse, cst.Else):
            return cst.FlattenSentinel(updated.orelse.body.body)  # type: ignore[arg-type]
        if isinstance(updated.orelse, cst.If):
            return updated.orelse
        return cst.RemoveFromParent()
