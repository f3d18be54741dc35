"""The README's examples run as written.

Every ```python block of README.md runs as its own script, and every ```console block's
`$ `-lines run as shell commands, in order, in one scratch directory: the blocks of the
README are a walk-through, so later blocks may use files that earlier ones wrote. A block
whose fence says ```python no-run is shown but not run (output samples, fragments).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _runnable_blocks() -> list[tuple[str, str]]:
    blocks = []
    for language, options, body in FENCE.findall(README.read_text()):
        if "no-run" in options:
            continue
        if language == "python":
            blocks.append(("python", body))
        elif language == "console":
            commands = [line[2:] for line in body.splitlines() if line.startswith("$ ")]
            blocks.extend(("shell", command) for command in commands)
    return blocks


@pytest.mark.slow
def test_readme_examples_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    blocks = _runnable_blocks()
    assert blocks, "README.md has no runnable examples"
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for number, (kind, code) in enumerate(blocks, start=1):
        args = [sys.executable, "-c", code] if kind == "python" else ["bash", "-c", code]
        result = subprocess.run(
            args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, (
            f"README block {number} ({kind}) failed:\n{code}\n--- stdout\n{result.stdout}"
            f"\n--- stderr\n{result.stderr}"
        )
