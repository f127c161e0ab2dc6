"""`transpile explain --timeline`: the timeline of every pipelined loop, drawn from the schedule its rule emitted it
from (AMD: the warp-pipeline stage plan; sm90: the `Sm90Ring` of the TMA, warp-specialised TMA, cp.async and
attention rings)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transpile.cli.app import tools
from transpile.engine import translate_source
from transpile.rules.hopper_pipeline import EXAMPLE as TMA_EXAMPLE
from transpile.rules.hopper_schedule import MMA_IN_FLIGHT, Sm90Ring
from transpile.targets import get_target
from transpile.timeline import Panel, file_panels, render_svg, render_text, result_panels

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SVG = "{http://www.w3.org/2000/svg}"


def _texts(panels: list[Panel]) -> list[str]:
    root = ET.fromstring(render_svg(panels))  # well-formed XML
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def _panels(fixture: str, target: str, gluon_always: bool = False, tma_tiles: bool = True) -> list[Panel]:
    return file_panels((FIXTURES / f"{fixture}.py").read_text(), f"{fixture}.py", get_target(target), gluon_always,
                       tma_tiles)


def _cells(panel: Panel, label: str) -> dict[int, object]:
    return {c.iteration: c for c in panel.cells if c.label == label}


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
@pytest.mark.parametrize("fixture, stages", [("matmul_grouped", ["mma", "mem"]),
                                             ("attention_fwd", ["mma", "mem"])])
def test_svg_names_every_stage(fixture: str, stages: list[str], target: str) -> None:
    # (the forms the profitability policy keeps as Triton by default are drawn with --gluon-always)
    panels = _panels(fixture, target, gluon_always=True)
    assert len(panels) == 1
    texts = _texts(panels)
    assert "warp group 0" in texts and "warp group 1" in texts
    for stage in stages:
        # every stage of every iteration on both warp groups
        for it in range(3):
            assert sum(t == f"{stage} it {it}" for t in texts) == 2, (stage, it)
    assert any("fills slot" in t for t in texts)


def test_second_group_runs_one_stage_behind() -> None:
    panel = _panels("matmul_grouped", "gfx950")[0]
    by_step = {(c.group, c.step): (c.label, c.iteration) for c in panel.cells}
    assert by_step[(0, 0)] == ("mma", 0) and (1, 0) not in by_step
    assert by_step[(1, 1)] == ("mma", 0) and by_step[(0, 1)] == ("mem", 0)
    # the memory stage of iteration `it` reads the operands of `it + 1` and fills the slot `it` was read from with
    # the tiles of `it + distance` (= `it + slots`)
    notes = {c.iteration: c.note for c in panel.cells if c.label == "mem" and c.group == 0}
    assert notes[0] == "reads slot 1 (it 1); fills slot 0 (it 3)"
    assert notes[2] == "reads slot 0 (it 3); fills slot 2 (it 5)"
    waits = {c.wait for c in panel.cells if c.label == "mem"}
    assert waits == {"async_copy.wait_group(1)"}  # before each iteration's MMA: one copy group left in flight
    lines = render_text(panel)
    assert lines[2].startswith("warp group 0") and "mma[it 0]" in lines[2]


def test_sm90_gemm_both_forms_named_with_their_configs() -> None:
    """matmul_descriptor on sm90: a TMA ring of 3 slots whose warp-specialised form only the config the tool added
    (128x256, 8 warps) compiles; the kernel's own configs compile the single-partition form."""
    ws, plain = _panels("matmul_descriptor", "sm90")
    assert "warp-specialised form" in ws.title and "single-partition form" in plain.title
    assert any("config 2 (BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8; added" in n for n in ws.notes)
    assert not any("config 0" in n for n in ws.notes)
    assert any("config 0 (BLOCK_M=128, BLOCK_N=128" in n and "config 1 (BLOCK_M=64" in n for n in plain.notes)
    assert any("a_desc.block_type.shape[0] * b_desc.block_type.shape[1] >= 32768 and gl.num_warps() >= 8" in n
               for n in ws.notes)
    texts = _texts([ws, plain])
    # partitions and slots
    assert ws.rows[:2] == ("loader (1 warp)", "consumer (8 warps)") and ws.rows[2:] == ("slot 0", "slot 1", "slot 2")
    assert plain.rows == ("kernel (4/8 warps, one partition)", "slot 0", "slot 1", "slot 2")
    # the persistent form: the kernel's own partitions walk the tiles (its launches are in the fixture)
    assert any("`_matmul_bias_act_kernel_tile_loader` (1 warp, 40 registers)" in n
               and "`_matmul_bias_act_kernel_tile_consumer`" in n for n in ws.notes)
    assert any(n.startswith("persistent: both partitions walk the program's tiles") for n in ws.notes)
    for it in range(3):
        for label in ("load", "mma", "mma_wait", "TMA", "wgmma"):
            assert f"{label} it {it}" in texts, (label, it)
        assert "prologue it 0" in texts and f"refill it {it}" in texts
    # waits, expect-tx, arrives
    for text in ("mbarrier.wait(empty[0], 1) (passes: fresh)", "mbarrier.wait(empty[0], 0)",
                 "mbarrier.wait(ready[1], 0)", "warpgroup_mma_wait(1); CTA barrier",
                 "warpgroup_mma_wait(1); CTA barrier if > 4 warps", "expect ready[0]; TMA it 3 -> slot 0",
                 "wgmma it 0 done; arrive empty[0]", "expect ready[2]; TMA it 2 -> slot 2",
                 "wgmma it 0 done: slot 0 free", "empty[0]: slot 0 read by wgmma it 0"):
        assert text in texts, text


def test_sm90_warp_specialised_schedule_follows_the_barriers() -> None:
    """The loader runs ahead until every slot is full, waits on `empty` until the consumer's wait(1) retires the
    wgmma that read the slot, and the consumer's wgmma of an iteration waits for that iteration's copy."""
    ws = _panels("matmul_descriptor", "sm90")[0]
    loads, mmas, retires = _cells(ws, "load"), _cells(ws, "mma"), _cells(ws, "mma_wait")
    assert [loads[j].step for j in range(3)] == [0, 1, 2]  # a fresh ring: no wait
    for it in range(3):
        assert mmas[it].step > loads[it].step  # ready[slot] after the copy
        assert retires[it].step == mmas[it].step + 1
    # iteration 3 reuses slot 0: its copy waits for the wait(1) of iteration 1, which retires wgmma 0
    assert loads[3].step > retires[1].step and loads[3].note == "expect ready[0]; TMA it 3 -> slot 0"
    stall = next(c for c in ws.cells if c.kind == "stall" and c.group == 0 and c.iteration == 3)
    assert stall.step == loads[2].step + 1 and stall.step + stall.span == loads[3].step
    assert ("free", retires[1].step, 1, loads[3].step, 0) in ws.arrows  # arrive empty[0] -> the loader's wait
    assert ("landed", loads[1].step, 0, mmas[1].step, 1) in ws.arrows
    slot0 = sorted((c.step, c.label, c.iteration, c.span) for c in ws.cells if c.group == 2)
    assert slot0 == [(0, "TMA", 0, 1), (1, "wgmma", 0, retires[1].step), (loads[3].step, "TMA", 3, 2)]


def test_sm90_plain_ring_refills_the_slot_the_retired_wgmma_read() -> None:
    plain = _panels("matmul_descriptor", "sm90")[1]
    refills, retires = _cells(plain, "refill"), _cells(plain, "mma_wait")
    for it in range(3):
        assert refills[it].note == f"expect ready[{(it + 2) % 3}]; TMA it {it + 2} -> slot {(it + 2) % 3}"
        assert refills[it].step == retires[it].step + 1
    assert retires[1].note == "wgmma it 0 done: slot 0 free" and retires[0].note == "no earlier wgmma"
    lines = render_text(plain)
    assert any(line.startswith("  step 1 kernel mma[it 0]: [mbarrier.wait(ready[0], 0)] wgmma reads slot 0")
               for line in lines)


def test_sm90_attention_ring() -> None:
    """The K/V cp.async ring of an attention kernel on sm90 (emitted for its causal launches, and for every launch
    with --gluon-always: the same ring): QK^T and the previous PV issued together, the softmax between wait(1) and
    wait(0)."""
    (panel,) = _panels("attention_fwd", "sm90")
    assert [p.title for p in _panels("attention_fwd", "sm90", gluon_always=True)] == [panel.title]
    assert "flash-attention K/V cp.async ring of 3 slots" in panel.title
    assert panel.rows == ("kernel (4/8 warps)", "slot 0 (K, V)", "slot 1 (K, V)", "slot 2 (K, V)")
    texts = _texts([panel])
    for it in range(3):
        for label in ("mma", "softmax", "rescale", "refill", "cp.async", "wgmma"):
            assert f"{label} it {it}" in texts, (label, it)
    for text in ("async_copy.wait_group(3); CTA barrier", "warpgroup_mma_wait(1)", "warpgroup_mma_wait(0)",
                 "QK^T: K slot 1; PV it 0: V slot 0", "K,V it 3 -> slot 0; 2 groups", "zeros it -1",
                 "V of it -1 (zero P)", "CTA barrier if > 4 warps"):
        assert text in texts, text
    # V of iteration it is read until the wait(0) of iteration it + 1, then its slot is refilled
    rescales, refills = _cells(panel, "rescale"), _cells(panel, "refill")
    read0 = next(c for c in panel.cells if c.kind == "read" and c.iteration == 0)
    assert read0.step + read0.span - 1 == rescales[1].step and refills[1].note.endswith("-> slot 0; 2 groups")


def test_sm90_cp_async_ring() -> None:
    # The pointer ring, as a pointer GEMM the TMA rewrite refuses gets it (by default matmul_grouped is read through
    # TMA descriptors: its panels are the warp-specialised TMA ring's).
    assert _panels("matmul_grouped", "sm90", tma_tiles=False) == []  # kept as Triton: the ring measured slower
    assert "TMA ring" in _panels("matmul_grouped", "sm90")[0].title
    (panel,) = _panels("matmul_grouped", "sm90", gluon_always=True, tma_tiles=False)
    assert "cp.async ring of 3 slots" in panel.title
    assert any("ring depth per config: config 0: 3, config 1: 4; drawn with 3" in n for n in panel.notes)
    texts = _texts([panel])
    for text in ("async_copy.wait_group(1); CTA barrier", "cp.async it 2 -> slot 2; commit_group", "cp.async it 0",
                 "one commit group"):
        assert text in texts, text


@pytest.mark.parametrize("depth", [2, 3, 4, 5])
def test_sm90_ring_depth_is_the_emitted_one(depth: int) -> None:
    """A kernel without autotune configs: the depth is the loop's num_stages, and both forms are drawn (the launch's
    block sizes and warps choose)."""
    source = TMA_EXAMPLE.replace("num_stages=4", f"num_stages={depth}")
    result = translate_source(source, "k.py", get_target("sm90"))
    assert f"NUM_STAGES: gl.constexpr = {depth}" in result.text
    ws, plain = result_panels(result, "k.py")
    for panel in (ws, plain):
        assert panel.rows[-depth:] == tuple(f"slot {s}" for s in range(depth)) and f"slot {depth}" not in panel.rows
        assert any("no autotune configs" in n and "both are drawn" in n for n in panel.notes)
    loads = _cells(ws, "load")
    assert all("(passes: fresh)" in loads[j].wait for j in range(depth) if j in loads)
    assert [c.note for c in plain.cells if c.label == "prologue"] == [
        f"TMA it {', '.join(map(str, range(depth - 1)))} -> slots {', '.join(map(str, range(depth - 1)))}"]


def test_sm90_schedules_are_what_the_variant_says() -> None:
    """The recorded schedule's facts are in the emitted code: ring depth, wgmmas in flight, the warp-specialised
    test, its loader's warps and registers, the cp.async waits."""
    checked = set()
    for fixture, gluon_always in [("matmul_descriptor", False), ("suite_desc_persistent", False),
                                  ("matmul_grouped", True), ("attention_fwd", True)]:
        result = translate_source((FIXTURES / f"{fixture}.py").read_text(), f"{fixture}.py", get_target("sm90"),
                                  gluon_always=gluon_always, tma_tiles=fixture != "matmul_grouped")
        rings = [s for o in result.functions for s in o.schedules]
        assert rings and all(isinstance(r, Sm90Ring) for r in rings)
        for ring in rings:
            checked.add(ring.form)
            assert f"NUM_STAGES: gl.constexpr = {ring.depth.text}\n" in result.text
            assert f"warpgroup_mma_wait({ring.mma_in_flight}, deps=[" in result.text
            if ring.wait_groups is not None:
                assert f"async_copy.wait_group({ring.wait_groups.text('NUM_STAGES')})\n" in result.text
            if ring.ws is not None and ring.ws.persistent:  # the kernel's own partitions, chosen at its top
                assert f" and {ring.ws.condition}:\n" in result.text
                assert f"], [{ring.ws.warps}], [{ring.ws.registers}])\n" in result.text
                assert f"def {ring.ws.loader}(" in result.text and f"def {ring.ws.consumer}(" in result.text
            elif ring.ws is not None:
                assert f"if {ring.ws.condition}:\n" in result.text
                assert f"], [{ring.ws.warps}], [{ring.ws.registers}])[0]\n" in result.text
                assert f"def {ring.ws.loader}(" in result.text
    assert checked == {"tma", "cp.async", "attention"}
    # The warp-specialised consumer is a fixed snippet: it leaves as many wgmmas in flight as the schedule says.
    assert f"warpgroup_mma_wait({MMA_IN_FLIGHT}, deps=[acc])" in get_target("sm90").snippet("ws_wgmma_consumer")


# Per sm90 form: the blocks one iteration of a partition runs in the timeline, and the calls the emitted code makes
# for them, in order, between a start and an end mark of the variant (the kernel's loop, the loader's definition or
# the consumer snippet).
ORDERS = [
    # the persistent form (matmul_descriptor's launches are in its file): the per-tile ring of the other configs,
    # the kernel's own loader and consumer partitions
    ("matmul_descriptor", False, 1, 0, ["mma", "mma_wait", "refill"],
     ("                # Prologue", "acc = warpgroup_mma_wait(0, deps=[acc])"),
     ["for it in range(num_iters):", "mbarrier.wait(ready.index(slot)", "warpgroup_mma(a_smem.index(slot)",
      "warpgroup_mma_wait(1, ", "_cta_barrier()", "mbarrier.expect(ready.index(next_slot)", "_tma_async_load(a_desc"]),
    ("matmul_descriptor", False, 0, 0, ["load"], ("def _matmul_bias_act_kernel_tile_loader(", "\n\n\n"),
     ["for it in range(num_iters):", "mbarrier.wait(empty.index(slot)", "mbarrier.expect(ready.index(slot)",
      "_tma_async_load(a_desc"]),
    ("matmul_descriptor", False, 0, 1, ["mma", "mma_wait"],
     ("def _matmul_bias_act_kernel_tile_consumer(", "warpgroup_mma_wait(0"),
     ["for it in range(num_iters):", "mbarrier.wait(ready.index(slot)", "warpgroup_mma(a_ring.index(slot)",
      "warpgroup_mma_wait(1, ", "_cta_barrier()",
      "mbarrier.arrive(empty.index((n_done + it + NUM_STAGES - 1) % NUM_STAGES)"]),
    # the non-persistent warp-specialised form (suite_desc_persistent: its main loop is inside its own tile loop)
    ("suite_desc_persistent", False, 0, 0, ["load"], ("def _persistent_desc_kernel_tma_loader(", "\n\n\n"),
     ["for it in range(num_iters):", "mbarrier.wait(empty.index(slot)", "mbarrier.expect(ready.index(slot)",
      "_tma_async_load(a_desc"]),
    ("suite_desc_persistent", False, 0, 1, ["mma", "mma_wait"], ("def _ws_wgmma_consumer(", "warpgroup_mma_wait(0"),
     ["for it in range(num_iters):", "mbarrier.wait(ready.index(slot)", "warpgroup_mma(a, b", "warpgroup_mma_wait(1, ",
      "_cta_barrier()", "mbarrier.arrive(empty.index((it + NUM_STAGES - 1) % NUM_STAGES)"]),
    ("matmul_grouped", True, 0, 0, ["mma", "mma_wait", "refill"], ("filled by cp.async", "warpgroup_mma_wait(0"),
     ["for it in range(num_iters):", "async_copy.wait_group(NUM_STAGES - 2)", "_cta_barrier()",
      "warpgroup_mma(a_smem.index(slot)", "warpgroup_mma_wait(1, ", "_cta_barrier()", "_cp_async_load(a_smem",
      "async_copy.commit_group()"]),
    ("attention_fwd", True, 0, 0, ["mma", "softmax", "rescale", "refill"],
     ("flash-attention shape", "async_copy.wait_group(0)"),
     ["for it in range(num_iters):", "async_copy.wait_group(2 * NUM_STAGES - 3)", "_cta_barrier()",
      "qk = warpgroup_mma(q_smem", "acc = warpgroup_mma(p_prev", "warpgroup_mma_wait(1, ", "warpgroup_mma_wait(0, ",
      "_cta_barrier()", "_cp_async_load(k_smem.index(prev_slot)", "async_copy.commit_group()"]),
]


@pytest.mark.parametrize("fixture, gluon_always, panel, row, blocks, marks, calls", ORDERS)
def test_sm90_blocks_run_in_the_emitted_order(fixture: str, gluon_always: bool, panel: int, row: int,
                                             blocks: list[str], marks: tuple[str, str], calls: list[str]) -> None:
    result = translate_source((FIXTURES / f"{fixture}.py").read_text(), f"{fixture}.py", get_target("sm90"),
                              gluon_always=gluon_always, tma_tiles=fixture != "matmul_grouped")  # (its cp.async ring)
    drawn = result_panels(result, fixture)[panel]
    sequence = [c.label for c in sorted(drawn.cells, key=lambda c: c.step) if c.group == row and c.kind == "stage"
                and c.label != "prologue"]
    assert sequence[:3 * len(blocks)] == blocks * 3  # (the loader runs ahead: more of its blocks fit)
    at = result.text.index(marks[0])
    end = result.text.index(marks[1], at)
    for call in calls:
        found = result.text.find(call, at + 1, end)
        assert found > at, (call, result.text[at:end])
        at = found


def _layout_problems(svg: str) -> list[str]:
    """What is wrong with the picture's geometry: wider than 1,600 px, a box or a text (its width estimated from the
    monospace font's advance, 0.6 of its size) past the right edge, a row's name (x=10, size 12) under a box."""
    root = ET.fromstring(svg)
    width = float(root.get("width"))
    problems = [f"{width:.0f} px wide"] if width > 1600 else []
    boxes = [tuple(float(r.get(k)) for k in ("x", "y", "width", "height")) for r in root.iter(f"{SVG}rect")
             if r.get("width") != "100%"]
    for x, y, w, h in boxes:
        if x + w > width:
            problems.append(f"a box at x={x:.0f} ends at {x + w:.0f}")
    for t in root.iter(f"{SVG}text"):
        x, y, size, text = float(t.get("x")), float(t.get("y")), float(t.get("font-size")), t.text or ""
        right = x + 0.6 * size * len(text)
        if right > width:
            problems.append(f"{text!r} ends at {right:.0f}")
        if x == 10 and size == 12:  # the name of a row: clear of every box on its line
            top, bottom = y - size, y + 0.25 * size
            for bx, by, bw, bh in boxes:
                if bx < right and x < bx + bw and by < bottom and top < by + bh:
                    problems.append(f"row name {text!r} (x 10-{right:.0f}) under the box at x={bx:.0f}, y={by:.0f}")
    return problems


def _drawn_loops(panels: list[Panel]) -> set[tuple[int, int]]:
    for panel in panels:
        assert _layout_problems(render_svg([panel])) == [], panel.title
        assert render_text(panel)
    return {(p.line, p.copy) for p in panels}  # (a loop unswitched on a flag: one copy per value, on its line)


def test_every_pipelined_loop_has_a_timeline(fixture_name: str, target_name: str, translated) -> None:
    """Every loop a pipeline rule rewrote in a fixture's variant (the goldens' "pipelined by triton-transpile"
    comments) is drawn, and nothing else."""
    result = translated(fixture_name, target_name)
    loops = result.text.count("pipelined by triton-transpile")
    assert len(_drawn_loops(result_panels(result, fixture_name))) == loops


def test_every_sm90_ring_with_gluon_always_has_a_timeline(fixture_name: str) -> None:
    """The same for the sm90 rings emitted only with --gluon-always (cp.async GEMMs, attention)."""
    text = (FIXTURES / f"{fixture_name}.py").read_text()
    result = translate_source(text, fixture_name, get_target("sm90"), gluon_always=True)
    loops = result.text.count("pipelined by triton-transpile")
    assert len(_drawn_loops(result_panels(result, fixture_name))) == loops


@pytest.mark.parametrize("fixture, target, gluon_always", [
    ("matmul_grouped", "gfx942", False), ("matmul_grouped", "gfx950", False), ("matmul_grouped", "gfx1250", False),
    ("attention_fwd", "gfx950", True), ("matmul_descriptor", "sm90", False), ("attention_fwd", "sm90", False),
])
def test_svg_fits_and_names_its_rows_clear_of_the_boxes(fixture: str, target: str, gluon_always: bool) -> None:
    """At most 1,600 px wide (the sm90 attention ring's 13 steps were 4,001 px: longer timelines are drawn in bands
    of steps), and no row's name ("warp group 0") hidden under the first box."""
    panels = _panels(fixture, target, gluon_always)
    svg = render_svg(panels)
    assert _layout_problems(svg) == []
    texts = _texts(panels)
    for panel in panels:
        assert all(f"step {s}" in texts for s in range(panel.steps))


def test_svg_bands_cut_long_blocks() -> None:
    """A block that runs past the end of a band goes on in the next, after "...": the first band's boxes and the
    continued ones cover the same steps as the block."""
    (panel,) = _panels("attention_fwd", "sm90")
    root = ET.fromstring(render_svg([panel]))
    texts = [t.text for t in root.iter(f"{SVG}text")]
    steps = [t for t in texts if t.startswith("step ")]
    assert steps == [f"step {s}" for s in range(panel.steps)]
    assert texts.count(panel.rows[0]) > 1  # the rows named again in each band
    long = [c for c in panel.cells if c.span > 1]
    assert any(f"... {c.label} it {c.iteration}" in texts for c in long)
    assert float(root.get("width")) <= 1600


def test_no_timeline_for_loops_without_pipeline() -> None:
    assert _panels("softmax", "gfx942") == [] and _panels("softmax", "sm90") == []


def test_cli_writes_svg(tmp_path: Path) -> None:
    out = tmp_path / "t.svg"
    result = CliRunner().invoke(tools, ["explain", str(FIXTURES / "matmul_grouped.py"), "-t", "gfx950",
                                      "--timeline", str(out)])
    assert result.exit_code == 0, result.output
    assert "mem[it 0]" in result.output
    ET.fromstring(out.read_text())
    sm90 = tmp_path / "sm90.svg"
    result = CliRunner().invoke(tools, ["explain", str(FIXTURES / "matmul_descriptor.py"), "-t", "sm90",
                                      "--timeline", str(sm90)])
    assert result.exit_code == 0, result.output
    assert "loader (1 warp)" in result.output and "mma_wait[it 1]" in result.output
    assert "warp-specialised; ring depth 3" in result.output  # the explain table's per-config rows
    assert "loader (1 warp)" in sm90.read_text()
    missing = tmp_path / "none.svg"
    result = CliRunner().invoke(tools, ["explain", str(FIXTURES / "softmax.py"), "-t", "gfx950",
                                      "--timeline", str(missing)])
    assert result.exit_code == 1 and not missing.exists()
    result = CliRunner().invoke(tools, ["explain", str(FIXTURES / "attention_fwd.py"), "-t", "sm90",
                                      "--gluon-always", "--timeline", str(missing)])
    assert result.exit_code == 0 and "rescale[it 0]" in result.output and missing.exists()


@pytest.mark.parametrize("fixture, target, image", [
    ("matmul_grouped", "gfx950", "timeline_gemm_gfx950.svg"),
    ("matmul_descriptor", "sm90", "timeline_gemm_sm90.svg"),
])
def test_docs_images_are_current(fixture: str, target: str, image: str) -> None:
    """The timelines shown in docs/PIPELINES.md are what the tool draws today."""
    root = FIXTURES.parent
    panels = file_panels((FIXTURES / f"{fixture}.py").read_text(), f"fixtures/{fixture}.py", get_target(target))
    assert (root / "docs" / image).read_text() == render_svg(panels), (
        f"regenerate: transpile explain fixtures/{fixture}.py -t {target} --timeline docs/{image}")
    pipelines = (root / "docs" / "PIPELINES.md").read_text()
    assert f"transpile explain fixtures/{fixture}.py -t {target} --timeline docs/{image}" in pipelines
    assert f"]({image})" in pipelines
