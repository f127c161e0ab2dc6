"""Machine-code figures of a compiled kernel: how a variant is judged against its source without the GPU.

AMD (gfx942, gfx950, gfx1250): from the `amdgcn` assembly, the register budget (VGPRs, AGPRs, spills, scratch),
the LDS bytes and the occupancy the assembler reports, and the instruction mix of the *hot loop*: the loop with the
most MFMA/WMMA instructions. Its measure of overhead is the number of non-MFMA instructions per 16x16x32 MFMA of work
(`other_per_mfma_eq`): a loop built from 32x32x16 instructions and one built from 16x16x32 ones compare, and a loop
with more MMA work per iteration may spend more instructions on it.

sm90: from the PTX, the counts of the whole kernel's `wgmma`/`mma` instructions, cp.async and TMA copies, mbarrier
operations and CTA barriers, and the registers and spills ptxas reports where Triton ran it.

Pure text processing: nothing here imports Triton.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

# The assembler's comments at the end of a function (`; NumVgprs: 98`), and the kernel descriptor's fields.
_AMD_META = (("vgprs", r"; NumVgprs:\s*(\d+)"), ("agprs", r"; NumAgprs:\s*(\d+)"),
             ("total_vgprs", r"; TotalNumVgprs:\s*(\d+)"), ("scratch_bytes", r"; ScratchSize:\s*(\d+)"),
             ("occupancy", r"; Occupancy:\s*(\d+)"), ("vgpr_spills", r"\.vgpr_spill_count:\s*(\d+)"),
             ("sgpr_spills", r"\.sgpr_spill_count:\s*(\d+)"))
_MMA = re.compile(r"v_(?:mfma|wmma|smfmac)\w*?_(\d+)x(\d+)x(\d+)")
_MMA_OP = re.compile(r"v_mfma|v_wmma|v_smfmac")
_BRANCH = re.compile(r"s_cbranch_\w+\s+(\.LBB\d+_\d+)|s_branch\s+(\.LBB\d+_\d+)")
_LABEL = re.compile(r"^(\.LBB\d+_\d+):")
_IN_LOOP = re.compile(r"in Loop: Header=(BB\d+_\d+)\b")
UNIT_MACS = 16 * 16 * 32  # one 16x16x32 MFMA


@dataclass
class HotLoop:
    """Instruction counts of one loop body (one iteration, as the assembler laid it out)."""

    instructions: int = 0
    mma: int = 0  # MFMA / WMMA instructions
    mma_eq: float = 0.0  # their work in 16x16x32 MFMAs
    lds_direct: int = 0  # direct-to-LDS copies (`buffer_load_dword* ... lds`, `global_load_lds_*`,
    # gfx1250's `global_load_async_to_lds_*`)
    global_loads: int = 0  # buffer/global loads into registers
    tensor_copies: int = 0  # TDM (gfx1250 `tensor_load_to_lds`)
    ds_reads: int = 0
    ds_writes: int = 0
    waits: int = 0  # s_waitcnt (and gfx1250's s_wait_*)
    barriers: int = 0
    setprio: int = 0
    valu: int = 0
    salu: int = 0
    scratch: int = 0  # scratch (spill) loads and stores
    accvgpr_moves: int = 0

    @property
    def other_per_mma_eq(self) -> float | None:
        """Non-MFMA instructions per 16x16x32 MFMA of work: the loop's overhead (lower is better)."""
        return round((self.instructions - self.mma) / self.mma_eq, 2) if self.mma_eq else None


@dataclass
class AmdFigures:
    vgprs: int | None = None
    agprs: int | None = None
    total_vgprs: int | None = None
    vgpr_spills: int | None = None
    sgpr_spills: int | None = None
    scratch_bytes: int | None = None
    occupancy: int | None = None
    lds_bytes: int | None = None
    loop: HotLoop | None = None  # None: no loop issues MFMA/WMMA instructions

    @property
    def spills(self) -> int:
        return (self.vgpr_spills or 0) + (self.sgpr_spills or 0)

    def as_dict(self) -> dict[str, object]:
        data = {k: v for k, v in asdict(self).items() if k != "loop"}
        data["hot_loop"] = None if self.loop is None else {**asdict(self.loop),
                                                            "other_per_mma_eq": self.loop.other_per_mma_eq}
        return data


def amd_figures(asm: str, lds_bytes: int | None = None) -> AmdFigures:
    """The figures of one kernel's `amdgcn` assembly (`lds_bytes`: the compiled kernel's shared-memory size)."""
    figures = AmdFigures(lds_bytes=lds_bytes)
    for name, pattern in _AMD_META:
        match = re.search(pattern, asm)
        if match:
            setattr(figures, name, int(match.group(1)))
    body = hot_loop(asm)
    figures.loop = loop_mix(body) if body else None
    return figures


def hot_loop(asm: str) -> list[str]:
    """The instructions of the loop with the most MFMA/WMMA instructions (ties: the longest). A loop runs from a
    label to the last backward branch to it. LLVM marks loop headers (`; =>This Inner Loop Header`): innermost
    headers are taken first, then any header, then any label, so that a backward jump into a block two paths share
    (a layout of the control flow, not a loop) is not taken for a loop."""
    lines = asm.splitlines()
    # (a rotated loop's latch may jump back to a block of the loop laid out before its header, `.LBB0_25: ; in Loop:
    # Header=BB0_26`: such a block counts as its loop's header would)
    inner = {m.group(1) for i, line in enumerate(lines) if (m := _LABEL.match(line))
             and any("Inner Loop Header" in x for x in _marks(lines, i))}
    for kinds in (("Inner Loop Header",), ("Loop Header",), None):
        labels: dict[str, int] = {}
        best = (0, 0, 0)
        for i, line in enumerate(lines):
            match = _LABEL.match(line)
            marks = "".join(_marks(lines, i)) if match else line
            member = _IN_LOOP.search(marks) if match else None
            if match and (kinds is None or any(k in marks for k in kinds) or (
                    kinds == ("Inner Loop Header",) and member is not None and f".L{member.group(1)}" in inner)):
                labels[match.group(1)] = i
            match = _BRANCH.search(line)
            if match:
                label = match.group(1) or match.group(2)
                if label in labels and labels[label] < i:
                    body = _instructions(lines[labels[label]:i + 1])
                    score = sum(1 for x in body if _MMA_OP.match(x)) * 100000 + len(body)
                    if score >= 100000 and score > best[0]:
                        best = (score, labels[label], i)
        if best[0]:
            return _instructions(lines[best[1]:best[2] + 1])
    return []


def _marks(lines: list[str], i: int) -> list[str]:
    """The label line `i` with the comment lines that continue its marks below it."""
    j = i + 1
    while j < len(lines) and lines[j].strip().startswith(";"):
        j += 1
    return lines[i:j]


def _instructions(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        text = line.split(";", 1)[0].strip()
        if text and not text.startswith((".", "//")) and not text.endswith(":"):
            out.append(text)
    return out


def _lds_direct(instruction: str) -> bool:
    tokens = re.split(r"[\s,]+", instruction)
    op = tokens[0]
    # (gfx1250's asynchronous copies: `global_load_async_to_lds_b128`)
    return bool(re.match(r"(global|buffer)_load_(async_to_)?lds", op)) or (op.startswith(("buffer_load", "global_load"))
                                                                and "lds" in tokens[1:])


def loop_mix(body: list[str]) -> HotLoop:
    """Count one loop body's instructions by kind."""
    mix = HotLoop(instructions=len(body))
    macs = 0
    for instruction in body:
        op = instruction.split()[0]
        match = _MMA.match(op)
        if _MMA_OP.match(op):
            mix.mma += 1
            if match:
                macs += int(match.group(1)) * int(match.group(2)) * int(match.group(3))
            continue
        if _lds_direct(instruction):
            mix.lds_direct += 1
        elif op.startswith(("buffer_load", "global_load")):
            mix.global_loads += 1
        elif op.startswith("tensor_load_to_lds"):
            mix.tensor_copies += 1
        elif op.startswith(("ds_read", "ds_load")):
            mix.ds_reads += 1
        elif op.startswith(("ds_write", "ds_store")):
            mix.ds_writes += 1
        elif op.startswith(("scratch_load", "scratch_store")):
            mix.scratch += 1
        if op.startswith("v_accvgpr_"):
            mix.accvgpr_moves += 1
        if op.startswith("s_waitcnt") or re.match(r"s_wait_(loadcnt|dscnt|tensorcnt|storecnt|kmcnt|asynccnt)", op):
            mix.waits += 1
        elif op.startswith("s_barrier"):
            mix.barriers += 1
        elif op.startswith("s_setprio"):
            mix.setprio += 1
        elif op.startswith("v_"):
            mix.valu += 1
        elif op.startswith("s_") and not op.startswith(("s_cbranch", "s_branch", "s_nop")):
            mix.salu += 1
    mix.mma_eq = round(macs / UNIT_MACS, 2)
    return mix


@dataclass
class PtxFigures:
    """Whole-kernel counts from PTX (sm90), and ptxas's registers and spills where the compile ran it."""

    wgmma: int = 0
    wgmma_waits: int = 0
    mma_sync: int = 0
    cp_async: int = 0
    tma_loads: int = 0
    tma_stores: int = 0
    mbarrier_waits: int = 0
    barriers: int = 0
    registers: int | None = None
    spills: int | None = None
    lds_bytes: int | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data.pop("counts")
        return data


def ptx_figures(ptx: str, registers: int | None = None, spills: int | None = None,
                lds_bytes: int | None = None) -> PtxFigures:
    ops = []
    for line in ptx.splitlines():
        tokens = line.strip().split()
        if not tokens or tokens[0].startswith(("//", ".", "{", "}", "$")):
            continue
        if tokens[0].startswith("@") and len(tokens) > 1:  # a predicated instruction: `@%p1 cp.async...`
            tokens = tokens[1:]
        ops.append(tokens[0])

    def count(prefix: str) -> int:
        return sum(1 for op in ops if op.startswith(prefix))

    return PtxFigures(wgmma=count("wgmma.mma_async"), wgmma_waits=count("wgmma.wait_group"),
                      mma_sync=count("mma.sync"), cp_async=count("cp.async.ca") + count("cp.async.cg"),
                      tma_loads=count("cp.async.bulk.tensor.") - _tma_stores(ops),
                      tma_stores=_tma_stores(ops), mbarrier_waits=count("mbarrier.try_wait"),
                      barriers=count("bar.sync") + count("barrier.sync"), registers=registers, spills=spills,
                      lds_bytes=lds_bytes)


def _tma_stores(ops: list[str]) -> int:
    return sum(1 for op in ops if op.startswith("cp.async.bulk.tensor.") and ".global.shared" in op)
