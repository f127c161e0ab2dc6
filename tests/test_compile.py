"""Every golden variant compiles for its target with Triton, on the CPU (no GPU needed).

Argument types and constexpr values come from fixtures/verify.json; every `@triton.autotune` config of a Gluon kernel
and of a K-major copy the variant makes is compiled (the source's own kernels in a variant, kept as Triton or a
launcher's source twin, at the first config: their text is the source's). The text compiled is the golden file
itself (tests/test_snapshots.py checks that it is what the tool writes today).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest

from transpile.verify import verify

pytestmark = pytest.mark.slow

# Goldens that genuinely do not compile today, with the reason. Strict: once one compiles, its test XPASSes and
# fails, so the entry must be removed with the fix.
EXPECTED_FAILURES: dict[tuple[str, str], str] = {
    # The source asks for tf32 dots (`input_precision="tf32"`), which Triton's AMD backend rejects: a variant that
    # keeps the source kernel (gfx1250: kept as Triton; gfx950: the launcher's fallback for launches its Gluon kernel
    # does not take) fails to compile exactly as the source does.
    ("suite_gemm_tf32", "gfx950"): "the source kernel's tf32 dots do not compile for AMD targets",
    ("suite_gemm_tf32", "gfx1250"): "the source kernel's tf32 dots do not compile for AMD targets",
}


def test_golden_compiles(fixture_name: str, target_name: str, goldens, translated, verify_values,
                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    reason = EXPECTED_FAILURES.get((fixture_name, target_name))
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    values = verify_values.get(f"{fixture_name}.py")
    assert values is not None, f"fixtures/verify.json has no entry for {fixture_name}.py"
    result = dataclasses.replace(translated(fixture_name, target_name), text=goldens.read(fixture_name, target_name))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # verify writes the variant module to a temp directory

    compiled = verify(result, values, all_configs=True, source_configs=False)

    # Every kernel compiles: translated ones as Gluon, kept ones (TT041) as the Triton kernels they are, and a kernel
    # read through TMA descriptors (TT042) both ways: its Gluon kernel and the source's, `_<kernel>_triton`.
    expected = [f.name for f in result.functions if not f.is_helper]
    expected += [f"_{f.name}_triton" for f in result.functions if f.dispatch is not None and f.translated]
    assert expected, "the fixture has no kernel"
    assert sorted({c.kernel for c in compiled}) == sorted(expected)
    failures = [f"{c.label}: {c.message}" for c in compiled if not c.ok]
    assert not failures, "\n".join(failures)
    for c in compiled:
        if c.check == "not run":  # a config the launcher runs on the source kernel: that kernel compiled there
            assert any(o.kernel == f"_{c.kernel}_triton" and o.config == c.config and o.asm.get("ttgir")
                       for o in compiled), f"{c.label}: the source kernel the launcher runs there did not compile"
            continue
        assert c.asm.get("ttgir"), f"{c.label}: no TTGIR produced"
    # ... and fits the target's shared memory (else it compiles but fails to launch: OutOfResources)
    limit = result.target.shared_memory_bytes
    too_big = [f"{c.label}: {c.shared} bytes" for c in compiled if c.ok and c.shared is not None and c.shared > limit]
    assert not too_big, f"over {limit} bytes of shared memory: " + ", ".join(too_big)
