#!/usr/bin/env python
"""Print, for every fixture x AMD target, whether its main loop is warp-pipelined (per autotune config) or why not,
the number of stages, the copy engine and the LDS the compiled kernel takes against the target's size.

    python scripts/amd_pipeline_table.py          # compiles every variant on the CPU (about a minute)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import libcst as cst

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transpile.analysis.layouts import analyse_layouts  # noqa: E402
from transpile.analysis.pipeline import operand_anchors  # noqa: E402
from transpile.analysis.stages import StagePlan  # noqa: E402
from transpile.discover import discover  # noqa: E402
from transpile.engine import translate_file  # noqa: E402
from transpile.rules.amd_warp_pipeline import AMDWarpPipeline  # noqa: E402
from transpile.source import parse_source  # noqa: E402
from transpile.targets import get_target  # noqa: E402
from transpile.verify import verify  # noqa: E402


def main() -> int:
    values = json.loads((ROOT / "fixtures" / "verify.json").read_text())
    print("| fixture | target | main loop | stages | copies | per config: pipelined?, LDS bytes (target) |")
    print("|---|---|---|---:|---|---|")
    for path in sorted((ROOT / "fixtures").glob("*.py")):
        for name in ("gfx942", "gfx950", "gfx1250"):
            target = get_target(name)
            rule = next(r for r in target.rules if isinstance(r, AMDWarpPipeline))
            source = parse_source(path.read_text(), str(path))
            facts = discover(source)
            # (the layouts the rule translates with: a computed operand's computation in its operand layout)
            plans = analyse_layouts(facts, operand_anchors=operand_anchors(source, facts, analyse_layouts(facts), 3))
            for fn in facts.functions.values():
                loops: list[cst.For] = []

                class _Loops(cst.CSTVisitor):
                    def visit_For(self, node: cst.For) -> None:
                        loops.append(node)

                fn.node.visit(_Loops())
                for loop in loops:
                    sp = rule.stage_plan(source, fn, loop, plans[fn.name], target.shared_memory_bytes)
                    if sp is None:
                        continue
                    line = source.position(loop)[0]
                    if not isinstance(sp, StagePlan):
                        print(f"| {path.stem} | {name} | line {line}: refused | - | - | {sp.reason} |")
                        continue
                    result = translate_file(path, target, f"fixtures/{path.name}")
                    with tempfile.TemporaryDirectory():
                        compiled = [c for c in verify(result, values.get(path.name, {}), all_configs=True)
                                    if c.kernel == fn.name]
                    cells = []
                    for c in compiled:
                        piped = "s_setprio" in c.asm.get("amdgcn", "")
                        cells.append(f"{c.config}: {'yes' if piped else 'no (translated loop: ring > LDS, or < 16 rows a warp)'}, {c.shared} B"
                                     if c.ok else f"{c.config}: compile error")
                    print(f"| {path.stem} | {name} | line {line}: pipelined | {len(sp.stages)} | {sp.engine} | "
                          f"{'; '.join(cells)} ({target.shared_memory_bytes} B) |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
