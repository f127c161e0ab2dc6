"""The helpers every target family carries (`transpile.helpers`): their code lives in `transpile/helpers/common.py`
and `transpile/helpers/launchers.py`; these are the `Helper`s the target tables name them by."""

from transpile.helpers import helper

#: Gluon helpers of every target (`_blocked_layout` is the target's: it takes the warp size)
COMMON = {
    "acc_dtype": helper("common", "_acc_dtype"),
    "cta_barrier": helper("common", "_cta_barrier"),
    "expand_scalar": helper("common", "_expand_scalar"),
    "desc_load": helper("common", "_desc_load"),
    "desc_store": helper("common", "_desc_store"),
    "run_time_aligned": helper("common", "_aligned_ptr", "_elements_in_16_bytes", "_aligned_int"),
}

#: Host launchers: a kernel without a pipelined loop (`transpile.analysis.launch_alignment`), a persistent kernel's
#: grid, a kernel reading its tiles through TMA descriptors, an AMD kernel with a warp-pipelined loop, an sm90
#: GEMM of 8-bit or tf32 operands run on a K-major copy of B
LAUNCHERS = {
    "launch_values": helper("launchers", "_UNPASSABLE", "_launch_values"),
    "host_descriptors": helper("launchers", "_DescriptorParts", "_HostDescriptors"),
    "aligned_or_triton": helper("launchers", "_AlignedOrTriton"),
    "persistent_grid": helper("launchers", "_SM_COUNTS", "_sm_count", "_persistent_grid"),
    "tma_scratch": helper("launchers", "_tma_scratch"),
    "host_made": helper("launchers", "_HostMade"),
    "made_on_host": helper("launchers", "_MadeOnHost"),
    "tma_or_triton": helper("launchers", "_TMAOrTriton"),
    "warp_pipelined_or_triton": helper("launchers", "_WarpPipelinedOrTriton"),
    "one_wave_or_triton": helper("launchers", "_OneWaveOrTriton"),
    "config_split": helper("launchers", "_ConfigSplit"),
    "kmajor_copy": helper("launchers", "_kmajor_copy", "_KMajorCopy"),
}
