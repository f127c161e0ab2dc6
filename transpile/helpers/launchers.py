"""The host launchers of variants: a variant binds each translated kernel's name to one of these, which runs the Gluon
kernel on the launches it covers and the source's Triton kernel on the others. Copied into variants from here
(`transpile.helpers`); plain Python, tested without a GPU."""

import triton


#: the key of a launch's values (`_launch_values`) where a host descriptor cannot be passed in parts, and why
_UNPASSABLE = "_transpile_unpassable"


def _launch_values(params, args, kwargs, descriptors=None):
    """A launch's arguments by parameter name; with `descriptors` (`_DescriptorParts`), the parts of those host
    descriptors too."""
    values = dict(zip(params, args))
    values.update(kwargs)
    if descriptors is not None:
        descriptors.add(values)
    return values


class _DescriptorParts:
    """The tensor descriptors the host builds that a Gluon kernel takes in parts: (parameter, rank) each, and True
    third where the kernel reads one slice of it along its first axis (its block there must be 1)."""

    def __init__(self, descriptors):
        self.names = [d[0] for d in descriptors]
        # (parameter, rank, sliced, the names of its parts), worked out once, not per launch
        self.descriptors = [(d[0], d[1], len(d) > 2 and d[2], *_DescriptorParts.parts(d[0], d[1]))
                            for d in descriptors]

    @staticmethod
    def parts(name, rank):
        """The Gluon kernel's parameters that take the parts of the host descriptor `name`: its shape, its strides
        but the last (which is 1), its block shape, its base (`transpile.passes.host_descriptors` names them)."""
        return (["%s_shape_%d" % (name, i) for i in range(rank)],
                ["%s_stride_%d" % (name, i) for i in range(rank - 1)],
                ["%s_block_%d" % (name, i) for i in range(rank)], name + "_base")

    def add(self, values):
        """Add to `values` (a launch's arguments by name) the parts of each descriptor, by the Gluon kernel's names.
        A descriptor the Gluon kernel cannot make from its parts (NaN padding, fp32 rounded to tf32, another rank, a
        slice's block of more than one) sets `_UNPASSABLE` to the reason."""
        for name, rank, sliced, shape, strides, blocks, base in self.descriptors:
            desc = values.get(name)
            block = getattr(desc, "block_shape", None)
            if block is None or not hasattr(desc, "base") or len(block) != rank or len(desc.shape) != rank:
                values[_UNPASSABLE] = "`%s` is not a tensor descriptor of rank %d (`TensorDescriptor`)" % (name, rank)
                continue
            if sliced and block[0] != 1:
                values[_UNPASSABLE] = "`%s` has blocks of more than one along its first axis" % name
                continue
            if getattr(desc, "padding", "zero") != "zero" or getattr(desc, "round_f32_to_tf32", False):
                values[_UNPASSABLE] = ("`%s` pads with NaN or rounds fp32 to tf32, which the Gluon kernel does not"
                                       % name)
                continue
            values[base] = desc.base
            values.update(zip(shape, desc.shape))
            values.update(zip(strides, desc.strides))  # (all but the last: `strides` names one fewer)
            values.update(zip(blocks, block))


class _HostDescriptors:
    """A Gluon kernel whose source takes tensor descriptors the host builds (`TensorDescriptor` of
    `triton.tools.tensor_descriptor`): called with the source kernel's arguments, it passes each descriptor's base,
    shape, strides and block shape, which the Gluon kernel takes in its place and makes the descriptor from. It sits
    under the source's `@triton.autotune`, whose configs' `pre_hook`s set block shapes before it runs, as they do for
    the source kernel. `descriptors`: as `_DescriptorParts` takes them."""

    def __init__(self, fn, params, descriptors):
        self.fn = fn  # (an autotuner reads the kernel's name and cache key through `fn`)
        self.arg_names = list(params)
        self.descriptors = _DescriptorParts(descriptors)

    @classmethod
    def of(cls, params, descriptors):
        """The decorator: `@_HostDescriptors.of(params, descriptors)` above `@gluon.jit`."""
        return lambda fn: cls(fn, params, descriptors)

    def run(self, *args, grid, warmup=False, **kwargs):
        values = _launch_values(self.arg_names, args, kwargs, self.descriptors)
        if _UNPASSABLE in values:
            raise ValueError(f"{self.fn.__name__}: {values[_UNPASSABLE]}; launch the source kernel instead")
        for name in self.descriptors.names:
            del values[name]
        try:
            return self.fn.run(grid=grid, warmup=warmup, **values)
        except RuntimeError as exc:
            # (sm90: a descriptor made in the kernel lives in a global scratch buffer that Triton allocates per
            # launch through `triton.set_allocator`, which a kernel taking the host's descriptors never needed)
            if "no allocator was set" not in str(exc):
                raise
        triton.set_allocator(_tma_scratch)
        return self.fn.run(grid=grid, warmup=warmup, **values)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, **kwargs)

    def warmup(self, *args, grid, **kwargs):
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def __getattr__(self, name):  # `__name__`, `cache_key`, ...: the Gluon kernel's
        if name.startswith("__") and name != "__name__" or "fn" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.fn, name)


class _AlignedOrTriton:
    """`kernel[grid](*args, **kwargs)`: the Gluon kernel for launches whose rows are 16-byte aligned (the `divisible`
    arguments, which its addresses read: tensors 16-byte aligned, ints multiples of 16; None, an absent optional
    pointer, reads nothing) and whose tensors hold elements of 4 bytes or more, the source's Triton kernel for the
    others. Triton compiles loads of one element per thread where rows are not aligned, and of 16 bytes per thread
    (8 16-bit elements) where they are: both faster there than the Gluon kernel's layouts of up to 4 contiguous
    elements per thread. With `narrow` (a kernel whose column reductions its layouts keep inside each thread, which
    Triton's do not) the Gluon kernel also takes aligned launches of 8- and 16-bit data."""

    def __init__(self, gluon_kernel, triton_kernel, params, divisible=(), narrow=False, descriptors=None):
        self.descriptors = descriptors
        self.gluon_kernel = gluon_kernel
        self.triton_kernel = triton_kernel
        self.params = params
        self.divisible = divisible
        self.narrow = narrow
        if hasattr(gluon_kernel, "configs"):
            # Autotuned: the autotuner times each config on the Gluon kernel and on the source kernel.
            _ConfigSplit.install(self)

    def arguments(self, args, kwargs):
        """A launch's arguments by parameter name (and the parts of its host descriptors: `_launch_values`)."""
        return _launch_values(self.params, args, kwargs, self.descriptors)

    def config_runs_gluon(self, values):
        """Every autotune config may run the Gluon kernel (its source twin is timed against it), unless a host
        descriptor cannot be passed in parts."""
        return _UNPASSABLE not in values

    def aligned(self, args, kwargs):
        values = self.arguments(args, kwargs)
        if _UNPASSABLE in values:
            return False
        for name in self.divisible:
            value = values.get(name)
            if hasattr(value, "data_ptr"):
                if value.data_ptr() % 16:
                    return False
                if not self.narrow and hasattr(value, "element_size") and value.element_size() < 4:
                    return False
            elif isinstance(value, int) and not isinstance(value, bool) and value % 16:
                return False
        return True

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            kernel = self.gluon_kernel if self.aligned(args, kwargs) else self.triton_kernel
            return kernel[grid](*args, **kwargs)

        return launch

    def run(self, *args, grid, warmup=False, **kwargs):
        """What `triton.autotune(...)(kernel)` and `triton.heuristics(...)(kernel)` call: the same choice."""
        if not warmup:
            return self[grid](*args, **kwargs)
        kernel = self.gluon_kernel if self.aligned(args, kwargs) else self.triton_kernel
        return kernel.run(*args, grid=grid, warmup=True, **kwargs)

    def warmup(self, *args, grid, **kwargs):
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def __getattr__(self, name):  # `best_config`, `fn`, ...: the Gluon kernel's
        if name.startswith("__") or "gluon_kernel" not in self.__dict__:  # (copies made without __init__)
            raise AttributeError(name)
        return getattr(self.gluon_kernel, name)


# device -> number of SMs, asked once per device (launches of small kernels feel a driver query)
_SM_COUNTS = {}


def _sm_count():
    """The number of SMs of the current device (asked of the driver once per device)."""
    driver = triton.runtime.driver.active
    device = driver.get_current_device()
    if device not in _SM_COUNTS:
        _SM_COUNTS[device] = driver.utils.get_device_properties(device)["multiprocessor_count"]
    return _SM_COUNTS[device]


def _persistent_grid(grid, persistent):
    """The launch grid of a kernel in its persistent form: one program per SM (at most one per tile of `grid`) for
    the configs `persistent(meta)` selects, else `grid` itself. The kernel walks the tiles of `grid` either way."""
    def launch_grid(meta):
        dims = grid(meta) if callable(grid) else grid
        if not persistent(meta):
            return dims
        tiles = 1
        for d in dims:
            tiles *= d
        return (max(1, min(tiles, _sm_count())),)
    # (what a config run on the source kernel launches: `_ConfigSplit.pick`)
    launch_grid.source = grid
    return launch_grid


class _TMAOrTriton:
    """`kernel[grid](*args, **kwargs)` for a kernel whose Gluon variant reads its pointer tiles through TMA
    descriptors: runs the variant where the descriptors can address every tile of the launch (16-bit operands, a unit
    inner stride, 16-byte aligned base addresses, row strides and offsets), else the source's Triton kernel. `tiles`:
    (pointer, row stride, unit stride or None, offset strides, operand: True, "fp8" where 8-bit floats may come
    too, or False for the epilogue's store) per tile, parameter names or numbers.
    `when`: (a constexpr parameter, its default): only launches that set it run the variant (a form that is faster
    than the source only then), unless the `unflagged_at_least` (constexpr parameter, value) pairs hold; `at_least`:
    (constexpr parameter, value) pairs, the same from a value on; `grid_at_least`: (grid axis, count), only launches
    with at least that many programs along the axis. `retile`: (constexpr parameter, value, warps): launches that set
    the parameter to the value run the Gluon kernel with that many warps, whatever the launch asks for (a form that
    splits the tile among partitions of its own: the warp-specialised attention's two 4-warp consumers and a loader
    warp take a 128-row tile that the source launches at 8 warps). `aligned`: only launches whose tensor arguments have
    16-byte aligned addresses, a unit last stride and the other strides multiples of 16 elements, whose `divisible`
    arguments are multiples of 16 (ints) or 16-byte aligned (tensors) and whose `unit` ones are 1 (a launch then tells
    the compiler their rows are aligned, which cp.async copies of 16 bytes need to compile). The descriptors are
    made in the kernel, in a global scratch buffer that Triton allocates per launch: where no allocator is set
    (`triton.set_allocator`), one that allocates with torch is set; `made` (`_HostMade`): those the launcher makes on
    the host instead while a CUDA graph is captured, where the launch's arguments give their parts (an autotuned Gluon
    kernel's at each config's block sizes, `_ConfigSplit`)."""

    made = None

    def __init__(self, gluon_kernel, triton_kernel, params, tiles, persistent=None, when=None, aligned=False,
                 divisible=(), unit=(), at_least=(), unflagged_at_least=(), grid_at_least=None, retile=None,
                 source_when=(), descriptors=None, made=None):
        self.made = made
        self.descriptors = descriptors
        self.source_when = source_when
        self.grid_at_least = grid_at_least
        self.retile = retile
        self.gluon_kernel = gluon_kernel
        self.triton_kernel = triton_kernel
        self.params = params
        self.tiles = tiles
        self.persistent = persistent
        self.when = when
        self.aligned = aligned
        self.divisible = divisible
        self.unit = unit
        self.at_least = at_least
        self.unflagged_at_least = unflagged_at_least
        if hasattr(gluon_kernel, "configs"):
            # Autotuned: the autotuner times each config on the Gluon kernel (where `config_runs_gluon` takes it)
            # and on the source kernel, and keeps the fastest.
            _ConfigSplit.install(self)

    def config_runs_gluon(self, values):
        """Whether an autotune config (its values, with the launch's and its `num_warps`) may run the Gluon kernel:
        every one for which no test of `source_when` holds (and whose host descriptors pass in parts)."""
        return _UNPASSABLE not in values and not self.source_wanted(values)

    def source_wanted(self, values):
        """A test of `source_when` (functions of the kernel's parameters: launches for which the Gluon kernel measured
        slower, or does not pipeline its loop) holds at these launch (or config) values; so does a test reading a
        parameter the launch neither passes nor has a default for."""
        for test in self.source_when:
            names = test.__code__.co_varnames[: test.__code__.co_argcount]
            try:
                if test(**{n: values[n] for n in names if n in values}):
                    return True
            except TypeError:
                return True
        return False

    def arguments(self, args, kwargs):
        """A launch's arguments by parameter name (and the parts of its host descriptors: `_launch_values`)."""
        return _launch_values(self.params, args, kwargs, self.descriptors)

    def addressable(self, args, kwargs):
        values = self.arguments(args, kwargs)
        if _UNPASSABLE in values:
            return False
        if self.when is not None and not values.get(*self.when):
            if not self.unflagged_at_least or not self.sizes_at_least(self.unflagged_at_least, values):
                return False
        if not self.sizes_at_least(self.at_least, values):
            return False
        # (an autotuned Gluon kernel: its configs' values are tested per config, `config_runs_gluon`)
        if not hasattr(self.gluon_kernel, "configs") and self.source_wanted(values):
            return False
        if self.aligned:
            for value in values.values():
                if not (hasattr(value, "data_ptr") and hasattr(value, "stride")):
                    continue
                strides = value.stride()  # (multiples of 16 elements: what a launch specialises as aligned)
                if value.data_ptr() % 16 or (strides and strides[-1] != 1) or any(s % 16 for s in strides[:-1]):
                    return False
            # ints multiples of 16, tensors (a base pointer) 16-byte aligned
            for name in self.divisible:
                value = values.get(name)
                if hasattr(value, "data_ptr"):
                    if value.data_ptr() % 16:
                        return False
                elif not isinstance(value, int) or value % 16:
                    return False
            if any(values.get(p) != 1 for p in self.unit):
                return False
        for pointer, row_stride, unit_stride, offsets, operand in self.tiles:
            tensor = values.get(pointer)
            if not hasattr(tensor, "data_ptr") or tensor.data_ptr() % 16:
                return False
            size = tensor.element_size()
            # ("fp8": an operand read K-major, as wgmma reads 8-bit floats, so those pass too)
            fp8 = operand == "fp8" and size == 1 and str(tensor.dtype).startswith("torch.float8_e") \
                and not str(tensor.dtype).endswith("fnuz")
            if (operand and size != 2 and not fp8) or (unit_stride is not None and values.get(unit_stride) != 1):
                return False
            for stride in (row_stride, *offsets):
                stride = values.get(stride) if isinstance(stride, str) else stride
                if not isinstance(stride, int) or stride <= 0 or stride * size % 16:
                    return False
        return True

    @staticmethod
    def sizes_at_least(pairs, values):
        """Every (parameter, least value) of `pairs` is an int of at least that value in `values`."""
        return all(isinstance(values.get(name), int) and values[name] >= least for name, least in pairs)

    def long_enough(self, grid, args, kwargs):
        """The launch's grid has at least `grid_at_least` programs along its axis (a grid function is called with
        the launch's arguments; one that needs an autotuned block size leaves the choice to the Gluon kernel)."""
        if self.grid_at_least is None:
            return True
        axis, least = self.grid_at_least
        if callable(grid):
            try:
                grid = grid(self.arguments(args, kwargs))
            except (KeyError, TypeError):
                return True
        sizes = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        count = sizes[axis] if axis < len(sizes) else 1
        return not isinstance(count, int) or count >= least

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            # (the grid's count first: a short launch, which runs the source kernel, skips the argument checks)
            if not self.long_enough(grid, args, kwargs) or not self.addressable(args, kwargs):
                return self.triton_kernel[grid](*args, **kwargs)
            launch_grid = grid
            if self.persistent is not None:  # one program per SM for the warp-specialised configs
                launch_grid = _persistent_grid(grid, self.persistent)
            kernel = self.gluon_kernel[launch_grid]
            if self.retile is not None:
                name, value, warps = self.retile
                if self.arguments(args, kwargs).get(name) == value:
                    kwargs = {**kwargs, "num_warps": warps}
            if not hasattr(self.gluon_kernel, "configs"):  # (an autotuned one's: per config, `_ConfigSplit`)
                kwargs = self.with_made(args, kwargs)
            try:
                return kernel(*args, **kwargs)
            except RuntimeError as exc:
                if "no allocator was set" not in str(exc):
                    raise
            triton.set_allocator(_tma_scratch)
            return kernel(*args, **kwargs)

        return launch

    def run(self, *args, grid, warmup=False, **kwargs):
        """What `triton.autotune(...)(kernel)` and `triton.heuristics(...)(kernel)` call: the same choice."""
        if not warmup:
            return self[grid](*args, **kwargs)
        chosen = self.long_enough(grid, args, kwargs) and self.addressable(args, kwargs)
        if chosen and not hasattr(self.gluon_kernel, "configs"):
            kwargs = self.with_made(args, kwargs)
        kernel = self.gluon_kernel if chosen else self.triton_kernel
        return kernel.run(*args, grid=grid, warmup=True, **kwargs)

    def with_made(self, args, kwargs):
        """The Gluon kernel's keyword arguments: the launch's (or an autotune config's), and the descriptors `made`
        makes at those values."""
        if self.made is None or not self.made.wanted():
            return kwargs
        return {**kwargs, **self.made.descriptors(self.arguments(args, kwargs))}

    def warmup(self, *args, grid, **kwargs):
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def __getattr__(self, name):  # `best_config`, `fn`, ...: the Gluon kernel's
        if name.startswith("__") or "gluon_kernel" not in self.__dict__:  # (copies made without __init__)
            raise AttributeError(name)
        return getattr(self.gluon_kernel, name)


class _HostMade:
    """TMA descriptors a Gluon kernel would make on the device (`tma.make_tensor_descriptor` under `if <name> is
    None:`), made on the host from a launch's arguments: (the kernel's parameter, the pointer parameter it addresses,
    a function of parameters returning its shape, strides and block shape) each. The layout is the kernel's: the
    default NVMMA layout of the block for the tensor's element type. A descriptor some value of which the launch does
    not give (a constexpr left at its default), or whose tensor TMA cannot address, is left to the kernel."""

    #: torch's element types and Gluon's (`gl.<name>`)
    DTYPES = {"torch.float16": "float16", "torch.bfloat16": "bfloat16", "torch.float32": "float32",
              "torch.float8_e4m3fn": "float8e4nv", "torch.float8_e5m2": "float8e5", "torch.int8": "int8",
              "torch.uint8": "uint8", "torch.int16": "int16", "torch.int32": "int32"}

    def __init__(self, made):
        self.made = [(name, base, parts, parts.__code__.co_varnames[:parts.__code__.co_argcount])
                     for name, base, parts in made]
        self.layouts = {}  # (block shape, element type) -> layout, made once

    def layout(self, block, dtype):
        from triton.experimental.gluon import language as gl

        return gl.NVMMASharedLayout.get_default_for(list(block), getattr(gl, self.DTYPES[dtype]))

    @staticmethod
    def wanted():
        """Whether to make descriptors on the host for this launch: only while a CUDA graph is being captured. Made on
        the host, a descriptor spares every program of the kernel writing and fencing its own (on an H100 the
        block-scaled fp8 GEMM's kernel ran 8% faster, 206 -> 190 us at 4096^3), but each eager launch pays for the
        descriptor objects and Triton's encoding of them, 25-60 us of host time, which made eager launches of short
        kernels slower (a 16-row decode GEMM 0.61x); a graph pays that once, at its capture."""
        import torch  # the launches' tensors are torch tensors

        try:
            return torch.cuda.is_current_stream_capturing()
        except RuntimeError:  # (a torch built without CUDA)
            return False

    def descriptors(self, values):
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        made = {}
        for name, base, parts, names in self.made:
            tensor = values.get(base)
            dtype = str(getattr(tensor, "dtype", None))
            if dtype not in self.DTYPES or not hasattr(tensor, "data_ptr") or any(n not in values for n in names):
                continue
            shape, strides, block = parts(*[values[n] for n in names])
            if not all(isinstance(v, int) and v > 0 for v in (*shape, *strides, *block)):
                continue
            key = (tuple(block), dtype)
            layout = self.layouts.get(key)
            if layout is None:
                layout = self.layouts[key] = self.layout(block, dtype)
            # (a descriptor TMA cannot address fails its checks: the kernel's own would read it so too)
            try:
                made[name] = TensorDescriptor(tensor, shape, strides, block, layout)
            except AssertionError:
                continue
        return made


class _MadeOnHost:
    """`kernel[grid](*args, **kwargs)` for a Gluon kernel that makes its TMA descriptors itself unless it is passed
    them (`tma.make_tensor_descriptor` under `if <name> is None:`) and has no other launcher: while a CUDA graph is
    captured, passes it those `made` (`_HostMade`) makes from the launch's arguments (`params`: the kernel's parameters, in order); an autotuned kernel
    gets them at each config's block sizes (its autotuner runs `_MadeOnHost.Configs`)."""

    def __init__(self, kernel, params, made):
        self.kernel = kernel
        self.params = params
        self.made = made
        if hasattr(kernel, "configs") and not isinstance(kernel.fn, _MadeOnHost.Configs):
            kernel.fn = _MadeOnHost.Configs(kernel.fn, self)

    class Configs:
        """What the autotuner of such a kernel runs: the kernel, passed the descriptors made at each config's
        values."""

        def __init__(self, fn, launcher):
            self.fn = fn  # (the autotuner reads the kernel's name and cache key through `fn`)
            self.arg_names = fn.arg_names
            self.launcher = launcher

        def run(self, *args, **kwargs):
            return self.fn.run(*args, **self.launcher.with_made(args, kwargs))

        def warmup(self, *args, **kwargs):
            return self.fn.warmup(*args, **self.launcher.with_made(args, kwargs))

    def with_made(self, args, kwargs):
        if not self.made.wanted():
            return kwargs
        return {**kwargs, **self.made.descriptors(_launch_values(self.params, args, kwargs))}

    def __getitem__(self, grid):
        kernel = self.kernel[grid]
        if hasattr(self.kernel, "configs"):  # (per config: `Configs`)
            return kernel
        return lambda *args, **kwargs: kernel(*args, **self.with_made(args, kwargs))

    def run(self, *args, grid, warmup=False, **kwargs):
        """What `triton.autotune(...)(kernel)` and `triton.heuristics(...)(kernel)` call: the same launch."""
        if not hasattr(self.kernel, "configs"):
            kwargs = self.with_made(args, kwargs)
        return self.kernel.run(*args, grid=grid, warmup=warmup, **kwargs)

    def warmup(self, *args, grid, **kwargs):
        return self.run(*args, grid=grid, warmup=True, **kwargs)

    def __getattr__(self, name):  # `best_config`, `fn`, ...: the kernel's
        if name.startswith("__") or "kernel" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.kernel, name)


def _tma_scratch(size, alignment, stream):
    """Global scratch for descriptors made in a kernel (`triton.set_allocator`)."""
    import torch  # the launches' tensors are torch tensors

    return torch.empty(size, dtype=torch.int8, device="cuda")


class _WarpPipelinedOrTriton(_TMAOrTriton):
    """`_TMAOrTriton` for a Gluon kernel with a warp-pipelined main loop: it also runs the source kernel for launches
    that ask for other than `warps` warps (or none: Triton's default is 4; two warp groups of 4 run the stages), and,
    with `small`, for launches with a tensor spanning 2 GB or more (the Gluon kernel copies through 32-bit buffer
    offsets), and for launches with a tensor of an element type in `slow_dtypes` (types the target's matrix cores
    take only converted, where the Gluon kernel measured heavier; `"name=type"`: that parameter's tensor of that
    type, a tile the kernel computes an operand from), and, with `lds` (the target's LDS bytes, the
    rings' shapes and the pointers whose element types they hold), for launches whose block sizes leave no room for
    two slots of each ring (the Gluon kernel would run its loop unpipelined), and for launches for which a test of
    `source_when` holds (a function of constexpr parameters: the Gluon kernel pipelines its loop for the other
    values only). With `no_agprs` the Gluon kernel is
    compiled with its accumulators in VGPRs only, as AMD's own Gluon GEMMs are: with both register files the compiler
    splits a large accumulator and spills."""

    def __init__(self, gluon_kernel, triton_kernel, params, tiles, warps=None, small=False, no_agprs=False,
                 slow_dtypes=(), lds=None, source_when=(), **checks):
        super().__init__(gluon_kernel, triton_kernel, params, tiles, source_when=source_when, **checks)
        self.warps = warps
        self.small = small
        self.no_agprs = no_agprs
        self.slow_dtypes = slow_dtypes
        self.lds = lds

    def config_runs_gluon(self, values):
        """An autotune config runs the Gluon kernel where that kernel pipelines its loop at the config's values, with
        8 warps (two warp groups of 4): tested where the kernel has launches its loop is not pipelined for
        (`source_when`, `lds`)."""
        if _UNPASSABLE in values:
            return False
        if not (self.source_when or self.lds is not None):
            return True
        return values.get("num_warps") == 8 and self.pipelines(values)

    def pipelines(self, values):
        """Whether the Gluon kernel pipelines its loop at these launch (or config) values: no test of `source_when`
        holds, and the fewest slots of each ring the loop pipelines with fit the LDS (two, or the third figure of
        `lds`); True where a block size is not known yet."""
        if self.source_wanted(values):
            return False
        if self.lds is not None:
            limit, rings, least = (*self.lds, 2)[:3]
            need = 0
            for shape, pointer in rings:
                sizes = [values.get(n) if isinstance(n, str) else n for n in shape]
                if not all(isinstance(n, int) for n in sizes) or not hasattr(values.get(pointer), "element_size"):
                    break  # (block sizes an autotuner picks: the kernel decides)
                elements = 1
                for n in sizes:
                    elements *= n
                need += elements * values[pointer].element_size()
            else:
                if least * need > limit:
                    return False
        return True

    def addressable(self, args, kwargs):
        if self.warps is not None and kwargs.get("num_warps") != self.warps:
            return False
        values = self.arguments(args, kwargs)
        if not hasattr(self.gluon_kernel, "configs") and not self.pipelines(values):
            return False
        for name, value in [*((None, v) for v in args[len(self.params):]), *values.items()]:  # (a descriptor's base:
            # its parts)
            if not (hasattr(value, "data_ptr") and hasattr(value, "stride")):
                continue
            dtype = str(getattr(value, "dtype", "")).rpartition(".")[2]
            if self.slow_dtypes and (dtype in self.slow_dtypes or str(name) + "=" + dtype in self.slow_dtypes):
                return False
            if self.small and value.numel():
                span = sum((n - 1) * s for n, s in zip(value.shape, value.stride())) + 1
                if span * value.element_size() >= 2**31:
                    return False
        return super().addressable(args, kwargs)

    def __getitem__(self, grid):
        launch = super().__getitem__(grid)
        if not self.no_agprs:
            return launch

        def run(*args, **kwargs):
            if self.addressable(args, kwargs):
                kwargs.setdefault("llvm_fn_attrs", (("amdgpu-agpr-alloc", "0,0"),))
            return launch(*args, **kwargs)

        return run


class _OneWaveOrTriton(_TMAOrTriton):
    """`_TMAOrTriton` for a Gluon kernel that is faster than its source only while its grid fits in one wave, at most
    one program per SM (a GEMM whose operand is computed in registers, with few tiles: there its deeper ring hides
    the copies; with more programs the source kernel, more of whose programs stay resident, is faster). An autotuned
    kernel is split per config: the autotuner runs each config on the Gluon kernel where that config's grid fits in
    one wave, else on the source kernel. A grid that cannot be evaluated runs the source kernel. `at_least` is checked
    against the launch's or the config's values with the grid (a config's block sizes are known only there)."""

    def __init__(self, gluon_kernel, triton_kernel, params, tiles, **checks):
        super().__init__(gluon_kernel, triton_kernel, params, tiles, **checks)
        self.config_at_least, self.at_least = self.at_least, ()

    def config_runs_gluon(self, values):
        """The grid (`values["grid"]`, a function of the launch's arguments and config) has at most one program per
        SM, and the `at_least` sizes hold (the wgmma's 64 rows a warpgroup), and no test of `source_when` holds."""
        if _UNPASSABLE in values or not self.sizes_at_least(self.config_at_least, values) \
                or self.source_wanted(values):
            return False
        grid = values.get("grid")
        try:
            dims = grid(values) if callable(grid) else grid
        except (KeyError, TypeError):
            return False
        programs = 1
        for d in dims if isinstance(dims, (tuple, list)) else (dims,):
            if not isinstance(d, int):
                return False
            programs *= d
        return programs <= _sm_count()

    def __getitem__(self, grid):
        launch = super().__getitem__(grid)
        if hasattr(self.gluon_kernel, "configs"):
            return launch  # (each config is split by `_ConfigSplit`, in the autotuner)

        def run(*args, **kwargs):
            values = self.arguments(args, kwargs)
            values["grid"] = grid
            if not self.config_runs_gluon(values):
                return self.triton_kernel[grid](*args, **kwargs)
            return launch(*args, **kwargs)

        return run


class _ConfigSplit:
    """What the autotuner of a launcher's Gluon kernel runs. Each of the source's own configs has a twin among the
    Gluon kernel's that runs the source kernel (the same arguments, block sizes, warps and stages), so the autotuner
    times the two kernels against each other at every key and a launch runs the faster: the Gluon kernel is never
    kept where, at the launch's sizes, the source runs faster on this GPU. A config the launcher's
    `config_runs_gluon` turns away runs the source kernel too."""

    SOURCE = "_transpile_source"  # (the twin's mark among its config values: no kernel parameter has this name)

    @staticmethod
    def install(launcher):
        """Give the autotuner of `launcher`'s Gluon kernel the source twins of its configs and make it run each
        config through the split: the source kernel's function (the autotuned one's, where the source copy is
        autotuned too) for the twins and the configs the launcher turns away."""
        import copy  # (the standard library's: configs are copied, not rebuilt, whatever Triton's `Config` takes)

        autotuner = launcher.gluon_kernel
        if isinstance(autotuner.fn, _ConfigSplit):
            return
        source = launcher.triton_kernel
        source = source.fn if hasattr(source, "configs") else source
        autotuner.fn = _ConfigSplit(autotuner.fn, source, launcher)
        twins = []
        # (the source's own configs: not those the variant added for its Gluon forms, which the source may not take)
        for config in getattr(launcher.triton_kernel, "configs", autotuner.configs):
            twin = copy.copy(config)
            twin.kwargs = {**config.kwargs, _ConfigSplit.SOURCE: True}
            twins.append(twin)
        autotuner.configs = [*autotuner.configs, *twins]
        prune = getattr(autotuner, "prune_configs", None)
        if callable(prune):
            autotuner.prune_configs = lambda *args, **kwargs: _ConfigSplit.prune(autotuner, prune, args, kwargs)

    @staticmethod
    def prune(autotuner, prune, args, kwargs):
        """The autotuner's pruning, run apart on its Gluon configs and on the source twins (unmarked, as the source's
        own configs): a pruner that builds configs anew (an `early_config_prune` that shrinks block sizes to the
        problem, GPTQ-triton's) would drop the twins' mark, and with it the source kernel's timings."""
        import copy

        configs = autotuner.configs
        marked = [c for c in configs if c.kwargs.get(_ConfigSplit.SOURCE)]
        unmarked = []
        for config in marked:
            plain = copy.copy(config)
            plain.kwargs = {k: v for k, v in config.kwargs.items() if k != _ConfigSplit.SOURCE}
            unmarked.append(plain)
        try:
            autotuner.configs = [c for c in configs if not c.kwargs.get(_ConfigSplit.SOURCE)]
            gluon = list(prune(*args, **kwargs))
            autotuner.configs = unmarked
            source = list(prune(*args, **kwargs)) if unmarked else []
        finally:
            autotuner.configs = configs
        for config in source:
            twin = copy.copy(config)
            twin.kwargs = {**config.kwargs, _ConfigSplit.SOURCE: True}
            gluon.append(twin)
        return gluon

    def __init__(self, gluon_fn, triton_fn, launcher):
        self.fn = gluon_fn  # (the autotuner reads the kernel's name and cache key through `fn`)
        self.arg_names = gluon_fn.arg_names
        self.triton_fn = triton_fn
        self.launcher = launcher

    def pick(self, args, kwargs):
        if not kwargs.get(self.SOURCE) and self.launcher.config_runs_gluon(self.launcher.arguments(args, kwargs)):
            # (with the descriptors the launcher makes on the host at this config's block sizes, if any)
            with_made = getattr(self.launcher, "with_made", None)
            return self.fn, kwargs if with_made is None else with_made(args, kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k not in ("llvm_fn_attrs", self.SOURCE)}
        if hasattr(kwargs.get("grid"), "source"):  # a persistent grid (`_persistent_grid`): the source's own
            kwargs["grid"] = kwargs["grid"].source
        return self.triton_fn, kwargs

    def run(self, *args, **kwargs):
        fn, kwargs = self.pick(args, kwargs)
        return fn.run(*args, **kwargs)

    def warmup(self, *args, **kwargs):
        fn, kwargs = self.pick(args, kwargs)
        return fn.warmup(*args, **kwargs)


@triton.jit
def _kmajor_copy(src, dst, rows, cols, src_rows, dst_rows, BLOCK: triton.language.constexpr):
    """dst[c, r] = src[r, c] for the [rows, cols] matrix `src` (its rows `src_rows` apart, columns contiguous):
    the same matrix column-major, its columns `dst_rows` apart. One [BLOCK, BLOCK] tile a program. (Written with
    `triton.language` in full: a variant's own name for it may differ.)"""
    r = triton.language.program_id(0) * BLOCK + triton.language.arange(0, BLOCK)
    c = triton.language.program_id(1) * BLOCK + triton.language.arange(0, BLOCK)
    tile = triton.language.load(src + r[:, None].to(triton.language.int64) * src_rows + c[None, :],
                                mask=(r[:, None] < rows) & (c[None, :] < cols))
    triton.language.store(dst + c[:, None].to(triton.language.int64) * dst_rows + r[None, :],
                          triton.language.trans(tile), mask=(c[:, None] < cols) & (r[None, :] < rows))


class _KMajorCopy:
    """`kernel[grid](*args, **kwargs)` for a Triton GEMM whose B operand (the `operand` argument, [K, N]) Hopper's
    wgmma reads only K-major: 8-bit elements, or 32-bit floats where the dot may use tf32. A launch whose B is a 2-D
    tensor with contiguous rows (N-contiguous; `k_stride` its row stride, `n_stride` 1), of at least `least`
    elements, whose masks' `extents` fit in it, whose `rows` (A's, M) are at least `least_rows` and, times B's
    columns, at least `least_outputs`, whose `unit` arguments are 1 and whose `aligned` (pointer, row stride) pairs
    give 16-byte aligned rows (A's: unaligned, A's loads decide the speed), runs `kmajor_kernel` on a K-major
    copy of B (`_kmajor_copy`, K rounded up to 16 elements between columns) with the two strides exchanged
    (`n_stride` None: `added`, the copy kernel's column-stride parameter). Triton compiles such a launch with B's
    tiles K-contiguous: asynchronous copies straight into the layout wgmma reads, where N-contiguous tiles go through
    registers to be transposed. With `whole` (a kernel whose reads the tool could not bound by its `extents`), only a
    B that is a whole allocation is copied (a read past its view would read past the allocation either way), and
    A's rows are its tensor's (the first `aligned` pointer). Other launches run `kernel` as given."""

    def __init__(self, kernel, kmajor_kernel, params, operand, k_stride, n_stride=None, added=None, extents=(),
                 rows=None, unit=(), aligned=(), tf32=True, whole=False, least_rows=128, least=1 << 22,
                 least_outputs=1 << 19):
        self.kernel = kernel
        self.kmajor_kernel = kmajor_kernel
        self.params = params
        self.operand = operand
        self.k_stride = k_stride
        self.n_stride = n_stride
        self.added = added
        self.extents = extents
        self.unit = unit
        self.aligned = aligned
        self.whole = whole
        self.tf32 = tf32
        self.least = least
        self.rows = rows
        self.least_rows = least_rows
        self.least_outputs = least_outputs

    def copied(self, values):
        """Whether the launch with these arguments (by parameter name) runs on a K-major copy of B."""
        b = values.get(self.operand)
        if not (hasattr(b, "stride") and hasattr(b, "element_size")) or b.dim() != 2 or b.numel() < self.least:
            return False
        size = b.element_size()
        if not (size == 1 or (size == 4 and self.tf32 and b.is_floating_point())):
            return False
        if b.stride(1) != 1 or values.get(self.k_stride) != b.stride(0) or b.stride(0) < b.shape[1]:
            return False
        if self.n_stride is not None and values.get(self.n_stride) != 1:
            return False
        if any(values.get(name) != 1 for name in self.unit):
            return False
        for pointer, stride in self.aligned:
            tensor, stride = values.get(pointer), values.get(stride) if isinstance(stride, str) else stride
            if not hasattr(tensor, "data_ptr") or tensor.data_ptr() % 16 or not isinstance(stride, int) \
                    or stride * tensor.element_size() % 16:
                return False
        for name, extent in zip(self.extents, b.shape):
            if not isinstance(values.get(name), int) or values[name] > extent:
                return False
        if self.whole and (not b.is_contiguous() or b.storage_offset()
                           or b.untyped_storage().nbytes() != b.numel() * size):
            return False
        rows = values.get(self.rows) if self.rows is not None else None
        if self.rows is None and self.aligned:  # (A's rows: its tensor's, where no parameter bounds them)
            a = values.get(self.aligned[0][0])
            rows = a.shape[0] if hasattr(a, "shape") and len(a.shape) == 2 else None
        if not isinstance(rows, int) or rows < self.least_rows or rows * b.shape[1] < self.least_outputs:
            return False
        return True

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            values = dict(zip(self.params, args))
            values.update(kwargs)
            if not self.copied(values):
                return self.kernel[grid](*args, **kwargs)
            import torch  # the launches' tensors are torch tensors

            b = values[self.operand]
            rows, cols = b.shape
            columns = (rows + 15) // 16 * 16  # (16-element aligned columns: Triton's loads of them vectorise)
            copy = torch.empty_strided((rows, cols), (1, columns), dtype=b.dtype, device=b.device)
            _kmajor_copy[(triton.cdiv(rows, 64), triton.cdiv(cols, 64))](b, copy, rows, cols, b.stride(0), columns,
                                                                          BLOCK=64)
            changed = {self.operand: copy, self.k_stride: 1, self.n_stride or self.added: columns}
            args = tuple(changed.get(name, value) for name, value in zip(self.params, args))
            kwargs = {name: changed.get(name, value) for name, value in kwargs.items()}
            kwargs.update({name: value for name, value in changed.items()
                           if name not in self.params[:len(args)] and name not in kwargs})
            return self.kmajor_kernel[grid](*args, **kwargs)

        return launch

    def __getattr__(self, name):  # `best_config`, `fn`, ...: the kernel's
        if name.startswith("__") or "kernel" not in self.__dict__:  # (copies made without __init__)
            raise AttributeError(name)
        return getattr(self.kernel, name)
