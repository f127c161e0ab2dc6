#!/usr/bin/env python
"""Print, for every fixture x AMD target, whether its main loops are warp-pipelined (per autotune config) or why not,
the number of stages, the copy engine and the LDS the compiled kernel takes against the target's size.

    python scripts/amd_pipeline_table.py          # compiles every pipelined variant on the CPU (about a minute)

The table reads what the translation did: the stage plans its pipelined loops were emitted from
(`KernelOutcome.schedules`) and, for the others, the reason it gave (TT040 / TT041); nothing is planned again here.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from transpile.analysis.stages import StagePlan  # noqa: E402
from transpile.engine import translate_file  # noqa: E402
from transpile.targets import get_target  # noqa: E402
from transpile.verify import verify  # noqa: E402

#: the diagnostics that say why a loop is not pipelined: TT040 (a rule's refusal), TT041 (the kernel kept as Triton)
NOT_PIPELINED = ("TT040", "TT041")


def main() -> int:
    values = json.loads((ROOT / "fixtures" / "verify.json").read_text())
    print("| fixture | target | main loop | stages | copies | per config: pipelined?, LDS bytes (target) |")
    print("|---|---|---|---:|---|---|")
    for path in sorted((ROOT / "fixtures").glob("*.py")):
        for name in ("gfx942", "gfx950", "gfx1250"):
            target = get_target(name)
            result = translate_file(path, target, f"fixtures/{path.name}")
            compiled = None
            for fn in result.functions:
                for sp in (s for s in fn.schedules if isinstance(s, StagePlan)):
                    if compiled is None:
                        with tempfile.TemporaryDirectory():
                            compiled = verify(result, values.get(path.name, {}), all_configs=True)
                    cells = []
                    for c in (c for c in compiled if c.kernel == fn.name):
                        piped = "s_setprio" in c.asm.get("amdgcn", "")
                        cells.append(f"{c.config}: {'yes' if piped else 'no (translated loop: ring > LDS, or < 16 rows a warp)'}, {c.shared} B"
                                     if c.ok else f"{c.config}: compile error")
                    print(f"| {path.stem} | {name} | {fn.name}, line {sp.line}: pipelined | {len(sp.stages)} | "
                          f"{sp.engine} | {'; '.join(cells)} ({target.shared_memory_bytes} B) |")
                for d in fn.diagnostics:
                    if d.code in NOT_PIPELINED:
                        reason = " ".join(d.message.split()).replace("|", "\\|")
                        print(f"| {path.stem} | {name} | {fn.name}, line {d.line}: not pipelined | - | - | {reason} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
