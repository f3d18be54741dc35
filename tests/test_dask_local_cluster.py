"""The `--workers` local cluster: forked workers where the process is quiet, spawned ones
otherwise, and a worker killed with SIGKILL started again (spawned) by its nanny.

Each case runs in a fresh interpreter: pytest's own process runs threads, which is exactly
when `local_cluster` must not fork.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("distributed")
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks on Linux")


def _run(script: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@linux_only
def test_a_quiet_process_forks_and_a_busy_one_spawns() -> None:
    out = _run(
        """
        import threading
        import pyarrow
        from seqpack_cli.prepare.engines.dask.client import _start_method
        quiet = _start_method()
        stop = threading.Event()
        busy = threading.Thread(target=stop.wait)
        busy.start()
        print(quiet, _start_method())
        stop.set()
        """
    )
    assert out == "fork spawn"


# A forked worker has a copy of this process's memory, the mark set in `__main__` included; a
# spawned one imports this script afresh (as `__mp_main__`, which skips the `__main__` block).
_KILL_AND_RESTART = """
    import os, signal, time
    import distributed
    from seqpack_cli.prepare.engines.dask import client as client_module
    from seqpack_cli.prepare.engines.dask.client import local_cluster

    def forked():
        return getattr(client_module, "marked_in_main", False)

    if __name__ == "__main__":
        client_module.marked_in_main = True
        with local_cluster(2) as local, distributed.Client(local) as client:
            client.wait_for_workers(2)
            before = client.run(forked)
            pids = client.run(os.getpid)
            os.kill(next(iter(pids.values())), signal.SIGKILL)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    now = client.run(os.getpid)
                except OSError:  # the killed worker, not yet known dead
                    now = pids
                if len(now) == 2 and set(now.values()) != set(pids.values()):
                    break
                time.sleep(0.1)
            after = client.run(forked)
            print(sorted(before.values()), sorted(after.values()))
            print(sum(client.gather(client.map(abs, range(-10, 0)))))
            print(*pids.values(), *now.values())
"""


@linux_only
def test_a_killed_worker_is_spawned_again_and_runs_tasks(tmp_path: Path) -> None:
    script = tmp_path / "kill_and_restart.py"
    script.write_text(textwrap.dedent(_KILL_AND_RESTART))
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    forked, total, pids = result.stdout.strip().splitlines()
    assert forked == "[True, True] [False, True]"
    assert total == "55"  # the restarted worker runs tasks
    alive = [pid for pid in pids.split() if Path(f"/proc/{pid}").exists()]
    assert alive == []  # no worker outlives the cluster
