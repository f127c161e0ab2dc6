"""Every golden variant compiles for its target with Triton, on the CPU (no GPU needed).

Argument types and constexpr values come from fixtures/verify.json; every `@triton.autotune` config of a kernel is
compiled. The text compiled is the golden file itself (tests/test_snapshots.py checks that it is what the tool
writes today).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest

from transpile.verify import verify

pytestmark = pytest.mark.slow


def test_golden_compiles(fixture_name: str, target_name: str, goldens, translated, verify_values,
                         monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    values = verify_values.get(f"{fixture_name}.py")
    assert values is not None, f"fixtures/verify.json has no entry for {fixture_name}.py"
    result = dataclasses.replace(translated(fixture_name, target_name), text=goldens.read(fixture_name, target_name))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # verify writes the variant module to a temp directory

    compiled = verify(result, values, all_configs=True)

    expected = [f.name for f in result.functions if f.translated and not f.is_helper]
    assert expected, "no kernel of this fixture is translated"
    assert sorted({c.kernel for c in compiled}) == sorted(expected)
    failures = [f"{c.label}: {c.message}" for c in compiled if not c.ok]
    assert not failures, "\n".join(failures)
    for c in compiled:
        assert c.asm.get("ttgir"), f"{c.label}: no TTGIR produced"
