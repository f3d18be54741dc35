"""Run every benchmark in its quick form, one after the other (`make bench`).

Each script prints its own tables; pass `--full` to run them at their full sizes instead
(minutes to tens of minutes, and several GB of scratch data under /tmp).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPTS = [
    "bench_packing.py",
    "bench_optimum.py",
    "bench_epoch.py",
    "bench_prepare.py",
    "bench_masking.py",
    "bench_streaming.py",
    "bench_token_store.py",
    "bench_dask.py",
    "bench_training.py",
    "bench_balance.py",
]
# The quick form of a script whose flag is not --quick: bench_training's tiny CPU configuration
# (its full form needs a CUDA GPU and says so in one line without one), bench_balance's tiny sizes.
QUICK_ARGS = {"bench_training.py": ["--smoke"], "bench_balance.py": ["--smoke"]}


def main() -> int:
    full = "--full" in sys.argv[1:]
    here = Path(__file__).parent
    failed = []
    for script in SCRIPTS:
        quick = QUICK_ARGS.get(script, ["--quick"])
        args = [sys.executable, str(here / script)] + ([] if full else quick)
        print(f"\n=== {' '.join(args[1:])}", flush=True)
        if subprocess.run(args).returncode != 0:
            failed.append(script)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
