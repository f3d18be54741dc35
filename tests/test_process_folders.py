"""`process_folder`: one folder per prefix and process, removed when the process exits."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from seqpack_cli.prepare.process_folders import process_folder


def test_one_folder_per_prefix_removed_at_exit(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from seqpack_cli.prepare.process_folders import process_folder\n"
        "a, b = process_folder('seqpack-test-a-'), process_folder('seqpack-test-b-')\n"
        "assert process_folder('seqpack-test-a-') == a and a != b and a.is_dir() and b.is_dir()\n"
        "(a / 'x').write_text('x')\n"
        "print(a); print(b)\n"
    )
    environment = {**os.environ, "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=environment
    )
    assert result.returncode == 0, result.stderr
    folders = [Path(line) for line in result.stdout.split()]
    assert len(folders) == 2 and all(folder.parent == tmp_path for folder in folders)
    assert not any(folder.exists() for folder in folders)  # removed at the exit


def test_the_same_folder_in_this_process() -> None:
    assert process_folder("seqpack-test-same-") == process_folder("seqpack-test-same-")
