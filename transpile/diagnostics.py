"""Located diagnostics with stable codes.

Every message the tool prints about an input reads ``path:line:col: CODE message``. The codes are stable: tools and
people may match on them. docs/DIAGNOSTICS.md documents the table below.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"  # the input is bad: nothing is written, exit 2
    REFUSAL = "refusal"  # one kernel (or loop) is not translated as asked; the rest goes on
    NOTE = "note"  # information: a pipeline not applied, a file skipped


#: code -> (severity, one-line meaning); docs/DIAGNOSTICS.md shows it (`python scripts/readme_tables.py --write`).
CODES: dict[str, tuple[Severity, str]] = {
    "TT001": (Severity.ERROR, "syntax error: the file does not parse as Python"),
    "TT002": (Severity.ERROR, "unreadable input: missing, not a regular file (a directory, a named pipe), not text in "
                              "its encoding (UTF-8, or a PEP 263 coding cookie's), or an unknown coding"),
    "TT003": (Severity.ERROR, "no @triton.jit kernels in the file (kernels made only inside test functions, `test_*`, "
                              "are a test's helpers: none). Triton imported through a project module that re-exports it "
                              "(vLLM's `from vllm.triton_utils import tl, triton`) counts as Triton where that `triton` "
                              "decorates a function of the file (`SourceFile.reexports`)"),
    "TT004": (Severity.ERROR, "unknown target"),
    "TT005": (Severity.ERROR, "bad configuration in [tool.triton-transpile], or formatter settings (ruff, black) that "
                              "cannot be read"),
    "TT006": (Severity.ERROR, "two sources (or a source and a variant) map to one variant path, or a variant path holds "
                              "a file the tool did not write (or a directory); nothing is written"),
    "TT007": (Severity.REFUSAL, "a @triton.jit kernel is defined in a class, a function, a block inside a block, or "
                                "a module-level block beside module-level kernels: the variant keeps it as written "
                                "(kernels that all stand in module-level `if`/`try`/`with` blocks are translated "
                                "there)"),
    "TT008": (Severity.ERROR, "a file cannot be written: a directory on its path is a file, or is not writable "
                              "(`--out-dir`, a variant, `explain --timeline`); nothing is written"),
    "TT009": (Severity.NOTE, "a table in pyproject.toml looks like a misspelt [tool.triton-transpile] "
                             "(`[tool.triton_transpile]`): it is not read"),
    "TT010": (Severity.REFUSAL, "unsupported construct in a kernel"),
    "TT011": (Severity.REFUSAL, "triton.language function with no Gluon translation"),
    "TT012": (Severity.REFUSAL, "helper called with inconsistent argument kinds, where a copy per kind would not "
              "translate"),
    "TT040": (Severity.NOTE, "main loop not pipelined (the reason follows); the loop is translated as it is"),
    "TT041": (Severity.NOTE, "kernel kept as Triton in the variant (the reason follows): a dot loop no pipeline rule "
                             "pipelines on the target, a refusal, or a kept caller/helper"),
    "TT020": (Severity.ERROR, "variant is stale (source hash, tool version or content differs)"),
    "TT021": (Severity.ERROR, "variant is missing"),
    "TT022": (Severity.ERROR, "variant is orphaned: the source its header names does not exist (deleted or renamed); "
                              "`--check` over a directory"),
    "TT042": (Severity.NOTE, "sm90: a pointer GEMM's tiles read through TMA descriptors (the source kernel kept for "
                             "launches they cannot address), or why not"),
    "TT043": (Severity.NOTE, "sm90: the Gluon kernel runs only the launches that set a constexpr flag, whose "
                             "tensors have 16-byte aligned rows and whose grid is long enough (the source kernel kept "
                             "for the others)"),
    "TT044": (Severity.NOTE, "sm90: an attention kernel warp-specialised for its 128-row, 4-warp config, or for its "
                             "128-row launches at 4 warps where it is launched with fixed tiles (a TMA loader warp, two "
                             "consumer warpgroups in ping-pong), or why not (the ring stays)"),
    "TT045": (Severity.NOTE, "AMD: a dot loop pipelined for one value of a compile-time test only (a copy of it "
                             "unswitched on a constexpr flag): the source kernel runs the launches for the other"),
    "TT046": (Severity.NOTE, "sm90: a GEMM kept as Triton runs on a K-major copy of its B operand for launches of "
              "8-bit or tf32 data read N-contiguous (wgmma reads those K-major only)"),
    "TT047": (Severity.NOTE, "a GEMM kept as Triton loads a per-column scale that holds one value per output tile as "
                             "one scalar, its loop written twice under the group test the launch decides"),
    "TT050": (Severity.NOTE, "variant written unformatted: ruff is missing or failed (the message says why); "
                             "`--check` accepts it formatted or not"),
    "TT090": (Severity.ERROR, "internal error of the tool (a bug: please report it with the input)"),
    "TT030": (Severity.ERROR, "verify: a kernel argument has no type or value"),
    "TT031": (Severity.ERROR, "verify: the variant did not compile for the target"),
    "TT032": (Severity.ERROR, "verify: the variant could not be imported"),
    "TT033": (Severity.ERROR, "verify: Triton is not installed (`pip install 'triton-transpile[verify]'`); "
                              "translating needs no Triton"),
}


@dataclass(frozen=True, order=True)
class Diagnostic:
    path: str
    line: int
    col: int
    code: str
    message: str

    @property
    def severity(self) -> Severity:
        return CODES[self.code][0]

    def format(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.code} {self.message}"

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "code": self.code,
            "severity": self.severity.value,
            "message": self.message,
        }


class TranspileError(Exception):
    """Bad input for a whole file: carries the diagnostic that explains it."""

    def __init__(self, diagnostic: Diagnostic) -> None:
        super().__init__(diagnostic.format())
        self.diagnostic = diagnostic
