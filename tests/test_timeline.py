"""`transpile explain --timeline`: the warp-pipeline timeline drawn from the stage plan the AMD rules emit."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from transpile.cli.app import tools
from transpile.analysis.stages import plan_stages  # noqa: F401  (the plan the timeline reads)
from transpile.targets import get_target
from transpile.timeline import file_panels, render_svg, render_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("target", ["gfx942", "gfx950", "gfx1250"])
@pytest.mark.parametrize("fixture, stages", [("matmul_grouped", ["lds_read", "copy_mma"]),
                                             ("attention_fwd", ["lds_read", "copy_qk", "softmax", "pv"])])
def test_svg_names_every_stage(fixture: str, stages: list[str], target: str) -> None:
    panels = file_panels((FIXTURES / f"{fixture}.py").read_text(), f"{fixture}.py", get_target(target))
    assert len(panels) == 1
    svg = render_svg(panels)
    root = ET.fromstring(svg)  # well-formed XML
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    for stage in stages:
        # every stage of every iteration on both warp groups
        for it in range(3):
            assert sum(t == f"{stage} it {it}" for t in texts) == 2, (stage, it)
    assert any("fills slot" in t for t in texts)


def test_second_group_runs_one_stage_behind() -> None:
    panel = file_panels((FIXTURES / "matmul_grouped.py").read_text(), "m.py", get_target("gfx942"))[0]
    by_step = {(c.group, c.step): (c.label, c.iteration) for c in panel.cells}
    assert by_step[(0, 0)] == ("lds_read", 0) and (1, 0) not in by_step
    assert by_step[(1, 1)] == ("lds_read", 0) and by_step[(0, 1)] == ("copy_mma", 0)
    # the copy stage of iteration `it` fills the slot iteration `it + distance` reads
    fills = {c.iteration: c.note for c in panel.cells if c.label == "copy_mma" and c.group == 0}
    reads = {c.iteration: c.note for c in panel.cells if c.label == "lds_read" and c.group == 0}
    assert fills[0] == "fills slot 2 (it 2)" and reads[2] == "reads slot 2"
    lines = render_text(panel)
    assert lines[2].startswith("group 0") and "lds_read[it 0]" in lines[2]


def test_no_timeline_for_sm90_or_loops_without_pipeline() -> None:
    assert file_panels((FIXTURES / "matmul_grouped.py").read_text(), "m.py", get_target("sm90")) == []
    assert file_panels((FIXTURES / "softmax.py").read_text(), "s.py", get_target("gfx942")) == []


def test_cli_writes_svg(tmp_path: Path) -> None:
    out = tmp_path / "t.svg"
    result = CliRunner().invoke(tools, ["explain", str(FIXTURES / "attention_fwd.py"), "-t", "gfx950",
                                      "--timeline", str(out)])
    assert result.exit_code == 0, result.output
    assert "softmax[it 0]" in result.output
    ET.fromstring(out.read_text())
    missing = tmp_path / "none.svg"
    result = CliRunner().invoke(tools, ["explain", str(FIXTURES / "softmax.py"), "-t", "gfx950",
                                      "--timeline", str(missing)])
    assert result.exit_code == 1 and not missing.exists()


def test_readme_image_is_current() -> None:
    """docs/timeline_attention_gfx950.svg (shown in the README) is what the tool draws today."""
    root = FIXTURES.parent
    panels = file_panels((FIXTURES / "attention_fwd.py").read_text(), "fixtures/attention_fwd.py",
                         get_target("gfx950"))
    assert (root / "docs" / "timeline_attention_gfx950.svg").read_text() == render_svg(panels), (
        "regenerate: transpile explain fixtures/attention_fwd.py -t gfx950 --timeline docs/timeline_attention_gfx950.svg")
