"""Source-text helpers the pipeline rules share: node text, fresh names, and producer statements renamed for a
later iteration (``k`` -> ``k_next``)."""

from __future__ import annotations

import functools
import io
import tokenize
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import libcst as cst

from transpile import cst_walk
from transpile.analysis.pipeline import OperandLoad
from transpile.cst_utils import assigned_names, mask_index, names_in, node_code

CSTNodeT = TypeVar("CSTNodeT", bound=cst.CSTNode)

_MODULE = cst.Module([])


def code(node: cst.CSTNode) -> str:
    """The source text of `node`, stripped."""
    return node_code(_MODULE, node).strip()  # (made once per node: the source's statements, for every target)


class _Rename(cst.CSTTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        super().__init__()
        self.names = names

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        value = self.names.get(updated_node.value)
        return updated_node if value is None or value == updated_node.value else updated_node.with_changes(value=value)

    def leave_Attribute(self, original_node: cst.Attribute, updated_node: cst.Attribute) -> cst.Attribute:
        if updated_node.attr is original_node.attr:
            return updated_node
        return updated_node.with_changes(attr=original_node.attr)  # `x.dtype`: only variables are renamed

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if updated_node.keyword is original_node.keyword:
            return updated_node
        return updated_node.with_changes(keyword=original_node.keyword)  # nor keyword-argument names


def renamed(node: CSTNodeT, names: dict[str, str]) -> CSTNodeT:
    """`node` with the variables in `names` renamed (the subtrees without them are `node`'s own)."""
    return cst_walk.transform(node, _Rename(names))  # type: ignore[return-value]


def rename(node: cst.CSTNode, names: dict[str, str]) -> str:
    """The source text of `node` with the variables in `names` renamed."""
    return code(renamed(node, names))


def next_names(var: str, producer: list[int], body: list[cst.BaseStatement], name: Callable[[str], str]
               ) -> dict[str, str]:
    """Renames for the producer of a later iteration: the loop variable and every name the producer statements bind
    get a `_next` copy, so that the producer runs ahead without touching the consumer's values."""
    renames = {var: name(f"{var}_next")}
    for i in producer:
        for assigned in assigned_names(body[i]):
            renames[assigned] = name(f"{assigned}_next")
    return renames


def namer(taken: set[str]) -> Callable[[str], str]:
    """A source of names unused in the function: `base`, else `base_`, `base__`, ..."""

    def name(base: str) -> str:
        candidate = base
        while candidate in taken:
            candidate += "_"
        taken.add(candidate)
        return candidate

    return name


def loop_namer(ctx, loop: cst.CSTNode) -> Callable[[str], str]:  # noqa: ANN001 - RuleContext (import cycle)
    """A source of names for what the pipelined form of `loop` emits: unused in the function and by the pipelined
    forms of its other loops (two loops must not both define the constexpr `NUM_STAGES`); naming the same loop again
    gives the same names."""
    others: set[str] = set()
    for key, names in ctx.generated.items():
        if key != id(loop):
            others |= names
    mine = ctx.generated.setdefault(id(loop), set())
    mine.clear()
    # (and the layout constants the layout plan declares at the top of the function: `q_layout`, ...)
    inner = namer(names_in(ctx.function.node) | others | set(ctx.plan.names.values()))

    def name(base: str) -> str:
        chosen = inner(base)
        mine.add(chosen)
        return chosen

    return name


@dataclass(frozen=True)
class LoopRange:
    """``range(lo, hi, step)`` of a loop as source text: the iteration count, and the loop variable's value at an
    iteration index (pipelined loops count iterations from 0)."""

    lo: str
    hi: str
    step: str
    # The bounds are computed from a 64-bit integer (`bos = tl.load(cu_seqlens + i_n).to(tl.int64)`): the source's
    # loop variable is then 64-bit, while the pipelined loop counts its iterations (and indexes its slots) in 32 bits.
    # The count is taken to 32 bits (a loop runs fewer than 2**31 iterations) and the loop variable is made from the
    # iteration index in 64 bits, as the source computes it.
    wide: bool = False

    @classmethod
    def of(cls, loop: cst.For, wide: bool = False) -> LoopRange:
        texts = [code(a.value) for a in loop.iter.args if a.keyword is None]  # type: ignore[attr-defined]
        if len(texts) == 1:
            return cls("0", texts[0], "1", wide)
        return cls(texts[0], texts[1], texts[2] if len(texts) > 2 else "1", wide)

    @property
    def count(self) -> str:
        if (self.lo, self.step) == ("0", "1"):
            count = self.hi
        elif self.lo == "0":
            count = f"gl.cdiv({self.hi}, {self.step})"
        else:
            count = f"gl.cdiv({self.hi} - ({self.lo}), {self.step})"
        return f"gl.cast({count}, gl.int32)" if self.wide else count

    def value(self, iteration: str) -> str:
        if self.wide:
            iteration = f"gl.cast({iteration}, gl.int64)"
        if (self.lo, self.step) == ("0", "1"):
            return iteration
        return f"{iteration} * {self.step}" if self.lo == "0" else f"{self.lo} + {iteration} * {self.step}"


def statements(text: str, leading: Sequence[cst.EmptyLine]) -> list[cst.BaseStatement]:
    """The statements of `text`; its opening comment and the loop's own leading lines go before the first one."""
    module = cst.parse_module(text)
    first, *rest = module.body
    first = first.with_changes(leading_lines=[*leading, *module.header, *first.leading_lines])
    return [first, *rest]


def indent(text: str, prefix: str) -> str:
    """`text` with `prefix` before each line that is not empty, except the lines inside a string literal that spans
    lines (`\"\"\"...\"\"\"`): indenting those would change the string."""
    inside = _string_lines(text) if ('"""' in text or "'''" in text) else frozenset()
    return "\n".join(line if i in inside else prefix + line if line.strip() else ""
                     for i, line in enumerate(text.splitlines()))


def _string_lines(text: str) -> frozenset[int]:
    """The lines of `text` (0-based) that continue a string literal begun on an earlier line."""
    inside: set[int] = set()
    kinds = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING),
             getattr(tokenize, "FSTRING_END", tokenize.STRING)}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type in kinds and token.end[0] > token.start[0]:
                inside.update(range(token.start[0], token.end[0]))  # (rows are 1-based: the rows after the first)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # not a whole statement: no string is known to span its lines
    return frozenset(inside)


@functools.lru_cache(maxsize=256)
def _expression(text: str) -> cst.BaseExpression:
    """A parsed guard (`it < num_iters`): the same few texts for every load, only ever turned back into text."""
    return cst.parse_expression(text)


def later_load(statement: cst.BaseStatement, renames: dict[str, str], iteration: str, iters: str,
                  load: OperandLoad, guard: bool = True) -> str:
    """The translated load of `statement` for a later iteration; a pointer load past the end is masked off (unless
    not `guard`: the caller knows the iteration is not past the end)."""
    call = statement.body[0].value  # type: ignore[union-attr]
    if load.kind == "descriptor" or not guard:  # `_desc_load` masks by the descriptor's shape: past the end reads zeros
        return rename(call, renames)
    args = list(call.args)
    at = mask_index(args)
    mask_arg = args[at] if at is not None else None
    if mask_arg is not None:
        new_mask = cst.BinaryOperation(cst.parse_expression(f"({code(mask_arg.value)})"), cst.BitAnd(),
                                       _expression(f"({iteration} < {iters})"))
        args = [a.with_changes(value=new_mask) if a is mask_arg else a for a in args]
    else:
        args.insert(1, cst.Arg(_expression(f"{iteration} < {iters}"), keyword=cst.Name("mask"), equal=cst.AssignEqual(
            cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
    return rename(call.with_changes(args=args), renames)


@dataclass(frozen=True)
class RingDepth:
    """The depth of a loop's ring (`NUM_STAGES`): `stages` where the loop gives `tl.range(..., num_stages=)` or the
    autotune configs agree; where they give different `num_stages`, one row per config (its values of `keys`, then
    its depth) that the emitted `_autotune_stages(...)` lookup matches against the config being compiled. The emitted
    constexpr and `for_config` (what the timeline draws) read the same rows."""

    stages: int
    keys: tuple[str, ...] = ()  # constexpr names, then "gl.num_warps()" where the configs' warps differ
    rows: tuple[tuple[int, ...], ...] = ()

    @property
    def text(self) -> str:
        """The value of the `NUM_STAGES` constexpr as emitted."""
        if not self.rows:
            return str(self.stages)
        rows = [f"[{', '.join(str(v) for v in row)}]" for row in self.rows]
        return f"_autotune_stages([{', '.join(self.keys)}], [{', '.join(rows)}], {self.stages})"

    def lines(self, name: str) -> list[str]:
        """`NUM_STAGES: gl.constexpr = ...`, with a comment where it is looked up per config."""
        if not self.rows:
            return [f"{name}: gl.constexpr = {self.text}"]
        return ["# Ring depth: the num_stages of the autotune config being compiled (found by its values and warps).",
                f"{name}: gl.constexpr = {self.text}"]

    def for_config(self, values: dict[str, object], num_warps: int | None) -> int:
        """The depth a config with these constexpr values and warps compiles (`_autotune_stages` at compile time)."""
        key = [num_warps if k == "gl.num_warps()" else values.get(k) for k in self.keys]
        return next((row[-1] for row in self.rows if list(row[:-1]) == key), self.stages)


def ring_depth(ctx, loop: cst.For, stages: int, least: int = 2  # noqa: ANN001 - RuleContext (import cycle)
               ) -> RingDepth:
    """The ring depth of `loop` (see `RingDepth`). Depths below `least` (2: one slot filled while one is read) become
    `least`."""
    stages = max(stages, least)
    explicit = isinstance(loop.iter, cst.Call) and any(
        a.keyword is not None and a.keyword.value == "num_stages" for a in loop.iter.args)
    configs = ctx.function.autotune_configs
    depths = [c.num_stages or stages for c in configs]
    if explicit or len(set(depths)) < 2:
        return RingDepth(stages)
    keys = list(configs[0].values)
    if any(list(c.values) != keys for c in configs) or any(not isinstance(c.values[k], int) for c in configs
                                                           for k in keys):
        return RingDepth(stages)
    warps = len({c.num_warps for c in configs}) > 1
    found = [[c.values[k] for k in keys] + ([c.num_warps] if warps else []) for c in configs]
    if len({tuple(f) for f in found}) < len(found):
        return RingDepth(stages)  # two configs that differ only in num_stages cannot be told apart when compiled
    rows = tuple(tuple([*f, max(depth, least)]) for f, depth in zip(found, depths))
    names = keys + (["gl.num_warps()"] if warps else [])
    ctx.need("autotune_stages")
    return RingDepth(stages, tuple(names), rows)  # type: ignore[arg-type]
