"""The layout analysis's evaluation of language calls (`tl.*` functions, tensor methods, `tl.dot`, tensor
descriptors): a part of the function walker of `transpile.analysis.layouts`, which mixes it in."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

import libcst as cst

from transpile import language
from transpile.analysis.imports import language_modules
from transpile.analysis.layout_values import (
    _DTYPE_ORDER,
    _IDENT,
    _KEEP_DIMS_INDEX,
    ATOMICS,
    CREATIONS,
    DOT_KEYWORDS,
    DOT_SCALED_KEYWORDS,
    ELEMENTWISE,
    LIKE,
    OPAQUE,
    RANDOM,
    RANDOM4,
    REDUCTIONS,
    SAME_AS_FIRST,
    SCALAR,
    SCANS,
    Descriptor,
    DescriptorInfo,
    DotSite,
    Scalar,
    Tensor,
    Term,
    Tup,
    Value,
    _beyond_elementwise,
    _dim,
    _join_shapes,
    _kind,
    _reduced_elem,
    _shape_of,
    _strip_module,
)


class LanguageCalls:
    """The walker's evaluation of language calls (see the module docstring); the walker provides `eval`,
    `refuse`, `plan` and the rest."""

    def eval_language_call(self, node: cst.Call, name: str, full: str) -> Value:
        spelling = language.lookup(full, "cuda", (3, 9))  # the form of the result; the rule spells it per target
        if spelling is not None and spelling.kind == "libdevice":
            return self.elementwise(node)
        if spelling is not None and spelling.kind == "keep":
            # (the function is kept as Triton: its result read as a tile of the operand's rank, for what follows)
            value = self.eval(self.arg(node, 0, "x"))
            for a in node.args[1:]:
                self.eval(a.value)
            if not isinstance(value, Tensor):
                return SCALAR
            return self.opaque(node, value.rank, value.shape if name != "topk" else None, value.elem)
        if spelling is None or spelling.kind == "refuse":
            if spelling is not None and language.refused_on_every_target(full):
                self.refuse(node, "TT011", spelling.text)
                if name in OPAQUE:  # (`tl.view`: its result has the rank and shape it is given, and no scalar's;
                    return self.opaque_call(node, name)  # as a scalar, every later use of it was refused again)
            for a in node.args:
                self.eval(a.value)
            return SCALAR
        if name in RANDOM:
            return self.elementwise(node)
        if name in RANDOM4:
            value = self.elementwise(node)
            return Tup((value,) * (2 if name == "pair_uniform_to_normal" else 4))
        if name in ("expand_dims", "unsqueeze"):
            return self.expand_dims(node)
        if name == "broadcast_to":
            return self.broadcast_to(node)
        if name == "broadcast":
            value = self.elementwise(node)
            return Tup((value, value))
        if name == "split":
            return self.split(node, self.arg(node, 0, "a"))
        if name == "join" and len(node.args) == 2:
            return self.join(node)
        if name == "gather":
            source = self.eval(self.arg(node, 0, "src"))
            index = self.eval(self.arg(node, 1, "index"))
            self.eval(self.arg(node, 2, "axis"))
            if not isinstance(index, Tensor):
                return SCALAR
            return Tensor(index.term, source.elem if isinstance(source, Tensor) else None, index.shape)
        if name == "histogram":
            for a in node.args:
                self.eval(a.value)
            bins = self.arg(node, 1, "num_bins")
            shape = [self.shape_text(bins) if bins is not None else None]
            return Tensor(self.created(node, rank=1, shape=shape), "gl.int32", shape=tuple(shape))
        if name == "inline_asm_elementwise":
            args_node = self.arg(node, 2, "args")
            values = self.eval(args_node)
            for a in node.args:
                if a.value is not args_node:
                    self.eval(a.value)
            items = values.items if isinstance(values, Tup) else (values,)
            tensors = [v for v in items if isinstance(v, Tensor)]
            if not tensors:
                return SCALAR
            dtype = self.arg(node, 3, "dtype")
            if isinstance(dtype, (cst.Tuple, cst.List)):  # several results: a tuple of tensors of the args' layout
                return Tup(tuple(tensors[0].derive(elem=self.dtype_text(e.value)) for e in dtype.elements))
            elem = self.dtype_text(dtype) if dtype is not None else None
            return tensors[0].derive(elem=elem)
        if name in CREATIONS:
            return self.creation(node, name)
        if name in LIKE:
            return self.elementwise(node, skip=1)
        if name in ("load", "atomic_load"):
            pointer_node = self.arg(node, 0, "pointer")
            pointer = self.eval(pointer_node)
            anchor = self.anchors.get(id(node))
            if anchor is not None and isinstance(pointer, Tensor) and pointer.rank == 2:
                # A tile a dot operand is computed from: a class of its own, the operand's (`OperandAnchor`)
                own = self.anchor_term(anchor, pointer.shape)
                self.unify_or_convert(own, pointer_node, pointer.term)
                pointer = Tensor(own, pointer.elem, pointer.shape)
            elif id(node) in self.own_loads and isinstance(pointer, Tensor) and pointer.rank == 1 \
                    and id(node) not in self.anchored_nodes:  # (in a computed operand's computation: its layout)
                # A vector in a blocked layout of its own (its addresses computed afresh from `arange`s), converted
                # where it meets the tile it is broadcast against: not loaded again by every warp of that tile.
                own = self.fresh(node, "own_load", rank=1, shape=list(pointer.shape) if pointer.shape else None,
                                 origins={"own_load"}, plain=True)
                self.unify_or_convert(own, pointer_node, pointer.term)
                pointer = Tensor(own, pointer.elem, pointer.shape)
            for key, index in (("mask", 1), ("other", 2)):
                arg = self.arg(node, index, key)
                value = self.eval(arg)
                if isinstance(pointer, Tensor) and isinstance(value, Tensor) and arg is not None:
                    value = self.operand_of_access(node, pointer, arg, value, key)
                    self.unify_or_convert(pointer.term, arg, value.term)
            if isinstance(pointer, Tensor):
                self.plan.loads[node] = pointer
            return Tensor(pointer.term, pointer.elem, pointer.shape) if isinstance(pointer, Tensor) else SCALAR
        if name == "store" or name in ATOMICS:
            pointer = self.eval(self.arg(node, 0, "pointer"))
            keys = (("value", 1), ("mask", 2)) if name == "store" else (("val", 1), ("mask", 2))
            if name == "atomic_cas":
                keys = (("cmp", 1), ("val", 2))
            anchored = id(node) in self.store_anchors
            stored: Tensor | None = None
            for key, index in keys:
                arg = self.arg(node, index, key)
                value = self.eval(arg)
                if key == "val" and name != "atomic_cas" and isinstance(pointer, Tensor) and arg is not None \
                        and not isinstance(value, Tensor):
                    self.plan.scalar_operands.add(arg)
                if isinstance(pointer, Tensor) and isinstance(value, Tensor) and arg is not None:
                    value = self.operand_of_access(node, pointer, arg, value, key)
                    if anchored and key == "value":  # (`StoreAnchor`: the pointers follow the value)
                        stored = value
                        self.unify_or_convert(value.term, self.arg(node, 0, "pointer"), pointer.term)
                    elif anchored and stored is not None:  # (... and so does the mask)
                        self.unify_or_convert(stored.term, arg, value.term)
                    elif key in ("value", "val") and value.term.find().dots and not pointer.term.find().dots:
                        # An MMA result goes out through pointers of their own (blocked, coalesced) layout: one
                        # conversion of the tile, as Triton's coalescing does, instead of a store pattern that
                        # follows the matrix instruction's registers.
                        self.plan.converts[arg] = pointer.term
                    else:
                        self.unify_or_convert(pointer.term, arg, value.term)
            for a in node.args:
                if a.keyword is not None and a.keyword.value in ("sem", "scope", "cache_modifier", "eviction_policy"):
                    self.eval(a.value)
            return Tensor(pointer.term, pointer.elem, pointer.shape) if (name != "store" and isinstance(pointer, Tensor)) \
                else SCALAR
        if name in REDUCTIONS:
            return self.reduction(node, self.arg(node, 0, "input"), self.arg(node, 1, "axis"))
        if name in SCANS:
            return self.scan(node, self.arg(node, 0, "input"))
        if name in SAME_AS_FIRST:
            first = self.eval(self.arg(node, 0, "input"))
            for a in node.args[1:]:
                self.eval(a.value)
            return first
        if name in OPAQUE:
            return self.opaque_call(node, name)
        if name in ("dot", "dot_scaled"):
            return self.dot(node, scaled=name == "dot_scaled")
        if name == "make_tensor_descriptor":
            return self.descriptor(node)
        if name in ELEMENTWISE:
            return self.elementwise(node)
        for a in node.args:
            self.eval(a.value)
        return SCALAR

    def opaque_call(self, node: cst.Call, name: str) -> Value:
        """A call that moves elements between threads in an order of the compiler's (`trans`, `reshape`, `view`,
        `join`, ...): a tensor of the rank and shape it gives, in a layout of its own."""
        value = self.eval(self.arg(node, 0, "input"))
        for a in node.args[1:]:
            self.eval(a.value)
        if not isinstance(value, Tensor):
            return SCALAR
        rank = value.rank
        shape = tuple(reversed(value.shape)) if name == "trans" and value.shape else None
        if name in ("trans", "permute") and len(node.args) > 1:
            shape = _permuted(value.shape, [a.value for a in node.args[1:] if a.keyword is None])
        if name in ("reshape", "view"):
            rank, shape = self.reshaped(node, self.arg(node, 1, "shape"), value.rank)
        if name == "ravel":
            rank = 1
        if name == "join":  # two tensors of one shape -> that shape with a new last dimension of 2
            rank = rank + 1 if rank is not None else None
            shape = (*value.shape, "2") if value.shape else None
        return self.opaque(node, rank, shape, value.elem)

    def reshaped(self, node: cst.Call, shape_node: cst.BaseExpression | None, rank: int | None
                 ) -> tuple[int | None, tuple[str | None, ...] | None]:
        """The rank and shape `node`, a reshape of a tensor of `rank` to `shape_node`, gives: a literal list, or
        another tensor's `y.shape` (a network that reshapes a tile to 3-d and back, `tl.reshape(t3, x.shape)`: the
        rank the analysis knows for `y`; a reshape back from another rank is noted in `LayoutPlan.round_trips`);
        (None, None) where neither says."""
        if isinstance(shape_node, (cst.List, cst.Tuple)):
            return len(shape_node.elements), tuple(self.shape_text(e.value) for e in shape_node.elements)
        like_node = _shape_of(shape_node) if shape_node is not None else None
        if like_node is not None:
            like = self.env.get(like_node.value) if isinstance(like_node, cst.Name) else None
            if isinstance(like, Tensor) and like.rank is not None:
                if rank is not None and rank != like.rank:
                    self.plan.round_trips.append(node)
                return like.rank, like.shape
        return None, None

    def expand_dims(self, node: cst.Call) -> Value:
        """`tl.expand_dims(x, axis)`: as `x[:, None]` (the operand in the matching slice layout)."""
        operand = self.arg(node, 0, "input")
        base = self.eval(operand)
        axis_node = self.arg(node, 1, "axis")
        self.eval(axis_node)
        if not isinstance(base, Tensor) or operand is None:
            return base
        try:
            axis = int(self.source.code(axis_node).strip()) if axis_node is not None else None
        except ValueError:
            axis = None
        if axis is None or base.rank is None:
            self.refuse(node, "TT010", "`tl.expand_dims` needs an integer literal axis (or write `x[:, None]`)")
            return base
        if axis < 0:
            axis += base.rank + 1
        indices: list[str | None] = [":"] * base.rank
        indices.insert(axis, None)
        in_shape = list(base.shape or [None] * base.rank)
        shape = [*in_shape[:axis], "1", *in_shape[axis:]]
        return self.expansion(node, "expand", operand, base, indices, base.rank + 1, shape)

    def shape_of_args(self, args: Sequence[cst.Arg]) -> tuple[str | None, ...] | None:
        """The shape a `broadcast_to`/`reshape` call names: one list/tuple argument or the dimensions one by one."""
        positional = [a.value for a in args if a.keyword is None]
        if len(positional) == 1 and isinstance(positional[0], (cst.List, cst.Tuple)):
            return tuple(self.shape_text(e.value) for e in positional[0].elements)
        return tuple(self.shape_text(p) for p in positional) if positional else None

    def broadcast_to(self, node: cst.Call) -> Value:
        """`tl.broadcast_to(x, shape)`: `x`'s layout class with the new shape (Triton broadcasts size-1 dimensions of
        a tensor of the same rank)."""
        base = self.eval(node.args[0].value) if node.args else SCALAR
        for a in node.args[1:]:
            self.eval(a.value)
        shape = self.shape_of_args(node.args[1:])
        if not isinstance(base, Tensor):
            if node.args and isinstance(base, Scalar) and shape is not None and not isinstance(
                    node.args[0].value, (cst.Integer, cst.Float, cst.UnaryOperation)):
                # a 0-d tensor (a loaded scalar, a reduction's result): Triton splats it; Gluon fills a tensor of
                # `shape` with it in the layout of its class (`rules.layouts.CreationLayouts.leave_Call`)
                return Tensor(self.created(node, rank=len(shape), shape=list(shape)), None, shape=shape)
            self.refuse(node, "TT010", "`tl.broadcast_to` of a scalar: write `tl.full(shape, value, dtype)`")
            return SCALAR
        return self.broadcast(base, shape)

    @staticmethod
    def broadcast(base: Tensor, shape: tuple[str | None, ...] | None) -> Tensor:
        """`base` broadcast to `shape`, in its own class, whose layout is sized for the broadcast tile (its size-1
        dimensions take the new sizes: a [G, 1] class holding a [G, GROUP] tile would give each thread one column)."""
        root = base.term.find()
        if shape is not None and root.rank == len(shape):
            root.shape = _join_shapes(root.shape, list(shape))
        return Tensor(base.term, base.elem, shape, base.pointer)

    def creation(self, node: cst.Call, name: str) -> Value:
        for a in node.args:
            self.eval(a.value)
        if name == "arange":
            start = self.arg(node, 0, "start")
            end = self.arg(node, 1, "end")
            shape: list[str | None] = [None]
            if start is not None and end is not None:
                start_text, end_text = self.shape_text(start), self.shape_text(end)
                if start_text == "0":
                    shape = [end_text]
                elif start_text is not None and end_text is not None:
                    shape = [f"{end_text} - {start_text}"]
            return Tensor(self.created(node, rank=1, shape=shape), "gl.int32", shape=tuple(shape))
        shape_node = self.arg(node, 0, "shape")
        dtype_node = self.arg(node, 1 if name == "zeros" else 2, "dtype")
        elem = self.dtype_text(dtype_node) if dtype_node is not None else None
        if isinstance(shape_node, (cst.List, cst.Tuple)) and not shape_node.elements:
            return SCALAR  # `tl.zeros([], dtype)`: a 0-d tensor is a scalar (no layout, nothing to broadcast)
        if isinstance(shape_node, (cst.List, cst.Tuple)):
            dims = [self.shape_text(e.value) for e in shape_node.elements]
            return Tensor(self.created(node, rank=len(dims), shape=dims), elem, shape=tuple(dims))
        like_node = _shape_of(shape_node)
        if like_node is not None:
            # `tl.full(x.shape, ...)` (`x.type.get_block_shapes()`): the shape of a tensor the analysis knows the rank
            # of (Gluon reads it as Triton does; only the layout is added)
            like = self.eval(like_node)
            if isinstance(like, Tensor) and like.rank is not None:
                dims = list(like.shape) if like.shape is not None else [None] * like.rank
                return Tensor(self.created(node, rank=like.rank, shape=dims), elem, shape=tuple(dims))
            if isinstance(like_node, cst.Name) and (isinstance(like, Tensor) or isinstance(like, Scalar) and (
                    like.param == like_node.value and self.fn.node.params.params)):
                # a tensor of a rank the analysis does not know (a library helper's parameter, `tl.full(inp.shape,
                # value, inp.dtype)`, pointwise code generators' style): filled in that tensor's own layout
                # (`layout=inp.type.layout`); a parameter's shape is read only of a tensor
                self.plan.shaped_like[node] = like_node.value
                return Tensor(like.term, elem, like.shape) if isinstance(like, Tensor) else Tensor(
                    self.fresh(node, "like", rank=None, shape=None, origins={"opaque"}), elem)
            if isinstance(like, Scalar) and self.certainly_0d(like_node):
                return SCALAR  # (a 0-d tensor's shape is `[]`: Gluon's fill of no shape is the value itself)
        self.refuse(node, "TT010", f"`tl.{name}` needs a literal shape list (e.g. `[BLOCK_M, BLOCK_N]`) so that its "
                    "layout can be chosen")
        return Tensor(self.created(node, rank=None, shape=None))

    def accumulated(self, node: cst.BaseExpression | None) -> bool:
        """`node` reads a name carried out of a loop that does not run this statement (`acc += tl.load(...)` in a
        loop, then `tl.sum(acc, axis=0)` after it): the value is reduced once per many loads of it. A name the
        innermost loop around the statement assigns (or, outside loops, one no loop assigns) is fresh there."""
        if node is None:
            return False
        from transpile import cst_walk
        from transpile.cst_utils import bound_names, names_in

        if self._loop_assigned is None:
            self._loop_assigned = {}
            for loop in cst_walk.preorder(self.fn.node):
                if isinstance(loop, (cst.For, cst.While)):
                    for name in bound_names(loop.body):
                        self._loop_assigned.setdefault(name, []).append(loop)
        innermost = id(self.loops[-1]) if self.loops else None
        for name in names_in(node):
            loops = {id(loop) for loop in self._loop_assigned.get(name, ())}
            if loops and innermost not in loops:
                return True
        return False

    def reduction(self, node: cst.Call, input_node: cst.BaseExpression | None, axis_node: cst.BaseExpression | None
                  ) -> Value:
        value = self.eval(input_node)
        for a in node.args:
            if a.value is not input_node:
                self.eval(a.value)
        self.check_combine(node)
        reducer = _strip_module(self.source.code(node.func).strip())
        index = _KEEP_DIMS_INDEX.get(reducer, 99) - (1 if input_node is not None and input_node is not
                                                        self.arg(node, 0, "input") else 0)  # methods: no input arg
        keep_dims = self.arg(node, index, "keep_dims")
        keeps = keep_dims is not None and (self.literal_argument(keep_dims)  # (a helper's `keep_dims=keep_dims`)
                                           or self.source.code(keep_dims).strip()) != "False"
        if isinstance(value, Tup) and reducer == "reduce" and isinstance(input_node, (cst.Tuple, cst.List)) \
                and len(input_node.elements) == len(value.items) and value.items \
                and all(isinstance(v, Tensor) for v in value.items):
            # `tl.reduce((a, b, c), axis, combine_fn)` (a Welford reduction): the operands in one layout, reduced
            # together; a tuple of results in one layout
            items = value.items
            first = items[0]
            for item, element in zip(items[1:], input_node.elements[1:]):
                self.unify_or_convert(first.term, element.value, item.term)  # type: ignore[union-attr]
            if axis_node is None or (isinstance(axis_node, cst.Name) and axis_node.value == "None"):
                return Tup(tuple(SCALAR for _ in input_node.elements))
            result = self.reduction_result(node, first, axis_node, keeps, reducer, input_node)
            if not isinstance(result, Tensor):
                return Tup(tuple(SCALAR for _ in input_node.elements))
            return Tup(tuple(Tensor(result.term, item.elem, result.shape) for item in items))  # type: ignore[union-attr]
        if not isinstance(value, Tensor):
            return SCALAR
        if axis_node is None or (isinstance(axis_node, cst.Name) and axis_node.value == "None"):
            return SCALAR
        indices = self.arg(node, 2, "return_indices") if reducer in ("max", "min") and index == 4 else None
        indexed = indices is not None and self.source.code(indices).strip() != "False"
        if (indexed or reducer in ("argmax", "argmin")) and value.rank is not None and value.rank > 2:
            self.refuse(node, "TT011", f"`tl.{reducer}` with indices of a rank-{value.rank} tile is not translated "
                        "(the index helper takes tiles of rank 1 or 2): reshape the tile to two axes first")
            return value
        if indexed:
            # `tl.max(x, axis, return_indices=True)`: the values and their int32 indices, reduced alike
            result = self.reduction_result(node, value, axis_node, keeps, reducer, input_node)
            if isinstance(result, Tensor):
                return Tup((result, Tensor(result.term, "gl.int32", result.shape)))
            return Tup((result, SCALAR))
        return self.reduction_result(node, value, axis_node, keeps, reducer, input_node)

    def reduction_result(self, node: cst.Call, value: Value, axis_node: cst.BaseExpression | None, keeps: bool,
                         reducer: str, input_node: cst.BaseExpression | None) -> Value:
        """The result of the reduction `node` of `value` along `axis_node`."""
        try:
            axis = int(self.source.code(axis_node).strip())
        except ValueError:
            known = self.literal_argument(axis_node)
            known = int(known) if known is not None and known.lstrip("-").isdigit() else None
            if known is None:
                self.refuse(axis_node, "TT010", "reduction axis must be an integer literal (or a parameter of a "
                            "helper that every call passes the same integer)")
                return value
            axis = known
        rank = value.rank
        if rank is not None and axis < 0:
            axis += rank
        if rank is not None and 0 <= axis < rank and (axis == rank - 1 or not self.accumulated(input_node)):
            # A column reduction as often as its tile is loaded: its layout keeps the axis inside each thread
            # (`_blocked_layout(..., reduced=)`), which saves shuffles and a shared-memory round trip each time. Once,
            # after a loop that accumulates the tile, that layout only narrows the loads (0.40-0.68x, bench/RESULTS.md: sm90: kernels without a dot loop).
            value.term.find().reduced.add(axis)
            if axis == rank - 1 and rank > 1:
                if self.accumulated(input_node):
                    value.term.find().accumulated_rows = True
                else:
                    value.term.find().fresh_rows = True
        if keeps:
            # Gluon reduces into the slice layout and expands it back: the result is in the input's layout.
            if rank == 1:
                self.refuse(node, "TT010", "`keep_dims=True` on a rank-1 tensor: reduce to a scalar and use it as is")
                return value
            kept_shape = tuple("1" if i == axis else d for i, d in enumerate(value.shape)) if value.shape else None
            return Tensor(value.term, _reduced_elem(value.elem, reducer), kept_shape)
        if rank == 1:
            return SCALAR  # reducing a vector gives a scalar
        shape = value.shape
        out_shape = [s for i, s in enumerate(shape) if i != axis] if shape else None
        term = self.fresh(node, "reduce", rank=None if rank is None else rank - 1, shape=out_shape,
                          slice_of=(axis, value.term), origins={"slice"})
        return Tensor(term, _reduced_elem(value.elem, reducer), tuple(out_shape) if out_shape is not None else None)

    def scan(self, node: cst.Call, input_node: cst.BaseExpression | None) -> Value:
        """A scan (`tl.cumsum`, `tl.associative_scan`): its operands and results in a class of a blocked layout, the
        operands converted where their class is a slice (a reduced row) or an MMA layout."""
        value = self.eval(input_node)
        for a in node.args:
            if a.value is not input_node:
                self.eval(a.value)
        self.check_combine(node)
        items = value.items if isinstance(value, Tup) else (value,)
        nodes = (list(e.value for e in input_node.elements) if isinstance(value, Tup) and isinstance(
            input_node, (cst.Tuple, cst.List)) and len(input_node.elements) == len(items) else None)
        if not all(isinstance(v, Tensor) for v in items) or input_node is None or (isinstance(value, Tup) and nodes
                                                                                    is None):
            return value
        first = items[0]
        term = self.fresh(node, "scan", rank=first.rank, shape=list(first.shape) if first.shape else None,
                          origins={"scan"}, plain=True)
        for item, item_node in zip(items, nodes or [input_node]):
            self.unify_or_convert(term, item_node, item.term)  # type: ignore[union-attr]
        results = tuple(Tensor(term, v.elem, v.shape) for v in items)  # type: ignore[union-attr]
        return Tup(results) if isinstance(value, Tup) else results[0]

    def check_combine(self, node: cst.Call) -> None:
        """A scan's or `tl.reduce`'s combine function that the tool cannot read (imported from another module, whose
        body makes tensors of its own): the Gluon scan would call it as Triton code, which does not compile."""
        for a in node.args:
            fn = self.analysis.facts.functions.get(a.value.value) if isinstance(a.value, cst.Name) else None
            if fn is not None:
                # A combine function runs on the elements: a use of the helper with scalars (a helper also called
                # with tensors gets a copy per kind: `transpile.passes.specialise`)
                scalars = tuple("scalar" for _ in fn.params)
                self.plan.helper_calls[a.value] = (fn.name, scalars)
                previous = self.analysis.helper_kinds.get(fn.name)
                if previous is None:
                    self.analysis.helper_kinds[fn.name] = tuple(SCALAR for _ in fn.params)
                elif tuple(_kind(k) for k in previous) != scalars:
                    self.refuse(a.value, "TT012", f"`{fn.name}` is the combine function here, called on the "
                                f"elements (scalars), but elsewhere with argument kinds {[_kind(k) for k in previous]}"
                                "; Gluon layouts need one kind per helper")
            if fn is not None and _beyond_elementwise(
                    ast.parse(cst.Module([fn.node]).code).body[0],  # type: ignore[arg-type]
                    language_modules(ast.parse(self.source.text))):
                self.refuse(a.value, "TT010", f"`{fn.name}`, the combine function here, does more than elementwise "
                            "math (it makes or reads tensors of its own): Gluon runs a combine function on the "
                            "scan's scalar elements, where that does not compile")
            elif isinstance(a.value, cst.Name) and a.value.value in self.analysis.unseen_functions:
                self.refuse(a.value, "TT010", f"`{a.value.value}` is {self.analysis.unseen_functions[a.value.value]}"
                            " (Triton code the tool does not translate) and does more than elementwise math: as the "
                            "combine function of a Gluon scan or reduction it does not compile (bring it into this "
                            "file at module level)")

    def split(self, node: cst.Call, operand: cst.BaseExpression | None) -> Value:
        """`tl.split(x)` and `x.split()`: two tensors, each converted after the line (like a helper's tuple)."""
        value = self.eval(operand)
        if not isinstance(value, Tensor):
            return SCALAR
        whole = self.fresh(node, "split", rank=value.rank, shape=list(value.shape) if value.shape else None,
                           origins={"split"}, plain=True, whole_last=True)
        self.unify_or_convert(whole, operand, value.term)  # type: ignore[arg-type]
        rank = value.rank - 1 if value.rank is not None else None
        shape = value.shape[:-1] if value.shape else None
        # Gluon gives both halves the slice of the operand's layout along its last axis (in Triton 3.6 and 3.9): as
        # a reduction along that axis would, with no conversion
        half = self.fresh(node, "half", rank=rank, shape=list(shape) if shape else None,
                          slice_of=(value.rank - 1, whole), origins={"slice"}) if rank is not None else None
        if half is None:  # (a rank the analysis does not know: converted after the line, as a helper's tuple)
            self.tuple_calls[node] = "tl.split"
        return Tup(tuple(Tensor(half or self.fresh(node, f"item{i}", rank=rank, origins={"opaque"}), value.elem,
                                shape) for i in range(2)))

    def join(self, node: cst.Call) -> Value:
        """`tl.join(a, b)`: both operands in the slice, along the new last axis, of the result's layout (a blocked
        layout whose threads hold that axis of 2 whole), which Gluon then gives the result, with no conversion."""
        first, second = self.arg(node, 0, "a"), self.arg(node, 1, "b")
        values = [self.eval(first), self.eval(second)]
        tensors = [v for v in values if isinstance(v, Tensor)]
        if len(tensors) != 2 or tensors[0].rank is None or tensors[0].rank != tensors[1].rank:
            value = tensors[0] if tensors else None
            if value is None:
                return SCALAR
            rank = value.rank + 1 if value.rank is not None else None
            return self.opaque(node, rank, (*value.shape, "2") if value.shape else None, value.elem)
        rank = tensors[0].rank
        shape = (*tensors[0].shape, "2") if tensors[0].shape else None
        joined = self.fresh(node, "join", rank=rank + 1, shape=list(shape) if shape else None, origins={"join"},
                            plain=True, whole_last=True)
        half = self.fresh(node, "half", rank=rank, shape=list(tensors[0].shape) if tensors[0].shape else None,
                          slice_of=(rank, joined), origins={"slice"})
        for operand, value in zip((first, second), tensors):
            self.unify_or_convert(half, operand, value.term)  # type: ignore[arg-type]
        return Tensor(joined, tensors[0].elem, shape)

    def eval_method(self, node: cst.Call, base: Tensor, method: str) -> Value:
        if method == "split" and not node.args:  # `x.split()`: as `tl.split(x)`
            return self.split(node, node.func.value)  # type: ignore[attr-defined]
        if method in SCANS:
            return self.scan(node, node.func.value)  # type: ignore[attr-defined]
        if method in language.METHOD_FUNCTIONS:
            # `x.argmax(1)`: Triton's method body does not compile under Gluon; the rule calls the function form.
            self.plan.method_calls[node] = method
            if method in REDUCTIONS:
                return self.reduction(node, node.func.value, self.arg(node, 0, "axis"))  # type: ignore[attr-defined]
            for a in node.args:
                self.eval(a.value)
            return base
        if method == "broadcast_to":
            for a in node.args:
                self.eval(a.value)
            return self.broadcast(base, self.shape_of_args(node.args))
        if method in ("to", "cast"):
            for a in node.args:
                self.eval(a.value)
            dtype = self.arg(node, 0, "dtype")
            return Tensor(base.term, self.dtype_text(dtype) if dtype is not None else None, base.shape)
        if method in REDUCTIONS:
            return self.reduction(node, node.func.value, self.arg(node, 0, "axis"))  # type: ignore[attr-defined]
        if method in ("trans", "permute", "reshape", "view"):
            if method == "trans" and not node.args:
                self.plan.transposes.add(node)
            for a in node.args:
                self.eval(a.value)
            rank = base.rank
            shape = tuple(reversed(base.shape)) if method == "trans" and base.shape else None
            if method in ("trans", "permute") and node.args:
                shape = _permuted(base.shape, [a.value for a in node.args if a.keyword is None])
            if method in ("reshape", "view"):
                positional = [a.value for a in node.args if a.keyword is None]
                if len(positional) == 1 and _shape_of(positional[0]) is not None:
                    rank, shape = self.reshaped(node, positional[0], base.rank)
                else:
                    shape = self.shape_of_args([a for a in node.args if a.keyword is None])
                    rank = len(shape) if shape is not None else None
            return self.opaque(node, rank, shape, base.elem)
        for a in node.args:
            self.eval(a.value)
        return base

    def dot(self, node: cst.Call, scaled: bool = False) -> Value:
        """`tl.dot(a, b[, acc])`, or (`scaled`) `tl.dot_scaled(lhs, lhs_scale, lhs_format, rhs, rhs_scale,
        rhs_format[, acc])`: a tensor in the MMA layout."""
        keywords = DOT_SCALED_KEYWORDS if scaled else DOT_KEYWORDS
        unknown = [a for a in node.args if a.keyword is not None and a.keyword.value not in keywords]
        if unknown:  # (`trans_b=True`, of Triton 1.x: dropped, it gave Q K instead of Q K^T)
            what = "tl.dot_scaled" if scaled else "tl.dot"
            self.refuse(unknown[0], "TT010", f"`{unknown[0].keyword.value}=` is not an argument of `{what}`, "
                        f"{language.NOT_TRITON} (it takes {', '.join(sorted(keywords))})"
                        + ("" if scaled else "; transpose an operand with `tl.trans`"))
        if scaled:
            a_node, b_node, acc_node = self.arg(node, 0, "lhs"), self.arg(node, 3, "rhs"), self.arg(node, 6, "acc")
        else:
            a_node, b_node, acc_node = self.arg(node, 0, "input"), self.arg(node, 1, "other"), self.arg(node, 2, "acc")
        a = self.eval(a_node)
        b = self.eval(b_node)
        scales: list[Value] = []
        if scaled:  # (the scales keep layouts of their own: the dot converts them to the instruction's)
            for index, key in ((1, "lhs_scale"), (4, "rhs_scale")):
                scale = self.arg(node, index, key)
                scales.append(self.eval(scale) if scale is not None else SCALAR)
        for operand in (a_node, b_node):  # operands are converted to the dot-operand layout anyway
            if operand in self.opaque_nodes:
                self.plan.converts.pop(operand, None)  # type: ignore[arg-type]
        shape: list[str | None] = [None, None]
        if isinstance(a, Tensor) and a.shape:
            shape[0] = a.shape[0]
        if isinstance(b, Tensor) and b.shape and len(b.shape) == 2:
            shape[1] = b.shape[1]
        site = self.plan.dots.get(node)
        if site is None:
            result = Term(rank=2, shape=list(shape), origins={"mma"})
            out_dtype = self.arg(node, 10, "out_dtype") if scaled else self.arg(node, 4, "out_dtype")
            precision = None if scaled else self.arg(node, 3, "input_precision")
            site = DotSite(node, a_node, b_node, acc_node, out_dtype, precision, result, shape)  # type: ignore[arg-type]
            if scaled:
                site.scaled = (self.arg(node, 1, "lhs_scale"), self.arg(node, 2, "lhs_format"),
                               self.arg(node, 4, "rhs_scale"), self.arg(node, 5, "rhs_format"))
                site.scale_shapes = tuple(s.shape if isinstance(s, Tensor) else None  # type: ignore[assignment]
                                          for s in scales)
            site.operand_dtype = a.elem if isinstance(a, Tensor) else None
            site.b_dtype = b.elem if isinstance(b, Tensor) else None
            site.a_shape = a.shape if isinstance(a, Tensor) else None
            site.b_shape = b.shape if isinstance(b, Tensor) else None
            result.dots = [site]
            self.plan.dots[node] = site
        for anchor in self.anchors.values():  # the MMA layout and element type of the operands computed here
            term = self.anchor_terms.get((id(anchor.dot), anchor.position))
            operand = (a, b)[anchor.position]
            # (only where the computation keeps the tile's class: a transpose or a reshape on the way makes another)
            if anchor.dot is node and term is not None and isinstance(operand, Tensor) \
                    and operand.term.find() is term.find():
                term.find().operand = (anchor.position, term, site.operand_type(anchor.position) or "", site.result)
        acc = self.eval(acc_node)
        if isinstance(acc, Tensor) and acc_node is not None:
            self.unify_or_convert(site.result, acc_node, acc.term)
            if acc.shape and len(acc.shape) == 2:
                site.shape = [_dim(site.shape[0], acc.shape[0]), _dim(site.shape[1], acc.shape[1])]
        for key in ("fast_math", "lhs_k_pack", "rhs_k_pack", "out_dtype") if scaled else (
                "out_dtype", "input_precision", "max_num_imprecise_acc", "allow_tf32"):
            self.eval(self.arg(node, 99, key))
        return Tensor(site.result, self.dot_result_dtype(site, acc), tuple(site.shape))

    def dot_result_dtype(self, site: DotSite, acc: Value) -> str | None:
        """The result's element type: `out_dtype=`, else the accumulator's, else what Triton picks for the operands."""
        if site.out_dtype is not None:
            return self.dtype_text(site.out_dtype)
        if isinstance(acc, Tensor) and acc.elem is not None:
            return acc.elem
        if site.scaled is not None:  # (`tl.dot_scaled` computes in fp32 alone)
            return "gl.float32"
        operand = site.operand_dtype
        if operand in _DTYPE_ORDER:
            return "gl.int32" if operand.startswith(("gl.int", "gl.uint")) else "gl.float32"
        return None

    def descriptor(self, node: cst.Call) -> Value:
        for a in node.args:
            self.eval(a.value)

        def texts(index: int, key: str) -> list[str] | None:
            arg = self.arg(node, index, key)
            if isinstance(arg, (cst.List, cst.Tuple)):
                return [self.source.code(e.value).strip() for e in arg.elements]
            return None

        base = self.arg(node, 0, "base")
        shape, strides, block = texts(1, "shape"), texts(2, "strides"), texts(3, "block_shape")
        if base is None or shape is None or strides is None or block is None:
            self.refuse(node, "TT010", "`tl.make_tensor_descriptor` needs literal `shape`, `strides` and "
                        "`block_shape` lists")
            return SCALAR
        if len(block) != 2:
            self.refuse(node, "TT010", f"rank-{len(block)} tensor descriptors are not supported (rank 2 is)")
            return SCALAR
        info = DescriptorInfo(node, self.source.code(base).strip(), shape, strides, block)
        return Descriptor("", info)

    def eval_descriptor_op(self, node: cst.Call, desc: Descriptor, method: str) -> Value:
        for a in node.args:
            self.eval(a.value)
        if method == "load":
            self.plan.descriptor_ops[node] = ("load", desc.info)
            shape = [t if all(n in self.allowed_shape_names for n in _IDENT.findall(t)) else None
                     for t in desc.info.block_shape]
            base = desc.info.base
            # (a pointer parameter, or one plus an offset: `x_base + b * x_stride_0`, a slice of a host descriptor)
            pointer = _IDENT.match(base)
            pointer = pointer.group(0) if pointer is not None and re.fullmatch(
                rf"{re.escape(pointer.group(0))}( \+ .*)?", base) else None
            elem = f"{pointer}.dtype.element_ty" if pointer in self.allowed_shape_names else None
            return Tensor(self.created(node, rank=len(shape), shape=shape), elem, tuple(shape))
        if method == "store":
            self.plan.descriptor_ops[node] = ("store", desc.info)
            value_node = self.arg(node, 1, "value")
            value = self.eval(value_node)
            if isinstance(value, Tensor) and value_node is not None:
                # the stored tile is converted to a blocked layout of the block shape on the way out
                target = self.fresh(node, "store", rank=2, shape=list(desc.info.block_shape), origins={"creation"})
                self.plan.converts[value_node] = target
            return SCALAR
        self.refuse(node, "TT010", f"tensor descriptor method `.{method}` is not supported (load and store are)")
        return SCALAR


def _permuted(shape: tuple[str | None, ...] | None, dims: list[cst.BaseExpression]
              ) -> tuple[str | None, ...] | None:
    """`shape` permuted as `x.permute((1, 0))`, `tl.permute(x, [1, 0])`, `x.trans(1, 0)` name it (one tuple or list
    of integer literals, or the integers one by one); None where they are not literals or do not fit the shape."""
    if len(dims) == 1 and isinstance(dims[0], (cst.Tuple, cst.List)):
        dims = [e.value for e in dims[0].elements]
    if shape is None or len(dims) != len(shape) or not all(isinstance(d, cst.Integer) for d in dims):
        return None
    order = [int(d.value) for d in dims]  # type: ignore[attr-defined]
    if sorted(order) != list(range(len(shape))):
        return None
    return tuple(shape[d] for d in order)
