"""One benchmark step as a child process: its wall time, CPU time and peak RSS (`run_process`).

The figures come from wait4 for that child alone, so a step's peak memory is its own and not
the benchmark driver's.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass


@dataclass
class Run:
    """One process: wall seconds, CPU seconds (user + system), peak RSS in MiB, its stderr."""

    seconds: float
    cpu: float
    peak_mib: float
    log: str = ""


def run_process(command: list[str], env: dict[str, str] | None = None) -> Run:
    """Run `command` to its end (stdout discarded); `SystemExit` with its stderr if it fails."""
    os.sync()  # no dirty pages of an earlier run are written back during this one
    started = time.perf_counter()
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True
    )
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    log = process.stderr.read() if process.stderr else ""
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"failed: {' '.join(command)}\n{log}")
    return Run(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, log)
