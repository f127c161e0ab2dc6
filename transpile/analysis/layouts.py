"""Layout inference: which explicit Gluon layout every tensor of a kernel gets.

Plain Triton leaves layouts to the compiler; Gluon wants them spelled out. This analysis walks a jit function's body in
source order and collects layout *classes*: sets of tensors that must share one layout because an elementwise op,
a load/store, an assignment to the same name or a loop-carried value ties them together (a union-find over `Term`s).
Two structural constraints shape the classes:

* ``x[:, None]`` (expand_dims) needs ``x`` in ``SliceLayout(1, L)`` where ``L`` is the layout of the result, and a
  reduction ``tl.sum(x, axis=1)`` yields a tensor in ``SliceLayout(1, layout(x))``;
* ``tl.dot`` yields a tensor in the target's MMA layout (an *anchor*); every class holding a dot result gets the MMA
  layout, so epilogues, masks and pointer tiles that meet the accumulator are built in it directly.

A constraint that cannot hold (``offs_k`` used both as ``offs_k[None, :]`` and ``offs_k[:, None]``, a permuted
tensor meeting another class) becomes a ``convert_layout`` at that one site. Classes with no anchor get a blocked
layout computed from the class's tile shape. The result is a `LayoutPlan`: facts only, the rewrite rules read it.

The module holds the analysis and the walker of a function's statements and expressions; the values it computes
with, the facts it records and the algebra of types and shapes are in `layout_values`, the evaluation of language
calls (`tl.*`, tensor methods, `tl.dot`, descriptors) in `layout_calls` (mixed into the walker). The names other
modules read (`LayoutPlan`, `DotSite`, `Term`, the reduction sets, ...) are importable from here, as before.
"""

from __future__ import annotations

import ast
import re
from collections import Counter

import libcst as cst

from transpile.analysis.imports import (
    defining_functions,
    helper_closure,
    language_modules,
    module_functions,
    top_bindings,
)
from transpile.analysis.launch_alignment import is_load
from transpile.analysis.layout_calls import LanguageCalls
from transpile.analysis.layout_values import (
    _DESCRIPTOR_METHODS,
    _DTYPE_ORDER,
    _IDENT,
    _TYPE_CHAINS,
    NONE,
    SCALAR,
    Descriptor,
    LayoutPlan,
    OperandAnchor,
    Refusal,
    Scalar,
    StoreAnchor,
    Tensor,
    Term,
    Tup,
    Value,
    _beyond_elementwise,
    _broadcast,
    _element_type_of,
    _kind,
    _strip_module,
    _tuple_item,
    _unify,
    _with_pointee,
    promote,
)
from transpile.analysis.layout_values import (  # noqa: F401 - read from here by the rules and the stage planner
    BARRIER_REDUCTIONS,
    OPAQUE,
    REDUCTIONS,
    SCANS,
    DescriptorInfo,
    DotSite,
)
from transpile.cst_utils import (bound_names, call_arguments, calls_in, names_in, single_assign, substituted,
                                 unparenthesized)
from transpile.cst_walk import preorder
from transpile.discover import JitFunction, ModuleFacts, language_name
from transpile.language import NOT_TRITON
from transpile.source import SourceFile

# --------------------------------------------------------------------------------------------------------------------
# The analysis

#: The words a compile-time test in a shape may hold besides names (`D if D <= 128 and not SPLIT else BLOCK_K`).
_TEST_WORDS = frozenset({"and", "or", "not", "is", "None", "True", "False"})


class LayoutAnalysis:
    """Analyses every jit function of a module; helpers are analysed at their first call site (argument kinds)."""

    def __init__(self, facts: ModuleFacts, own_loads: dict[str, frozenset[int]] | None = None,
                 operand_anchors: dict[str, list[OperandAnchor | StoreAnchor]] | None = None) -> None:
        self.facts = facts
        # Per function, the loaded tiles that dot operands are computed from, whose computation runs in the MMA
        # operand's layout (`OperandAnchor`, for the AMD pipelines of computed operands)
        self.operand_anchors = operand_anchors or {}
        self.source: SourceFile = facts.source
        self.plans: dict[str, LayoutPlan] = {}
        # Per function, the loads (by index among its `tl.load` calls, in preorder) whose values get a blocked layout
        # of their own, converted where they meet another layout (`transpile.passes.vector_loads`).
        self.own_loads = own_loads or {}
        self.helper_kinds: dict[str, tuple[Value, ...]] = {}
        self._literal_arguments: dict[str, dict[str, str]] = {}
        self.module_names = _module_level_names(self.source.module)
        blocks = _block_functions(self.source.module)
        self.unseen_functions = _unseen_functions(self.source.module, set(facts.functions) | set(facts.aliases),
                                                  self.source.path, blocks)
        self.block_tuples = _block_tuple_arities(blocks)
        # names imported from modules other than Triton's and torch's (`from pkg.utils import zero_fill`): where the
        # module is not found, such a function is taken for elementwise math, unless a kernel calls it for its effects
        self.imported_names = _imported_names(self.source.module, self.source.path)
        self.elementwise_imports = _elementwise_imports(self.source.module, self.source.path)

    def literal_arguments(self, fn: JitFunction) -> dict[str, str]:
        """The parameters of the helper `fn` that every call of it from the module's jit functions gives the same
        constant (its default where a call leaves it out): an integer, `True`, `False` or `None`, as text; a call may
        pass on a parameter of its own function that has one (`_amax(x, axis)` in a helper that every call gives
        `axis=1`). Triton compiles the helper with that constant (`axis=0` passed to a reduction helper), so the
        analysis may read it as one. Empty for a kernel, or where some call is not a plain call by its name."""
        if fn.name in self._literal_arguments:
            return self._literal_arguments[fn.name]
        self._literal_arguments[fn.name] = {}  # (a helper that calls itself, through others: no constants)
        params = fn.node.params
        ordered = [p.name.value for p in [*params.posonly_params, *params.params]]
        defaults = {p.name.value: p.default for p in [*params.posonly_params, *params.params, *params.kwonly_params]
                    if p.default is not None}
        sites = [(caller, c) for caller in self.facts.functions.values() for c in calls_in(caller.node)
                 if isinstance(c.func, cst.Name) and c.func.value == fn.name]
        found: dict[str, str] = {}
        if fn.called_by and sites and not any(a.star for _, c in sites for a in c.args):
            values: dict[str, set[str | None]] = {}
            for caller, call in sites:
                given = {param: arg.value for param, arg in call_arguments(call, ordered) if param is not None}
                for param in [*ordered, *(p.name.value for p in params.kwonly_params)]:
                    values.setdefault(param, set()).add(self.constant(caller, given.get(param, defaults.get(param))))
            found = {name: next(iter(v)) for name, v in values.items() if len(v) == 1 and None not in v}  # type: ignore[misc]
        self._literal_arguments[fn.name] = found
        return found

    def constant(self, fn: JitFunction, node: cst.BaseExpression | None) -> str | None:
        """`node`, an expression of `fn`, as a constant's text (see `literal_arguments`): a literal, or a parameter of
        `fn` that it never rebinds and that every call gives one constant; else None."""
        if node is None:
            return None
        if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
            return node.value
        number = _integer(self.source, node)
        if number is not None:
            return str(number)
        if isinstance(node, cst.Name) and node.value in {p.name for p in fn.params} \
                and node.value not in bound_names(fn.node.body):
            return self.literal_arguments(fn).get(node.value)
        return None

    def run(self) -> dict[str, LayoutPlan]:
        for fn in self.facts.kernels:
            self.analyse(fn, None)
        for fn in self.facts.helpers:  # helpers no kernel reached: analyse with scalar parameters
            if fn.name not in self.plans:
                self.analyse(fn, None)
        for plan in self.plans.values():
            _merge_equal_layouts(plan)
            # (a conversion between classes merged after it was recorded, two operands' layouts found one: none)
            for node, source in plan.convert_sources.items():
                if node in plan.converts and plan.converts[node].find() is source.find():
                    del plan.converts[node]
            _solve(plan, self)
        return self.plans

    def analyse(self, fn: JitFunction, arg_kinds: tuple[Value, ...] | None) -> LayoutPlan:
        if fn.name in self.plans:
            return self.plans[fn.name]
        plan = LayoutPlan(fn, elementwise_imports=frozenset(self.elementwise_imports))
        if arg_kinds is not None:
            plan.kinds = tuple(_kind(k) for k in arg_kinds)
        self.plans[fn.name] = plan
        walker = _FunctionWalker(self, plan, arg_kinds)
        for _ in range(2):  # a second walk settles kinds of names that a later statement makes tensors
            walker.walk_body(fn.node.body)
        walker.finish()
        return plan




def _bound_otherwise(body: cst.CSTNode, name: str) -> bool:
    """`name` is bound under `body` other than by a plain statement (a loop target, a `with ... as`, a walrus)."""
    return any(isinstance(n, cst.For) and name in names_in(n.target)
               or isinstance(n, cst.WithItem) and n.asname is not None and name in names_in(n.asname.name)
               or isinstance(n, cst.NamedExpr) and name in names_in(n.target) for n in preorder(body))


def _is_none(node: cst.BaseExpression | None) -> bool:
    """`node` is the literal `None`."""
    return isinstance(node, cst.Name) and node.value == "None"


def _integer(source: SourceFile, node: cst.BaseExpression | None) -> int | None:
    """An integer literal (`0`, `-1`), else None."""
    if node is None:
        return None
    try:
        return int(source.code(node).strip())
    except ValueError:
        return None


def _block_functions(module: cst.Module) -> dict[str, list[ast.FunctionDef]]:
    """The functions a module defines inside its module-level `if`/`try`/`with` blocks, by name (one per branch)."""
    local: dict[str, list[ast.FunctionDef]] = {}
    for statement in module.body:
        if isinstance(statement, (cst.If, cst.Try, cst.With)):
            for node in ast.walk(ast.parse(cst.Module([statement]).code)):
                if isinstance(node, ast.FunctionDef):
                    local.setdefault(node.name, []).append(node)
    return local


def _unseen_functions(module: cst.Module, jit_names: set[str], path: str,
                      blocks: dict[str, list[ast.FunctionDef]] | None = None) -> dict[str, str]:
    """Names a module binds to Triton code the tool does not translate and a Gluon kernel cannot call, with where it
    is: a function defined inside a module-level `if`/`try`/`with` (a helper picked by an environment variable), or
    imported from another module of the project (`from fla.ops.utils.op import safe_dot`, the file found on disk),
    whose body does more than elementwise math (a `tl.dot`: the Gluon kernel calling it did not compile). Helpers
    that only compute elementwise (`exp2`), aliases, and modules not found stay callable, as before."""
    found: dict[str, str] = {}
    local = _block_functions(module) if blocks is None else blocks  # (`blocks`: that of `module`, read once already)
    imports = ast.parse(cst.Module([s for s in module.body if isinstance(s, cst.SimpleStatementLine)
                                    and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)]).code)
    math_modules = language_modules(imports)
    for name, defs in local.items():
        if any(_beyond_elementwise(d, math_modules) for d in defs):
            found[name] = "defined under a module-level `if`/`try`/`with`"
    bindings: dict[str, tuple[str, str] | None] | None = None
    for _statement, _alias, bound, origin, _imported in imported_helpers(module, path):
        if bindings is None:
            bindings = top_bindings(ast.parse(module.code))
        why = helper_closure(path, origin, bound, {n: b for n, b in bindings.items() if n != bound})
        found.setdefault(bound, f"imported from `{origin}`" + (f" and cannot be copied here ({why})"
                                                                if isinstance(why, str) else ""))
    return {name: how for name, how in found.items() if name not in jit_names}


def _elementwise_imports(module: cst.Module, path: str) -> set[str]:
    """Names the module imports from modules of its project (found on disk) bound to Triton helpers of elementwise
    math alone, on their parameters as given (no broadcast: no subscript), which stay imported and which a Gluon
    kernel calls as they are: their result has the layout of their tensor arguments (`_tanh(x)` returning
    `2 * tl.sigmoid(2 * x) - 1`)."""
    found = set()
    for _statement, _alias, bound, origin, imported in _imports_from(module):
        defs, math = defining_functions(path, origin, imported)
        if defs and not any(_beyond_elementwise(d, math) or any(
                isinstance(n, ast.Subscript) or (isinstance(n, ast.Attribute) and n.attr == "T")
                or isinstance(n, (ast.Tuple, ast.List)) for n in ast.walk(d)) for d in defs):
            found.add(bound)
    return found


def _imported_names(module: cst.Module, path: str) -> dict[str, str]:
    """Names the module's top-level `from X import name` statements bind, X neither Triton nor torch, where the tool
    finds no definition of the name on disk (a module of another project): name -> X."""
    return {bound: origin for _statement, _alias, bound, origin, imported in _imports_from(module)
            if not defining_functions(path, origin, imported)[0]}


def _imports_from(module: cst.Module) -> list[tuple[cst.SimpleStatementLine, cst.ImportAlias, str, str, str]]:
    """The module's top-level `from X import name [as bound]`, X neither Triton nor torch: (statement, alias, bound,
    X as written, name) each."""
    out = []
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not isinstance(small, cst.ImportFrom) or isinstance(small.names, cst.ImportStar):
                continue
            origin = "." * len(small.relative) + (cst.Module([]).code_for_node(small.module)
                                                  if small.module is not None else "")
            if origin == "triton" or origin.startswith(("triton.", "torch")):
                continue
            for alias in small.names:
                bound = alias.asname.name if alias.asname is not None else alias.name
                if isinstance(bound, cst.Name):
                    out.append((statement, alias, bound.value, origin, cst.Module([]).code_for_node(alias.name)))
    return out


def _block_tuple_arities(blocks: dict[str, list[ast.FunctionDef]]) -> dict[str, int]:
    """Functions defined in module-level `if`/`try`/`with` blocks (`_block_functions`) whose every definition returns
    a tuple of one length (FlagGems' `pair_uniform_to_normal` fallback): that length, by name."""
    found: dict[str, set[int]] = {}
    for name, defs in blocks.items():
        for node in defs:
            returns = [r.value for r in ast.walk(node) if isinstance(r, ast.Return)]
            found.setdefault(name, set()).update(len(v.elts) if isinstance(v, ast.Tuple) else 0
                                                 for v in returns or [None])
    return {name: next(iter(lengths)) for name, lengths in found.items() if len(lengths) == 1 and 0 not in lengths}


def imported_helpers(module: cst.Module, path: str
                     ) -> list[tuple[cst.SimpleStatementLine, cst.ImportAlias, str, str, str]]:
    """The Triton helpers a module imports from other modules of its project (found on disk) that do more than
    elementwise math, which a Gluon kernel cannot call: (import statement, alias, name bound here, module as
    imported, name there) each."""
    out = []
    for statement, alias, bound, origin, imported in _imports_from(module):
        defs, their_math = module_functions(path, origin)
        found, math = (defs[imported], their_math) if imported in defs else \
            defining_functions(path, origin, imported)  # (a name the module re-exports)
        if any(_beyond_elementwise(d, math) for d in found):
            out.append((statement, alias, bound, origin, imported))
    return out


def _module_level_names(module: cst.Module) -> set[str]:
    names: set[str] = set()
    for statement in module.body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            names.add(statement.name.value)
        elif isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets: list[cst.BaseExpression] = []
                if isinstance(small, cst.Assign):
                    targets = [t.target for t in small.targets]
                elif isinstance(small, cst.AnnAssign):
                    targets = [small.target]
                for t in targets:
                    if isinstance(t, cst.Name):
                        names.add(t.value)
    return names


def _binding_statements(function: cst.FunctionDef) -> tuple[dict[str, list[cst.SimpleStatementLine]], set[str]]:
    """For `_FunctionWalker.statements_binding`: per name, the plain `name = value` lines of `function` that bind it
    (in order), and the names bound any other way (a statement of several parts, a tuple or augmented target, a loop
    variable, `with ... as name`, `(name := ...)`), which give no statement to read a value from."""
    plain: dict[str, list[cst.SimpleStatementLine]] = {}
    other: set[str] = set()
    for node in preorder(function.body):
        if isinstance(node, cst.SimpleStatementLine):
            names = bound_names(node)
            if not names:
                continue
            small = node.body[0] if len(node.body) == 1 else None
            if isinstance(small, cst.Assign) and len(small.targets) == 1 \
                    and isinstance(small.targets[0].target, cst.Name):
                for name in names:
                    plain.setdefault(name, []).append(node)
            else:
                other |= names
        elif isinstance(node, (cst.For, cst.AsName, cst.NamedExpr)):
            other |= names_in(node.target if isinstance(node, cst.For) else node.name if isinstance(node, cst.AsName)
                              else node.target)
    return plain, other


def _loaded_first(orelse: cst.Else, name: str) -> bool:
    """The first statement of the `else` block that mentions `name` binds it, by a plain assignment that does not read
    it, to a value loaded from memory (`dt = tl.load(dt_ptr).to(tl.float32)`: a scalar where the other branch loads a
    vector). A number or a parameter (`s = 1.0`, `flip = order`) is not: such a name is a tensor or a number, which the
    translation handles where it is used (`isinstance(x, gl.tensor)` in helpers)."""
    for statement in orelse.body.body if isinstance(orelse.body, cst.IndentedBlock) else ():
        if name in names_in(statement) or name in bound_names(statement):
            assigned = single_assign(statement)
            return assigned is not None and assigned[0] == name and name not in names_in(assigned[1]) and any(
                is_load(call) for call in preorder(assigned[1]) if isinstance(call, cst.Call))
    return False


class _FunctionWalker(LanguageCalls):
    def __init__(self, analysis: LayoutAnalysis, plan: LayoutPlan, arg_kinds: tuple[Value, ...] | None) -> None:
        self.analysis = analysis
        self.source = analysis.source
        self.plan = plan
        self.fn = plan.function
        self._bindings: tuple[dict[str, list[cst.SimpleStatementLine]], set[str]] | None = None  # (of `fn`)
        self.env: dict[str, Value] = {}
        self.name_terms: dict[str, Term] = {}
        self.memo: dict[tuple[cst.CSTNode, str], Term] = {}
        self.param_terms: dict[str, Term] = {}
        self.refused: set[tuple[int, str]] = set()
        self.opaque_nodes: set[cst.CSTNode] = set()
        self.returns: list[Value] = []
        self.tuple_calls: dict[cst.Call, str] = {}  # calls of helpers that return tensors in a tuple
        self.loops: list[cst.CSTNode] = []  # the loops around the statement being walked, outermost first
        self._loop_assigned: dict[str, list[cst.CSTNode]] | None = None
        own = analysis.own_loads.get(self.fn.name)
        self.own_loads: set[int] = set()
        if own:
            from transpile.passes.vector_loads import load_calls

            self.own_loads = {id(call) for i, call in enumerate(load_calls(analysis.facts, self.fn)) if i in own}
        # Computed operands' tile loads and the nodes of their computation (`OperandAnchor`), by id
        anchors = analysis.operand_anchors.get(self.fn.name, [])
        self.anchors: dict[int, OperandAnchor] = {id(a.load): a for a in anchors if isinstance(a, OperandAnchor)}
        self.store_anchors = {id(a.store) for a in anchors if isinstance(a, StoreAnchor)}
        self.anchored_nodes = {n: a for a in self.anchors.values() for n in a.nodes}
        self.anchor_terms: dict[tuple[int, int], Term] = {}  # (by the dot and the operand's position)
        self.lazy_uses: dict[int, tuple[cst.Name, Term, Term]] = {}  # node id -> (node, its class, the value's)
        self.unpacked: set[cst.BaseExpression] = set()  # ... unpacked into names right away
        param_names = [p.name for p in self.fn.params]
        self.allowed_shape_names = set(param_names) | analysis.module_names
        # Constexprs the function binds once (`PACK: tl.constexpr = 2 if FORMAT == "e2m1" else 1`, at its top level
        # or under an `if`: `shape0: tl.constexpr = BLOCK_M * D // BLOCK_R`) from parameters and module names: a shape
        # that reads one is written with its definition (the layouts are declared before it is bound).
        self.local_constexprs: dict[str, cst.BaseExpression] = {}
        lines = [n for n in preorder(self.fn.node.body) if isinstance(n, cst.SimpleStatementLine)]
        bindings = Counter(name for line in lines for name in bound_names(line))
        # Names the function assigns `None` somewhere (`mask = None` under a flag): a mask, a bias or a scale left
        # out, no scalar value (`walk_statement`'s `if`)
        none_bindings = Counter(a.targets[0].target.value for line in lines for a in line.body  # type: ignore[attr-defined]
                                if isinstance(a, cst.Assign) and len(a.targets) == 1
                                and isinstance(a.targets[0].target, cst.Name) and _is_none(a.value))
        self.nones = set(none_bindings)
        # Names bound to a scalar read from memory (`dA_last = tl.load(p + i)`, `s = tl.exp(dA_last)`), as the walk
        # meets them (`bind_target`): such a value replaces a tensor the name held before
        self.loaded_scalars: set[str] = set()
        # names a compile-time `if` leaves of two ranks (the `if` and the refusal's text): refused where read before
        # they are bound again (a name nothing reads after the `if`, such as one an unswitched loop binds in both
        # its copies, needs no one layout)
        self.two_ranks: dict[str, tuple[cst.If, str]] = {}
        picked = self._branch_constexprs(bindings)
        for statement in lines:
            small = statement.body[0] if len(statement.body) == 1 else None
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) \
                    and small.target.value in picked:
                if small is picked[small.target.value][0]:
                    self._bind_picked(*picked[small.target.value][1:])
                continue
            if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) \
                    and bindings[small.target.value] > 1:
                continue
            if self._constexpr_binding(small) and all(n in self.allowed_shape_names or n in self.local_constexprs
                                                      for n in names_in(small.value)):
                value = substituted(small.value, self.local_constexprs)
                self.local_constexprs[small.target.value] = value if isinstance(
                    value, (cst.Name, cst.Integer)) else value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        # a scalar parameter is a scalar here (not a tensor a generic walk of a helper does not know)
        self.scalar_params = arg_kinds is not None or not self.fn.called_by
        from transpile.analysis.launch_alignment import pointer_params

        self.pointers = pointer_params(analysis.facts, self.fn)  # the parameters the loads and stores address from
        # Parameters this analysis's call passes `None` (kind "none"): their `if x is not None:` tests are decided
        self.none_params: set[str] = set()
        self.rebound_params = set(param_names) & bound_names(self.fn.node.body)  # (not taken as `None` throughout)
        # ... and locals bound to `None` alone (a helper's argument inlined as `b_lamb_1 = None`)
        self.none_locals = {name for name, n in none_bindings.items() if bindings[name] == n
                            and name not in param_names and not _bound_otherwise(self.fn.node.body, name)}
        for i, name in enumerate(param_names):
            kind = arg_kinds[i] if arg_kinds is not None and i < len(arg_kinds) else SCALAR
            if isinstance(kind, Tensor):
                term = Term(rank=kind.rank, origins={f"param:{name}"}, names=[name])
                self.param_terms[name] = term
                self.name_terms[name] = term
                # The element type as the call site translated it into this helper's names, else the parameter's own
                # `.dtype` (valid where the layouts are declared: the top of the helper). Shapes stay unknown.
                self.env[name] = Tensor(term, kind.elem or f"{name}.dtype", kind.shape)
            elif isinstance(kind, Descriptor):
                self.refuse(self.fn.node, "TT010", f"helper `{self.fn.name}` takes a tensor descriptor argument "
                            f"`{name}`; pass the base pointer and strides instead")
                self.env[name] = SCALAR
            else:
                self.env[name] = Scalar(param=name)
                if isinstance(kind, Scalar) and kind.none:
                    self.none_params.add(name)

    def none_test(self, test: cst.BaseExpression) -> bool | None:
        """Whether `test` holds, where Triton decides it at compile time from what is `None`: `x is None` or `x is
        not None` of a parameter the call passes `None` (or a local bound to `None` alone) or a tensor, and `not`,
        `and`, `or` of such tests, read left to right as Triton short-circuits them (`if a is not None and b is not
        None:` ... `elif a is not None:`); None where the test is not so decided."""
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self.none_test(test.expression)
            return None if inner is None else not inner
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, (cst.And, cst.Or)):
            left = self.none_test(test.left)
            settles = isinstance(test.operator, cst.Or)  # (the left value that decides the whole: True for `or`)
            if left is None:
                return None
            return left if left is settles else self.none_test(test.right)
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(test.left, cst.Name)):
            return None
        target = test.comparisons[0]
        if not _is_none(target.comparator) or not isinstance(target.operator, (cst.Is, cst.IsNot)):
            return None
        name = test.left.value
        if name in self.none_locals or name in self.none_params and name not in self.rebound_params:
            none = True
        elif name in self.param_terms and name not in self.rebound_params:
            none = False  # (a tensor argument)
        else:
            return None
        return none is isinstance(target.operator, cst.Is)

    # ---- bookkeeping ----------------------------------------------------------------------------------------------

    def refuse(self, node: cst.CSTNode, code: str, message: str) -> None:
        key = (id(node), code)
        if key not in self.refused:
            self.refused.add(key)
            self.plan.refusals.append(Refusal(node, code, message))

    def fresh(self, node: cst.CSTNode, tag: str, **kwargs: object) -> Term:
        key = (node, tag)
        if key not in self.memo:
            self.memo[key] = Term(**kwargs)  # type: ignore[arg-type]
        return self.memo[key]

    def anchor_term(self, anchor: OperandAnchor, shape: tuple[str | None, ...] | None = None) -> Term:
        """The class of the tile `anchor` loads (made at its load, of `shape`), a dot operand's own: until the dot
        is reached its MMA layout is the tile's own term, as a key."""
        # (one class per operand: tiles combined into one operand, `(b_q * exp(b_zp[None, :] - b_z))`, share it)
        key = (id(anchor.dot), anchor.position)
        term = self.anchor_terms.get(key)
        if term is None:
            term = Term(rank=2, shape=list(shape) if shape else None, origins={"operand"})
            term.operand = (anchor.position, term, "", None)
            self.anchor_terms[key] = term
        return term

    def created(self, node: cst.CSTNode, rank: int | None, shape: list[str | None] | None) -> Term:
        """A creation site (arange, zeros, full, a descriptor load): it gets `layout=` its class's layout."""
        term = self.fresh(node, "create", rank=rank, shape=shape, origins={"creation"})
        self.plan.creations[node] = term
        return term

    def unify_or_convert(self, target: Term, node: cst.BaseExpression, value: Term) -> None:
        """Make the tensor `node` (of class `value`) live in `target`'s class, or convert it at this site."""
        if not _unify(target, value):
            self.plan.converts[node] = target
            self.plan.convert_sources[node] = value

    def dtype_text(self, node: cst.BaseExpression) -> str | None:
        """``tl.float16`` -> ``gl.float16``; ``c_ptr.dtype.element_ty`` as is; None for anything local."""
        lang = language_name(self.source.qualified_name(node))
        if lang is not None:
            return f"gl.{lang.rsplit('.', 1)[-1]}"
        spelt = _element_type_of(node)
        if spelt is not None:
            name, chain = spelt
            local = self.env.get(name)
            if isinstance(local, Tensor) and local.elem is not None and local.pointer == _TYPE_CHAINS[chain]:
                return local.elem  # `x.to(y.dtype)`, `x.to(y.type.element_ty)`: the type the analysis knows for `y`
            if chain == ("type", "element_ty") and isinstance(local, Scalar) and local.param == name \
                    and self.scalar_params and name not in self.fn.constexpr_names:
                return f"{name}.dtype.element_ty"  # (`p.type.element_ty` of a pointer parameter: one spelling)
        return self.shape_text(node)

    def shape_text(self, node: cst.BaseExpression) -> str | None:
        bare = unparenthesized(node)
        if isinstance(bare, cst.IfExp):
            # (a size a compile-time test picks, `tl.arange(0, D if D <= 128 else BLOCK_K)`: Triton picks it when it
            # compiles the kernel, Gluon likewise)
            body, orelse = self.shape_text(bare.body), self.shape_text(bare.orelse)
            test = self.source.code(bare.test).strip()
            if body is None or orelse is None or not all(
                    name in self.allowed_shape_names or name in _TEST_WORDS for name in _IDENT.findall(test)):
                return None
            return f"({body} if {' '.join(test.split())} else {orelse})"
        text = self.source.code(node).strip()
        if all(name in self.allowed_shape_names for name in _IDENT.findall(text)):
            return text
        names = names_in(node)
        if self.local_constexprs and names & self.local_constexprs.keys() and all(
                n in self.allowed_shape_names or n in self.local_constexprs for n in names):
            return self.source.code(_unit_folded(substituted(node, self.local_constexprs))).strip()
        return None

    # ---- statements -----------------------------------------------------------------------------------------------

    def _branch_constexprs(self, bindings: Counter) -> dict[str, tuple[cst.AnnAssign, str, cst.BaseExpression,
                                                                        cst.BaseExpression, cst.BaseExpression]]:
        """Constexprs the two branches of one compile-time `if` bind, once each, outside any loop::

            if PRESHUFFLED:
                PACKED_BLOCK_K: tl.constexpr = BLOCK_K * 16
            else:
                PACKED_BLOCK_K: tl.constexpr = BLOCK_K

        by name: (the first binding, the name, the test, the value each branch gives). Triton compiles the branch the
        test takes, so the name is one constexpr, `(BLOCK_K * 16 if PRESHUFFLED else BLOCK_K)`, wherever it is read."""
        found: dict[str, tuple[cst.AnnAssign, str, cst.BaseExpression, cst.BaseExpression, cst.BaseExpression]] = {}

        def constexprs(block: cst.BaseSuite) -> dict[str, cst.AnnAssign]:
            return {line.body[0].target.value: line.body[0]  # type: ignore[attr-defined]
                    for line in (block.body if isinstance(block, cst.IndentedBlock) else [])
                    if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
                    and self._constexpr_binding(line.body[0])}

        def visit(block: cst.BaseSuite) -> None:
            for statement in block.body if isinstance(block, cst.IndentedBlock) else []:
                if not isinstance(statement, cst.If):
                    continue  # (not inside loops: a loop may bind it again each iteration)
                visit(statement.body)
                if isinstance(statement.orelse, cst.If):
                    continue
                if not isinstance(statement.orelse, cst.Else):
                    continue
                visit(statement.orelse.body)
                test = self.source.code(statement.test).strip()
                if not all(name in self.allowed_shape_names or name in _TEST_WORDS for name in _IDENT.findall(test)):
                    continue
                then, other = constexprs(statement.body), constexprs(statement.orelse.body)
                for name in then.keys() & other.keys():
                    if bindings[name] == 2 and name not in self.allowed_shape_names:
                        found[name] = (then[name], name, statement.test, then[name].value, other[name].value)

        visit(self.fn.node.body)
        return found

    def _constexpr_binding(self, small: cst.BaseSmallStatement | None) -> bool:
        """`small` binds a name to a value as a constexpr (`X: tl.constexpr = ...`)."""
        return isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name) and small.value is not None \
            and self.source.code(small.annotation.annotation).strip().endswith("constexpr")

    def _bind_picked(self, name: str, test: cst.BaseExpression, then: cst.BaseExpression,
                     other: cst.BaseExpression) -> None:
        """`local_constexprs[name]`: the value the compile-time `test` picks (`_branch_constexprs`), where both values
        read parameters, module names and earlier constexprs alone."""
        if not all(n in self.allowed_shape_names or n in self.local_constexprs
                   for n in names_in(then) | names_in(other)):
            return
        picked = cst.IfExp(test=test.with_changes(lpar=[], rpar=[]) if isinstance(test, cst.Name) else test,
                           body=substituted(then, self.local_constexprs),
                           orelse=substituted(other, self.local_constexprs),
                           lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        self.local_constexprs[name] = picked

    def literal_argument(self, node: cst.BaseExpression | None) -> str | None:
        """`node` as a constant's text: a literal, or a parameter of this helper that every call gives the same
        constant (`LayoutAnalysis.constant`)."""
        return self.analysis.constant(self.fn, node)

    def walk_body(self, body: cst.BaseSuite | list[cst.BaseStatement]) -> None:
        statements = body.body if isinstance(body, (cst.IndentedBlock, cst.SimpleStatementSuite)) else body
        for statement in statements:
            self.walk_statement(statement)

    def walk_statement(self, statement: cst.CSTNode) -> None:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                self.walk_small(small)
        elif isinstance(statement, cst.If) and (taken := self.none_test(statement.test)) is not None:
            # `if x is not None:` of a parameter the call passes `None`: Triton compiles only the branch the test
            # takes (the other is never compiled: it may read `x` as a tensor)
            if taken:
                self.walk_body(statement.body)
            elif isinstance(statement.orelse, cst.If):
                self.walk_statement(statement.orelse)
            elif isinstance(statement.orelse, cst.Else):
                self.walk_body(statement.orelse.body)
        elif isinstance(statement, cst.If):
            self.eval(statement.test)
            env, terms = dict(self.env), dict(self.name_terms)
            self.walk_body(statement.body)
            orelse = statement.orelse
            reranked: dict[str, tuple[Value, Term | None]] = {}  # the first branch's rebinding to another rank
            if orelse is not None:
                # A name the first branch rebound to another rank (`y = tl.expand_dims(y, 0)` under a constexpr
                # flag) keeps its old value in the other branch, which starts from the state before the `if`.
                for name, value in list(self.env.items()):
                    old = env.get(name)
                    if (isinstance(value, Tensor) and isinstance(old, Tensor) and None not in (value.rank, old.rank)
                            and value.rank != old.rank):
                        reranked[name] = (value, self.name_terms.get(name))
                        self.env[name] = old
                        if name in terms:
                            self.name_terms[name] = terms[name]
            then = dict(self.env)
            # A name the first branch binds afresh and the `else` loads before it reads it is unbound where the
            # `else` starts: the scalar it loads is not taken for the first branch's tensor (`bind_target` keeps a
            # tensor a name already holds). Not a name the function assigns `None` (a mask, a bias or a scale left
            # out: the code after the `if` reads it only where it is a tensor), nor one the `else` reads first (it
            # compiles only where the first branch runs, and keeps the first branch's tensor).
            fresh = [name for name in then if name not in env and name not in self.nones
                     and _loaded_first(orelse, name)] if isinstance(orelse, cst.Else) else []
            for name in fresh:
                del self.env[name]
            if isinstance(orelse, cst.If):
                self.walk_statement(orelse)
            elif isinstance(orelse, cst.Else):
                self.walk_body(orelse.body)
            for name in fresh:
                self.env.setdefault(name, then[name])
            for name, (value, term) in reranked.items():
                # ... and where the other branch leaves it as it was, the code after the `if` reads it as the first
                # branch leaves it, as after an `if` without `else` (a constexpr test: the later code under the same
                # flag reads that rank; `b_scale_ptrs` per column under `if group_n > 0:` in MoE kernels)
                if self.env.get(name) is env.get(name):
                    self.env[name] = value
                    if term is not None:
                        self.name_terms[name] = term
            if orelse is not None:
                # A name both branches leave as tensors of different ranks (`db = b[None, :] * d[:, None]` under
                # `if PER_ROW:`, `db = b * d` else): Triton compiles the branch a constexpr test takes, with either
                # rank after it; the translation gives each name one layout.
                # A scalar in one branch and a tensor in the other (`dt = tl.load(dt_ptrs, mask=...)` per row under
                # `if not TIE_HDIM:`, `dt = tl.load(dt_ptr)` else, then `A * dt` in the code after it under the same
                # flag: mamba's selective state update) is such a name too: rank 0.
                for name, value in self.env.items():
                    other = then.get(name)
                    if other is env.get(name) or value is env.get(name):
                        continue
                    ranks = [0 if isinstance(v, Scalar) else v.rank if isinstance(v, Tensor) else None
                             for v in (other, value)]
                    if None not in ranks and ranks[0] != ranks[1] and (
                            isinstance(other, Tensor) and isinstance(value, Tensor) or name in fresh):
                        self.two_ranks[name] = (statement, (
                            f"`{name}` is a rank-{ranks[0]} tensor after this `if` branch and a rank-{ranks[1]} "
                            f"tensor after the other{' (rank 0: a scalar)' if 0 in ranks else ''}; the Gluon "
                            "translation gives a name one layout: give each rank its own name"))
        elif isinstance(statement, cst.For):
            self.eval(statement.iter)
            self.bind_target(statement.target, SCALAR, None)
            self.loops.append(statement)
            for _ in range(2):  # loop-carried values: the second walk sees what the first one bound
                self.walk_body(statement.body)
            self.loops.pop()
            if statement.orelse is not None:
                self.walk_body(statement.orelse.body)
        elif isinstance(statement, cst.While):
            self.loops.append(statement)
            for _ in range(2):
                self.eval(statement.test)
                self.walk_body(statement.body)
            self.loops.pop()
        elif isinstance(statement, cst.With):
            for item in statement.items:
                self.eval(item.item)
            self.walk_body(statement.body)
        elif isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            self.refuse(statement, "TT010", f"nested definition `{statement.name.value}` inside a jit function")
        elif isinstance(statement, (cst.Try, cst.Match)):
            self.refuse(statement, "TT010", "`try`/`match` is not supported inside a jit function")

    def walk_small(self, small: cst.BaseSmallStatement) -> None:
        if isinstance(small, cst.Assign):
            value = self.eval(small.value)
            for target in small.targets:
                self.bind_target(target.target, value, small.value)
            self.unpack_helper_tuple(small, value)
        elif isinstance(small, cst.AnnAssign):
            value = self.eval(small.value) if small.value is not None else SCALAR
            self.bind_target(small.target, value, small.value)
        elif isinstance(small, cst.AugAssign):
            current = self.eval(small.target)
            adds = isinstance(small.operator, (cst.AddAssign, cst.SubtractAssign))
            incoming = self.eval(small.value)
            if (isinstance(current, Tensor) and isinstance(incoming, Tensor) and current.rank is not None
                    and incoming.rank is not None and current.rank < incoming.rank):
                self.refuse(small, "TT010", f"`{self.source.code(small.target).strip()}` (rank {current.rank}) is "
                            f"updated in place with a rank-{incoming.rank} tensor; assign the broadcast result to a "
                            "new name")
                return
            value = self.binary(current, small.target, incoming, small.value, adds)
            self.bind_target(small.target, value, small.value)
        elif isinstance(small, cst.Expr):
            self.eval(small.value)
        elif isinstance(small, cst.Return):
            if small.value is not None:
                self.returns.append(self.eval(small.value))
        elif isinstance(small, cst.Assert):
            self.eval(small.test)

    def _reads_memory(self, node: cst.BaseExpression) -> bool:
        """`node` loads (`tl.load(...)`, any spelling) or reads a name bound to a scalar loaded from memory."""
        return any(isinstance(n, cst.Call) and is_load(n) or isinstance(n, cst.Name) and n.value in self.loaded_scalars
                   for n in preorder(node))

    def bind_target(self, target: cst.BaseExpression, value: Value, value_node: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Name):
            name = target.value
            self.two_ranks.pop(name, None)
            if isinstance(value, Tensor):
                known = self.name_terms.get(name)
                if known is not None and None not in (known.find().rank, value.rank) \
                        and known.find().rank != value.rank:
                    # Rebound to a tensor of another rank (`m = tl.max(m, 1)` after a loop that carried `m` as a
                    # tile): a new value with its own layout class. Triton allows it only in straight-line code
                    # (a loop-carried value keeps its type), so no loop sees both.
                    del self.name_terms[name]
                    self.env.pop(name, None)
                if name in self.name_terms:
                    existing = self.name_terms[name]
                    if value_node is not None:
                        self.unify_or_convert(existing, value_node, value.term)
                    else:
                        _unify(existing, value.term)
                else:
                    self.name_terms[name] = value.term
                    value.term.find().names.append(name)
                previous = self.env.get(name)
                elem = value.elem or (previous.elem if isinstance(previous, Tensor) else None)
                shape = value.shape or (previous.shape if isinstance(previous, Tensor) else None)
                # (a tensor of pointers stays one: `x_ptr += offs[:, None]`, then `x_ptr + k * stride` points into x)
                self.env[name] = Tensor(self.name_terms[name], elem, shape, value.pointer)
            elif isinstance(value, Descriptor):
                self.env[name] = Descriptor(name, value.info)
                self.plan.descriptors[name] = value.info
                self.plan.descriptor_calls[value.info.node] = value.info
                self.plan.descriptor_makes.setdefault(name, []).append(value.info)
            else:
                previous = self.env.get(name)
                if isinstance(value, Scalar) and value_node is not None and self._reads_memory(value_node):
                    # A scalar read from memory rebinding a name that held a tensor (a vector of scales in the
                    # loop, `scale = tl.exp(dA_last)` after it: mamba's chunk states): the code after reads the
                    # scalar. (A number keeps the tensor: `s = 1.0` in one branch of a flag, a tensor in the other.)
                    self.loaded_scalars.add(name)
                    if isinstance(previous, Tensor):
                        self.name_terms.pop(name, None)
                        previous = None
                else:
                    self.loaded_scalars.discard(name)
                self.env[name] = previous if isinstance(previous, Tensor) else value
        elif isinstance(target, (cst.Tuple, cst.List)):
            items = value.items if isinstance(value, Tup) else None
            elements = [e.value for e in target.elements]
            value_elements: list[cst.BaseExpression | None] = [None] * len(elements)
            if isinstance(value_node, (cst.Tuple, cst.List)) and len(value_node.elements) == len(elements):
                value_elements = [e.value for e in value_node.elements]
            for i, element in enumerate(elements):
                item = items[i] if items is not None and i < len(items) else SCALAR
                self.bind_target(element, item, value_elements[i])
        elif isinstance(target, cst.Subscript):
            self.eval(target)

    # ---- expressions ----------------------------------------------------------------------------------------------

    def eval(self, node: cst.BaseExpression | None) -> Value:
        if node is None:
            return SCALAR
        if isinstance(node, cst.Name):
            if node.value in self.two_ranks:
                branch, message = self.two_ranks[node.value]
                self.refuse(branch, "TT010", message)
            value = self.env.get(node.value, SCALAR)
            anchor = self.anchored_nodes.get(id(node))
            if anchor is not None and isinstance(value, Tensor) and node.value in anchor.invariant:
                # a loop-invariant tensor read by a computed operand's computation: its layout here is decided by
                # that computation (`finish` converts the value where the two differ)
                use = self.lazy_uses.get(id(node))
                if use is None:
                    term = Term(rank=value.rank, shape=list(value.shape) if value.shape else None, origins={"use"})
                    use = self.lazy_uses[id(node)] = (node, term, value.term)
                return Tensor(use[1], value.elem, value.shape, value.pointer)
            return value
        if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
                             cst.FormattedString, cst.Ellipsis, cst.Lambda)):
            return SCALAR
        if isinstance(node, cst.Attribute):
            return self.eval_attribute(node)
        if isinstance(node, cst.BinaryOperation):
            adds = isinstance(node.operator, (cst.Add, cst.Subtract))
            return self.binary(self.eval(node.left), node.left, self.eval(node.right), node.right, adds)
        if isinstance(node, cst.UnaryOperation):
            return self.eval(node.expression)
        if isinstance(node, cst.BooleanOperation):
            return self.binary(self.eval(node.left), node.left, self.eval(node.right), node.right)
        if isinstance(node, cst.Comparison):
            value = self.eval(node.left)
            left = node.left
            for target in node.comparisons:
                value = self.binary(value, left, self.eval(target.comparator), target.comparator)
                left = target.comparator
            return value.derive(elem="gl.int1") if isinstance(value, Tensor) else value
        if isinstance(node, cst.Subscript):
            return self.eval_subscript(node)
        if isinstance(node, cst.Call):
            return self.eval_call(node)
        if isinstance(node, cst.IfExp):
            self.eval(node.test)
            return self.binary(self.eval(node.body), node.body, self.eval(node.orelse), node.orelse)
        if isinstance(node, (cst.Tuple, cst.List)):
            return Tup(tuple(self.eval(e.value) for e in node.elements))
        return SCALAR

    def binary(self, left: Value, left_node: cst.BaseExpression, right: Value, right_node: cst.BaseExpression,
               adds: bool = False) -> Value:
        """Result of an elementwise op; `adds` for `+`/`-` (pointer arithmetic keeps the pointee type)."""
        if isinstance(left, Tensor) and isinstance(right, Tensor):
            lr, rr = left.rank, right.rank
            if lr is not None and rr is not None and lr != rr:
                low_node, low, high = (left_node, left, right) if lr < rr else (right_node, right, left)
                expanded = self.expand_to_rank(low_node, low, high.rank)  # type: ignore[arg-type]
                if not _unify(high.term, expanded.term):
                    # (the tile's class takes no other, a dot operand's own: the vector is converted to its slice,
                    # `gl.convert_layout(v, gl.SliceLayout(0, <operand layout>))[None, :]`, not the tile to another)
                    expected, rank = high.term, high.rank or 0
                    for position in range(rank - (low.rank or 0) - 1, -1, -1):
                        rank -= 1
                        expected = Term(rank=rank, slice_of=(position, expected), origins={"slice"})
                    self.unify_or_convert(expected, low_node, low.term)
                    expanded = Tensor(high.term, expanded.elem, expanded.shape, expanded.pointer)
                left, right = (expanded, right) if lr < rr else (left, expanded)
            self.unify_or_convert(left.term, right_node, right.term)
            shape = _broadcast(left.shape, right.shape)
            offsets = right if left.pointer else left
            if adds and left.pointer != right.pointer and _DTYPE_ORDER.get(offsets.elem or "", (0, 0))[0] == 0:
                # pointers plus integer offsets (or offsets of a type the analysis cannot name): the pointee
                return Tensor(left.term, (left if left.pointer else right).elem, shape, pointer=True)
            return Tensor(left.term, promote(left.elem, right.elem), shape)
        constexprs = self.fn.constexpr_names  # (a constexpr is never the pointer: `base + HALF + cols`)
        if isinstance(left, Tensor):
            return _with_pointee(left, right, constexprs, self.pointers) if adds else left
        if isinstance(right, Tensor):
            return _with_pointee(right, left, constexprs, self.pointers) if adds else right
        if adds and isinstance(left, Scalar) and (left.param is not None or left.pointee is not None):
            return left  # `a_ptr + pid * stride` is still (an offset of) the parameter a_ptr
        return SCALAR

    def eval_attribute(self, node: cst.Attribute) -> Value:
        if language_name(self.source.qualified_name(node)) is not None:
            return SCALAR
        base = self.eval(node.value)
        if isinstance(base, Tensor) and node.attr.value == "T":
            self.plan.transposes.add(node)
            return self.opaque(node, base.rank, tuple(reversed(base.shape)) if base.shape else None, base.elem)
        return SCALAR

    def eval_subscript(self, node: cst.Subscript) -> Value:
        base = self.eval(node.value)
        indices = []
        for element in node.slice:
            index = element.slice
            if isinstance(index, cst.Index):
                if isinstance(index.value, cst.Name) and index.value.value == "None":
                    indices.append(None)
                else:
                    self.eval(index.value)
                    indices.append("index")
            elif isinstance(index, cst.Slice) and index.lower is None and index.upper is None and index.step is None:
                indices.append(":")
            else:
                indices.append("slice")
        if isinstance(base, Tup):
            return SCALAR if len(indices) != 1 else _tuple_item(base, node, self.source)
        if not isinstance(base, Tensor):
            if indices and all(i is None for i in indices) and isinstance(base, Scalar):
                # `s[None]` of a 0-d tensor (a reduction to a scalar, a program id): Triton's expansion gives a
                # tensor of ones; Gluon cannot expand a value without a layout, so it is filled in at the layout
                # (rules.layouts.CreationLayouts.leave_Subscript)
                shape = ["1"] * len(indices)
                return Tensor(self.created(node, rank=len(indices), shape=shape), None, shape=tuple(shape))
            if None in indices and isinstance(base, Scalar) and all(i in (None, ":") for i in indices) \
                    and self.certainly_0d(node.value):
                # `pid[None, :]` of a program id: Triton up to 3.6 reads each `:` of a 0-d tensor as nothing and
                # each None as a new axis (a tensor of ones, as `pid[None]`; 3.9 rejects it)
                shape = ["1"] * indices.count(None)
                return Tensor(self.created(node, rank=len(shape), shape=shape), None, shape=tuple(shape))
            if None in indices and isinstance(base, Scalar) and all(i in (None, ":") for i in indices):
                written = " ".join(self.source.code(node).split())  # (one line: diagnostics become comments)
                self.refuse(node, "TT010", f"`{written}` expands a 0-d value along an axis it does not have "
                            "(`:`): write `value[None]` (a tensor of one element) or `tl.full([1], value, dtype)`")
            return SCALAR
        if any(i in ("index", "slice") for i in indices):
            written = " ".join(self.source.code(node).split())
            self.refuse(node, "TT010", f"`{written}` indexes or slices a tensor, {NOT_TRITON} (`unsupported tensor "
                        "index`: a tensor takes only `None` and `:` as indices; Triton dialects of other backends "
                        "take more): read an element as `tl.sum(tl.where(offs == i, x, 0), axis=0)`, a part by "
                        "loading it from memory, or split a tensor with `tl.reshape` and `tl.split`")
            return base
        if None not in indices:
            return base
        # x[None, :] etc.: each None is an expand_dims, applied left to right.
        rank = base.rank
        in_shape = list(base.shape or [None] * (rank or 1))
        shape: list[str | None] = []
        src_dims = iter(in_shape)
        for i in indices:
            shape.append("1" if i is None else next(src_dims, None))
        final_rank = len(indices) if rank is None else rank + indices.count(None)
        return self.expansion(node, "expand", node.value, base, indices, final_rank, shape)

    def certainly_0d(self, node: cst.BaseExpression, depth: int = 0, visiting: frozenset[str] = frozenset()
                     ) -> bool:
        """`node` is a 0-d tensor for certain: a program id, a scalar (not constexpr) parameter, a reduction of a
        rank-1 tile along its axis (or of any tile along every axis), a name the function binds only to such values
        and numbers (a running maximum `m = float("-inf")`, then `m = tl.maximum(tl.max(qk, axis=0), m)` in a loop),
        or elementwise math, arithmetic and comparisons of them with numbers (not a value the analysis cannot see,
        such as what a helper of another module returns). `visiting`: the names being followed (a name read in its
        own binding, a loop's running value, is taken for what its other bindings make it)."""
        node = unparenthesized(node)
        if depth > 32:
            return False
        if isinstance(node, cst.Call):
            lang = _strip_module(language_name(self.source.qualified_name(node.func)) or "")
            if lang in ("program_id", "num_programs"):
                return True
            if lang in REDUCTIONS:
                return self.reduced_to_0d(node)
            if lang == "load" and node.args:
                # a load through one pointer: a parameter, or a parameter plus 0-d offsets (`tl.load(amax_ptr)`,
                # `tl.load(scale_ptr + pid)`)
                pointer = unparenthesized(node.args[0].value)
                terms = [pointer.left, pointer.right] if isinstance(pointer, cst.BinaryOperation) and isinstance(
                    pointer.operator, (cst.Add, cst.Subtract)) else [pointer]
                return any(isinstance(t, cst.Name) and t.value in {p.name for p in self.fn.params}
                           and t.value not in bound_names(self.fn.node.body)
                           and not isinstance(self.env.get(t.value), Tensor) for t in terms) and all(
                    self.compile_time(t, depth + 1) or self.certainly_0d(t, depth + 1, visiting) for t in terms)
            if not (lang in ("cdiv", "minimum", "maximum") or lang in _MATH_0D
                    or self.source.qualified_name(node.func) == "triton.cdiv"
                    or isinstance(node.func, cst.Name) and node.func.value in ("min", "max")):
                return False
            sides = [a.value for a in node.args if a.keyword is None and not a.star]
            if len(sides) != len(node.args):
                return False
            numbers = [self.compile_time(x, depth + 1) for x in sides]
            return not all(numbers) and all(n or self.certainly_0d(x, depth + 1, visiting)
                                            for n, x in zip(numbers, sides))
        if isinstance(node, cst.Name):
            if node.value in self.fn.constexpr_names:
                return False
            if node.value in {p.name for p in self.fn.params}:
                return node.value not in bound_names(self.fn.node.body)
            if node.value in visiting:
                return True
            values = [s.body[0].value for s in self.statements_binding(node.value)]  # type: ignore[attr-defined]
            if len(values) == 1:
                return self.certainly_0d(values[0], depth + 1, visiting | {node.value})
            numbers = [self.compile_time(v, depth + 1) or _float_literal(v) for v in values]
            return len(values) > 1 and not all(numbers) and all(
                n or self.certainly_0d(v, depth + 1, visiting | {node.value}) for n, v in zip(numbers, values))
        if isinstance(node, cst.BinaryOperation):
            sides = [node.left, node.right]
        elif isinstance(node, cst.Comparison):
            sides = [node.left, *(c.comparator for c in node.comparisons)]
        elif isinstance(node, cst.UnaryOperation):
            sides = [node.expression]
        else:
            return False
        numbers = [self.compile_time(x, depth + 1) for x in sides]  # (`pid < N`, N constexpr)
        return not all(numbers) and all(n or self.certainly_0d(x, depth + 1, visiting) for n, x in zip(numbers, sides))

    def reduced_to_0d(self, node: cst.Call) -> bool:
        """`tl.max(x, axis=0)` of a tile the analysis knows is of rank 1, or a reduction along every axis (no axis
        given), without `keep_dims`: a 0-d tensor."""
        if any(a.keyword is not None and a.keyword.value == "keep_dims" for a in node.args):
            return False
        operand = self.arg(node, 0, "input")
        axis = self.arg(node, 1, "axis")
        if operand is None:
            return False
        if axis is None or (isinstance(axis, cst.Name) and axis.value == "None"):
            return True
        value = self.env.get(operand.value) if isinstance(operand, cst.Name) else None
        return isinstance(value, Tensor) and value.rank == 1 and self.source.code(axis).strip() in ("0", "-1")

    def compile_time(self, node: cst.BaseExpression, depth: int = 0) -> bool:
        """`node` is a number at compile time: a literal, a constexpr parameter, a name bound once to such a value,
        or arithmetic of them."""
        node = unparenthesized(node)
        if depth > 32:
            return False
        if isinstance(node, (cst.Integer, cst.Float)):
            return True
        if isinstance(node, cst.Name):
            if node.value in self.fn.constexpr_names:
                return node.value not in bound_names(self.fn.node.body)
            if node.value in self.local_constexprs:  # (`log2e: tl.constexpr = 1.4426950408889634`)
                return True
            values = [s.body[0].value for s in self.statements_binding(node.value)]  # type: ignore[attr-defined]
            return len(values) == 1 and self.compile_time(values[0], depth + 1)
        if isinstance(node, cst.BinaryOperation):
            return self.compile_time(node.left, depth + 1) and self.compile_time(node.right, depth + 1)
        return False

    def statements_binding(self, name: str) -> list[cst.SimpleStatementLine]:
        """The statements of the function that bind `name`: all of them plain `name = value` lines, or none (a
        name bound in any other way, or never, gives no statement to read its value from). One walk of the
        function's body indexes every name (`_bindings`): the analysis asks for names again and again."""
        if self._bindings is None:
            self._bindings = _binding_statements(self.fn.node)
        plain, other = self._bindings
        return [] if name in other else list(plain.get(name, ()))

    def expansion(self, key: cst.CSTNode, tag: str, operand: cst.BaseExpression, base: Tensor,
                  indices: list[str | None], final_rank: int, shape: list[str | None]) -> Tensor:
        """`operand[indices]` where each None is an expand_dims: the operand must be in the matching slice layout."""
        result = self.fresh(key, tag, rank=final_rank, shape=shape, origins={"expand"})
        anchor = self.anchored_nodes.get(id(key))
        if anchor is not None and final_rank == 2 and result.operand is None:
            # a broadcast inside a computed operand's computation: in the operand's class, the vector converted to
            # its slice (once, before the loop, where it is loop-invariant)
            result.operand = (anchor.position, self.anchor_term(anchor), "", None)
        # Build the chain of slices from the result down to the operand: x = Slice(d0, Slice(d1, ... result)).
        expected = result
        current_rank = final_rank
        for position in reversed([p for p, i in enumerate(indices) if i is None]):
            current_rank -= 1
            expected = Term(rank=current_rank, slice_of=(position, expected), origins={"slice"})
        self.unify_or_convert(expected, operand, base.term)
        return Tensor(result, base.elem, tuple(shape), base.pointer)

    def expand_to_rank(self, node: cst.BaseExpression, value: Tensor, rank: int) -> Tensor:
        """Triton's implicit broadcast, made explicit: `value` (the tensor `node`) gets leading new axes up to `rank`
        (numpy's rule: trailing dimensions align, so a vector against a matrix is a row, `x[None, :]`)."""
        own = value.rank
        if own is None or own >= rank:
            return value
        added = rank - own
        self.plan.expansions[node] = (added, own)
        shape = ["1"] * added + list(value.shape or [None] * own)
        return self.expansion(node, "broadcast", node, value, [None] * added + [":"] * own, rank, shape)

    def broadcast_args(self, nodes: list[cst.BaseExpression], values: list[Value]) -> list[Value]:
        """The tensors among `values` expanded to the highest rank among them (every operand of one elementwise
        call broadcasts against all the others)."""
        ranks = [v.rank for v in values if isinstance(v, Tensor) and v.rank is not None]
        if not ranks:
            return values
        top = max(ranks)
        return [self.expand_to_rank(n, v, top) if isinstance(v, Tensor) else v for n, v in zip(nodes, values)]

    def opaque(self, node: cst.CSTNode, rank: int | None, shape: tuple[str | None, ...] | None,
               elem: str | None = None) -> Tensor:
        """A tensor whose layout Gluon derives in a way the plan does not model: convert it to its class's layout."""
        term = self.fresh(node, "opaque", rank=rank, shape=list(shape) if shape else None, origins={"opaque"})
        self.plan.converts[node] = term  # type: ignore[index]
        self.opaque_nodes.add(node)
        return Tensor(term, elem, shape)

    # ---- calls ----------------------------------------------------------------------------------------------------

    def eval_call(self, node: cst.Call) -> Value:
        func = node.func
        lang = language_name(self.source.qualified_name(func))
        if lang is not None:
            return self.eval_language_call(node, _strip_module(lang), lang)
        if self.source.qualified_name(func) == "triton.cdiv":
            return self.elementwise(node)
        callee = self.analysis.facts.callee(func)
        if callee is not None:
            return self.eval_helper_call(node, callee)
        if isinstance(func, cst.Name) and func.value in self.analysis.unseen_functions:
            how = self.analysis.unseen_functions[func.value]
            self.refuse(node, "TT010", f"`{func.value}` is {how}: a Gluon kernel cannot call a Triton helper that "
                        "does more than elementwise math unless it is translated beside it (define it at the top "
                        "level of this file, or of a module whose helpers the tool can copy)"
                        if how.startswith("imported") else
                        f"`{func.value}` is {how}, where the tool cannot read it: if it is Triton code, a Gluon kernel "
                        "cannot call it (bring the helper into this file at module level)")
        elif isinstance(func, cst.Name) and func.value in self.analysis.imported_names \
                and isinstance(self.source.parents.get(node), cst.Expr):
            # (its value unused: not elementwise math, but a helper run for what it stores)
            self.refuse(node, "TT010", f"`{func.value}` is imported from `{self.analysis.imported_names[func.value]}`, "
                        "which the tool cannot read, and called for its effects (its value is not used): a Gluon "
                        "kernel cannot call a Triton helper unless it is translated beside it (define it at the top "
                        "level of this file, or of a module of the project the tool can read)")
        if isinstance(func, cst.Attribute):
            base = self.eval(func.value)
            method = func.attr.value
            if isinstance(base, Tensor):
                return self.eval_method(node, base, method)
            if isinstance(base, Descriptor):
                return self.eval_descriptor_op(node, base, method)
            if method in _DESCRIPTOR_METHODS and isinstance(base, Scalar) and base.param == self.source.code(
                    func.value).strip() and self.scalar_params and base.param not in self.fn.constexpr_names:
                # `desc.load([...])` on a kernel parameter: a `TensorDescriptor` the host built and passed in
                self.refuse(node, "TT010", f"`{base.param}.{method}(...)` reads a tensor descriptor the host built "
                            f"(`TensorDescriptor` passed as `{base.param}`): its element type, block shape and layout "
                            "are the launch's, not the source's, and the Gluon copies need them; build it in the "
                            f"kernel (`{base.param} = tl.make_tensor_descriptor(base, [M, K], [stride, 1], "
                            "[BLOCK_M, BLOCK_K])`) and pass the base pointer and strides instead")
                return SCALAR
            if method in ("to", "cast") and node.args:  # a scalar made a pointer: `p.to(tl.pointer_type(tl.float16))`
                target = node.args[0].value
                if isinstance(target, cst.Call) and (language_name(self.source.qualified_name(target.func)) or ""
                                                     ).endswith("pointer_type") and target.args:
                    return Scalar(pointee=self.dtype_text(target.args[0].value))
        values = [self.eval(arg.value) for arg in node.args]
        tensors = [v for v in values if isinstance(v, Tensor)]
        if isinstance(func, cst.Name) and func.value in self.analysis.elementwise_imports and tensors \
                and tensors[0].rank is not None and all(t.rank == tensors[0].rank for t in tensors):
            # (its tensor arguments, of one rank, and its result in one layout, as a language op's; the element type
            # unknown: a cast)
            result = self.combined([arg.value for arg in node.args], values)
            return Tensor(result.term, None, result.shape)  # type: ignore[union-attr]
        if tensors:
            # A function the tool cannot read (an imported `exp = tl.exp`, chosen at import time) called with tensors:
            # taken for elementwise, its result converted to the layout its uses give it (Gluon lays out the result
            # as the function does; taken for a scalar, `exp(x)[:, None]` did not compile).
            ranks = [t.rank for t in tensors if t.rank is not None]
            rank = max(ranks) if ranks else None
            shape = next((t.shape for t in tensors if t.rank == rank and t.shape), None)
            arity = self.analysis.block_tuples.get(func.value) if isinstance(func, cst.Name) else None
            if arity:
                # a helper a module-level block defines that returns a tuple (`r * tl.cos(t), r * tl.sin(t)`): each
                # tensor converted after the line unpacks it, as a translated helper's tuple is
                self.tuple_calls[node] = func.value  # type: ignore[attr-defined]
                return Tup(tuple(Tensor(self.fresh(node, f"item{i}", rank=rank, shape=list(shape) if shape else None,
                                                   origins={"opaque"}), None, shape) for i in range(arity)))
            return self.opaque(node, rank, shape, None)
        return SCALAR

    def args(self, node: cst.Call) -> tuple[list[cst.BaseExpression], dict[str, cst.BaseExpression]]:
        positional = [a.value for a in node.args if a.keyword is None and not a.star]
        keywords = {a.keyword.value: a.value for a in node.args if a.keyword is not None}
        return positional, keywords

    def arg(self, node: cst.Call, index: int, name: str) -> cst.BaseExpression | None:
        positional, keywords = self.args(node)
        if name in keywords:
            return keywords[name]
        return positional[index] if index < len(positional) else None

    def elementwise(self, node: cst.Call, skip: int = 10**9) -> Value:
        positional, keywords = self.args(node)
        nodes = [*positional, *keywords.values()]
        return self.combined(nodes, [self.eval(arg) for arg in nodes], skip)

    def combined(self, nodes: list[cst.BaseExpression], values: list[Value], skip: int = 10**9) -> Value:
        """The result of an elementwise op of the arguments `nodes`, evaluated to `values` (those from `skip` on take
        no part): the tensors broadcast to one rank and in one layout."""
        result: Value = SCALAR
        result_node: cst.BaseExpression | None = None
        values = list(values)
        values[:skip] = self.broadcast_args(nodes[:skip], values[:skip])
        for i, (arg, value) in enumerate(zip(nodes, values)):
            if i >= skip:
                continue
            if isinstance(value, Tensor):
                if isinstance(result, Tensor) and result_node is not None:
                    result = self.binary(result, result_node, value, arg)
                else:
                    result, result_node = value, arg
        return result

    def operand_of_access(self, node: cst.Call, pointer: Tensor, arg: cst.BaseExpression, value: Tensor, key: str
                          ) -> Tensor:
        """A mask, `other` or stored value of a load/store/atomic broadcast to the pointer tile's rank."""
        if pointer.rank is not None and value.rank is not None and value.rank > pointer.rank:
            self.refuse(arg, "TT010", f"`{key}=` has rank {value.rank} but the pointers rank {pointer.rank}; broadcast "
                        "the pointers explicitly (e.g. `ptrs[None, :] + zeros`)")
            return value
        return self.expand_to_rank(arg, value, pointer.rank) if pointer.rank is not None else value


    def eval_helper_call(self, node: cst.Call, name: str) -> Value:
        callee = self.analysis.facts.functions[name]
        positional, keywords = self.args(node)
        kinds: list[Value] = [self.eval(a) for a in positional]
        for param in callee.params[len(positional):]:
            kinds.append(self.eval(keywords[param.name]) if param.name in keywords else SCALAR)
        for i, param in enumerate(callee.params):
            # (`None` passed, or left to a `None` default: kind "none", as Triton compiles the helper for it)
            arg = positional[i] if i < len(positional) else keywords.get(param.name)
            if _is_none(arg) if arg is not None else param.default == "None":
                kinds[i] = NONE
        kinds_t = tuple(kinds)
        self.plan.helper_calls[node] = (name, tuple(_kind(k) for k in kinds_t))
        previous = self.analysis.helper_kinds.get(name)
        if previous is None:
            self.analysis.helper_kinds[name] = kinds_t
        elif [_kind(k) for k in previous] != [_kind(k) for k in kinds_t]:
            self.refuse(node, "TT012", f"`{name}` is called here with argument kinds {[_kind(k) for k in kinds_t]} "
                        f"but elsewhere with {[_kind(k) for k in previous]}; Gluon layouts need one kind per helper")
        if name == self.fn.name:
            self.refuse(node, "TT010", f"recursive call of `{name}`")
            return SCALAR
        plan = self.analysis.analyse(callee, self.in_callee_terms(callee, positional, keywords, kinds_t))
        if previous is not None and plan.kinds != tuple(_kind(k) for k in kinds_t) and not any(
                name in other.called_by for other in self.analysis.facts.functions.values()):
            # A call of other kinds than the helper's analysis (`b = gate(b)` of a 0-d `b`, `gate(x)` of a tile
            # elsewhere): its result is what the helper gives for these kinds, so that the names it binds keep their
            # kind (the specialisation pass then copies the helper for them); a helper that calls no other, analysed
            # apart and forgotten
            kept = self.analysis.plans.pop(name)
            try:
                plan = self.analysis.analyse(callee, self.in_callee_terms(callee, positional, keywords, kinds_t))
            finally:
                self.analysis.plans[name] = kept
        result = plan.returns
        if isinstance(result, Tensor):
            shape = self.caller_shape(result.shape, callee, positional, keywords, kinds_t)
            elem = self.caller_elem(result.elem, callee, positional)
            argument = _passed_through(plan, result, callee, kinds_t)
            if argument is not None:
                # elementwise in that argument (`2 * tl.sigmoid(2 * x) - 1`): the helper computes its result in the
                # argument's own layout, which Gluon gives it at the call, so the caller keeps it there
                return Tensor(argument.term, elem, shape)
            return self.opaque(node, result.rank, shape, elem)
        if isinstance(result, Tup) and any(isinstance(i, Tensor) for i in result.items):
            # Each tensor of the tuple arrives in the callee's layout: the caller converts it after unpacking.
            shapes = [self.caller_shape(item.shape, callee, positional, keywords, kinds_t)
                      if isinstance(item, Tensor) else None for item in result.items]
            items = tuple(self.fresh(node, f"item{i}", rank=item.rank, shape=list(shape) if shape else None,
                                     origins={"opaque"}) if isinstance(item, Tensor)
                          else None for i, (item, shape) in enumerate(zip(result.items, shapes)))
            self.tuple_calls[node] = name
            return Tup(tuple(
                Tensor(t, self.caller_elem(item.elem, callee, positional), shape)
                if t is not None and isinstance(item, Tensor) else SCALAR
                for t, item, shape in zip(items, result.items, shapes)))
        return result if result is not None else SCALAR

    def in_callee_terms(self, callee: JitFunction, positional: list[cst.BaseExpression],
                        keywords: dict[str, cst.BaseExpression], kinds: tuple[Value, ...]) -> tuple[Value, ...]:
        """Tensor arguments with their element types rewritten in the helper's own names: `a_ptr.dtype.element_ty`
        with `a_ptr` passed as `ptr` becomes `ptr.dtype.element_ty`, `gl.float16` stays (so that the helper's dots
        know their operand types). What does not translate is unknown."""
        passed: dict[str, str] = {}  # caller parameter name -> the helper parameter it is passed as
        for i, param in enumerate(callee.params):
            arg = positional[i] if i < len(positional) else keywords.get(param.name)
            if isinstance(arg, cst.Name) and arg.value not in passed:
                passed[arg.value] = param.name

        def translate(text: str | None) -> str | None:
            if text is None or text.startswith("gl."):
                return text
            match = re.fullmatch(r"([A-Za-z_][A-Za-z_0-9]*)\.dtype\.element_ty", text)
            if match and match.group(1) in passed:
                return f"{passed[match.group(1)]}.dtype.element_ty"
            return None

        out: list[Value] = []
        rebound = bound_names(callee.node.body)
        for param, kind in zip(callee.params, kinds):
            if isinstance(kind, Tensor):
                # A tensor parameter's shape is its own, read where the helper runs (`a.shape[0]`: a constexpr in
                # Gluon as in Triton), as Triton's JIT specialises a helper per call; unknown where the helper
                # assigns the name again (the text would then read another tensor).
                rank = kind.rank
                shape = tuple(f"{param.name}.shape[{i}]" for i in range(rank)) \
                    if rank is not None and param.name not in rebound else None
                kind = Tensor(kind.term, translate(kind.elem), shape)
            out.append(kind)
        out.extend(kinds[len(out):])
        return tuple(out)

    def caller_shape(self, shape: tuple[str | None, ...] | None, callee: JitFunction,
                     positional: list[cst.BaseExpression], keywords: dict[str, cst.BaseExpression],
                     kinds: tuple[Value, ...]) -> tuple[str | None, ...] | None:
        """A helper result's shape in the caller's terms, as Triton's JIT specialises the helper per call: each of the
        helper's parameters a dimension reads (`BLOCK_K`, `x.shape[0]`) replaced by what this call passes (its text,
        where the caller can write it; the shape of the tensor passed); a dimension that reads anything else is
        unknown."""
        if not shape:
            return None
        params = {p.name: i for i, p in enumerate(callee.params)}
        passed = {p.name: positional[i] if i < len(positional) else keywords.get(p.name)
                  for i, p in enumerate(callee.params)}
        walker = self

        class InCaller(cst.CSTTransformer):
            """The helper's names in a dimension replaced by the caller's: `x.shape[1]` by the shape of the tensor
            passed as `x`, a parameter by the text of its argument (or its default); LookupError where one cannot
            be."""

            @staticmethod
            def shape_dim(node: cst.Subscript) -> tuple[str, int] | None:
                value, index = node.value, node.slice
                if isinstance(value, cst.Attribute) and value.attr.value == "shape" and isinstance(value.value, cst.Name) \
                        and len(index) == 1 and isinstance(index[0].slice, cst.Index) \
                        and isinstance(index[0].slice.value, cst.Integer):
                    return value.value.value, int(index[0].slice.value.value)
                return None

            def visit_Subscript(self, node: cst.Subscript) -> bool:
                return self.shape_dim(node) is None  # (`x.shape[1]` is replaced whole)

            def leave_Subscript(self, original: cst.Subscript, updated: cst.Subscript) -> cst.BaseExpression:
                found = self.shape_dim(original)
                if found is not None:
                    name, axis = found
                    kind = kinds[params[name]] if name in params and params[name] < len(kinds) else None
                    if isinstance(kind, Tensor) and kind.shape and axis < len(kind.shape) \
                            and kind.shape[axis] is not None:
                        return _operand(kind.shape[axis])
                    raise LookupError(name)
                return updated

            def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
                if original.value in params:
                    arg = passed[original.value]
                    text = walker.shape_text(arg) if arg is not None else callee.params[params[original.value]].default
                    if text is None:
                        raise LookupError(original.value)
                    return _operand(text)
                if original.value not in walker.analysis.module_names:
                    raise LookupError(original.value)
                return updated

        out: list[str | None] = []
        for dim in shape:
            try:
                if dim is None:
                    raise LookupError
                expression = cst.parse_expression(dim).visit(InCaller())
                out.append(self.source.code(expression).strip())
            except (LookupError, cst.ParserSyntaxError):
                out.append(None)
        return tuple(out) if any(d is not None for d in out) else None

    def caller_elem(self, elem: str | None, callee: JitFunction, positional: list[cst.BaseExpression]) -> str | None:
        """A helper result's element type in the caller's terms: `gl.float16` as is; `p.dtype.element_ty` of the
        helper's pointer parameter `p` becomes that of the caller's pointer parameter passed for it."""
        if elem is None or elem.startswith("gl."):
            return elem
        match = re.fullmatch(r"([A-Za-z_][A-Za-z_0-9]*)\.dtype\.element_ty", elem)
        names = [p.name for p in callee.params]
        if match and match.group(1) in names and names.index(match.group(1)) < len(positional):
            arg = self.eval(positional[names.index(match.group(1))])
            if isinstance(arg, Scalar) and arg.param is not None:
                return f"{arg.param}.dtype.element_ty"
        return None

    def unpack_helper_tuple(self, assign: cst.Assign, value: Value) -> None:
        """`a, b = helper(...)` of a helper returning tensors: convert each tensor name once after the line."""
        if not (isinstance(value, Tup) and assign.value in self.tuple_calls):
            return
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, (cst.Tuple, cst.List)):
            return
        elements = [e.value for e in assign.targets[0].target.elements]  # type: ignore[attr-defined]
        if len(elements) != len(value.items) or not all(isinstance(e, cst.Name) for e in elements):
            return
        self.unpacked.add(assign.value)
        self.plan.tuple_converts[assign] = [
            (e.value, self.name_terms[e.value]) for e, item in zip(elements, value.items)  # type: ignore[attr-defined]
            if isinstance(item, Tensor) and e.value in self.name_terms  # type: ignore[attr-defined]
        ]

    # ---- end of function ------------------------------------------------------------------------------------------

    def finish(self) -> None:
        plan = self.plan
        for node, use, value in self.lazy_uses.values():
            self.unify_or_convert(use, node, value)
        plan.returns = self.returns[0] if self.returns else None
        plan.all_returns = tuple(self.returns)
        plan.param_terms = dict(self.param_terms)
        for call_node, name in self.tuple_calls.items():
            if call_node not in self.unpacked:
                what = f"`{name}`" if name.startswith("tl.") else f"helper `{name}`"
                self.refuse(call_node, "TT010", f"{what} returns a tuple holding tensors; unpack it into "
                            f"names where it is called (`a, b = {name}(...)`)")
        for name, term in self.param_terms.items():
            root = term.find()
            if root.slice_of is not None or root.dots is not None or root.origins - {f"param:{name}"}:
                plan.param_converts[name] = term



def _passed_through(plan: LayoutPlan, result: Tensor, callee: JitFunction, kinds: tuple[Value, ...]) -> Tensor | None:
    """The tensor argument of a helper call whose layout the helper's result has: the helper's plan puts its returned
    tensor in the class of that parameter, which the helper leaves in the layout the call gives it (no conversion on
    entry: nothing in the helper fixes that class's layout), whichever of its `return`s runs; else None."""
    root = result.term.find()
    if not all(isinstance(value, Tensor) and value.term.find() is root for value in plan.all_returns):
        return None  # (`if FLAG: return x` then `return y`: the layout depends on the path)
    for param, kind in zip(callee.params, kinds):
        term = plan.param_terms.get(param.name)
        if isinstance(kind, Tensor) and term is not None and term.find() is root \
                and param.name not in plan.param_converts:
            return kind
    return None


# --------------------------------------------------------------------------------------------------------------------
# Solving: a concrete, named layout per class


def _merge_equal_layouts(plan: LayoutPlan) -> None:
    """One class for the MMA layouts of dots that no value joined but that are one layout (plain dots of one shape,
    K block and operand type: two gradients' products, `b_dv += tl.dot(b_k, b_dh)` and `b_dw += tl.dot(b_dk, b_h)`),
    then one for the operand layouts of one position, element type and MMA layout (`b_h` and `b_dh`): a value that
    meets both (`b_h * b_dh`) is then converted nowhere."""
    mmas: dict[tuple, Term] = {}
    for site in plan.dots.values():
        if site.scaled is not None or site.a_shape is None or None in site.shape or site.operand_dtype is None:
            continue
        key = (*site.shape, site.a_shape[-1], site.operand_dtype)
        root = site.result.find()
        if root.dots is None or any(d.scaled is not None or d.operand_dtype != site.operand_dtype or d.a_shape is None
                                    or (*d.shape, d.a_shape[-1]) != key[:3] for d in root.dots):
            continue
        if key in mmas:
            _unify(mmas[key], root)
        else:
            mmas[key] = root
    operands: dict[tuple, Term] = {}
    terms = [*plan.converts.values(), *plan.convert_sources.values(), *(v.term for v in plan.loads.values())]
    for term in terms:
        root = term.find()
        if root.operand is None or root.operand[3] is None or not root.operand[2]:
            continue
        key = (root.operand[0], root.operand[2], root.operand[3].find().id)
        if key in operands:
            _unify(operands[key], root)
        else:
            operands[key] = root


def _solve(plan: LayoutPlan, analysis: LayoutAnalysis) -> None:
    """Name the layout of every class a creation site or a convert needs, in order of first use."""
    used: list[Term] = []
    seen: set[int] = set()

    def need(term: Term) -> None:
        root = term.find()
        if root.slice_of is not None:
            need(root.slice_of[1])
            return
        if root.id not in seen:
            seen.add(root.id)
            used.append(root)

    unpacked = [term for pairs in plan.tuple_converts.values() for _, term in pairs]
    for term in [*plan.creations.values(), *plan.param_converts.values(), *plan.converts.values(), *unpacked]:
        need(term)
    for site in plan.dots.values():
        need(site.result)
    # (and the function's own variables: a loop's `cols_layout = cols < n` is not a layout constant)
    from transpile.cst_utils import names_in

    taken: set[str] = set(p.name for p in plan.function.params) | analysis.module_names | names_in(plan.function.node)
    # (an MMA operand's layout names its MMA layout: declared after it)
    def anchored(root: Term) -> bool:
        return root.operand is not None and root.operand[3] is not None and root.operand[2] != ""

    used.sort(key=anchored)
    for root in used:
        kind = "mma" if root.dots is not None else "operand" if anchored(root) else "blocked"
        base = _layout_name(root, kind)
        name = base
        suffix = 2
        while name in taken:
            name = f"{base}_{suffix}"
            suffix += 1
        taken.add(name)
        plan.names[root.id] = name
        plan.declarations.append((name, kind, root))


def _layout_name(root: Term, kind: str) -> str:
    if kind == "mma":
        return "mma_layout"
    for name in root.names:
        if not name.startswith("_"):
            return f"{name}_layout"
    return "mma_layout" if kind == "mma" else f"blocked_{root.rank or 1}d"


def analyse_layouts(facts: ModuleFacts, own_loads: dict[str, frozenset[int]] | None = None,
                    operand_anchors: dict[str, list[OperandAnchor | StoreAnchor]] | None = None) -> dict[str, LayoutPlan]:
    return LayoutAnalysis(facts, own_loads, operand_anchors).run()


def name_terms(plan: LayoutPlan) -> dict[str, Term]:
    """Variable name -> the root of its layout class, for the names the layout plan bound to tensors."""
    terms: list[Term] = [*plan.creations.values(), *plan.converts.values(), *(s.result for s in plan.dots.values())]
    roots: dict[str, Term] = {}
    seen: set[int] = set()
    while terms:
        root = terms.pop().find()
        if root.id in seen:
            continue
        seen.add(root.id)
        for name in root.names:
            roots.setdefault(name, root)
        if root.slice_of is not None:
            terms.append(root.slice_of[1])
    return roots


# Elementwise math of a 0-d tensor is a 0-d tensor (`alpha = tl.exp2(m - m_new)`)
_MATH_0D = {"exp", "exp2", "log", "log2", "sqrt", "sqrt_rn", "rsqrt", "abs", "cos", "sin", "erf", "floor", "ceil",
            "fma", "fdiv", "div_rn", "where"}


def _float_literal(node: cst.BaseExpression) -> bool:
    """`float("-inf")`, `float("inf")`, `float("nan")`: a number at compile time."""
    return isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "float" and \
        len(node.args) == 1 and isinstance(node.args[0].value, cst.SimpleString)


def _operand(text: str) -> cst.BaseExpression:
    """`text` as an expression to put in another: in parentheses unless a name, a number or a call."""
    expression = cst.parse_expression(text)
    if isinstance(expression, (cst.Name, cst.Integer, cst.Call, cst.Attribute, cst.Subscript)):
        return expression
    return expression.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


class _UnitFolds(cst.CSTTransformer):
    """`x // 1`, `x * 1`, `1 * x` -> `x` (a shape written through local constexprs that are 1: `BLOCK_M //
    X_M_DIVISOR` with `X_M_DIVISOR: tl.constexpr = 1`), and a lone name's parentheses dropped."""

    def leave_BinaryOperation(self, original: cst.BinaryOperation, updated: cst.BinaryOperation
                              ) -> cst.BaseExpression:
        def one(node: cst.BaseExpression) -> bool:
            node = node.with_changes(lpar=[], rpar=[]) if isinstance(node, cst.Integer) else node
            return isinstance(node, cst.Integer) and node.value == "1"

        if isinstance(updated.operator, (cst.FloorDivide, cst.Multiply)) and one(updated.right):
            return _bare(updated.left)
        if isinstance(updated.operator, cst.Multiply) and one(updated.left):
            return _bare(updated.right)
        return updated


def _bare(node: cst.BaseExpression) -> cst.BaseExpression:
    return node.with_changes(lpar=[], rpar=[]) if isinstance(node, cst.Name) else node


def _unit_folded(node: cst.BaseExpression) -> cst.BaseExpression:
    folded = node.visit(_UnitFolds())
    return _bare(folded) if isinstance(folded, cst.BaseExpression) else node

