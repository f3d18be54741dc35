"""Run every benchmark in its quick form, one after the other (`make bench`).

Each script prints its own tables; pass `--full` to run them at their full sizes instead
(minutes to tens of minutes, and several GB of scratch data under /tmp).

`--write-docs` also writes what the scripts printed into `docs/benchmarks.md` (or the path given
with `--docs-path`), under a header naming the machine, the date and the command, so the page is
always a run's output and never copied by hand. `--only a.py,b.py` runs a subset, and the page
says which scripts it holds.

    python benchmarks/run_all.py                          # quick sizes, tables on stdout
    python benchmarks/run_all.py --write-docs             # the same, and docs/benchmarks.md
    python benchmarks/run_all.py --write-docs --only bench_packing.py,bench_epoch.py
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS_PAGE = HERE.parent / "docs" / "benchmarks.md"

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
    "bench_repack.py",
    "bench_tokenize_kernel.py",
    "bench_tokenize.py",
    "bench_remote_read.py",
    "bench_remote.py",
]
# The quick form of a script whose flag is not --quick: bench_training's tiny CPU configuration
# (its full form needs a CUDA GPU and says so in one line without one), bench_balance's tiny sizes.
QUICK_ARGS = {"bench_training.py": ["--smoke"], "bench_balance.py": ["--smoke"]}

# What the page says before the tables: how to read them. Figures never go here, only the
# scripts' output below does.
PAGE_INTRO = """\
Every table below is the printed output of a script in `benchmarks/`, captured by
`benchmarks/run_all.py --write-docs`: regenerate the page with that command rather than edit it.
The scripts compare seqpack against the peers that install here (`binpacking`, the C++
`lightbinpack`, Graphcore's histogram packers and plain per-item FFD / BFD / modified FFD, written
in `benchmarks/reference_packers.py`) in the same run, so compare ratios within one table: times
depend on the machine and on what else ran on it.

Length distributions (`benchmarks/distributions.py`): realistic `sft`, `chat` (multi-turn),
`code` (files), `web_split` (web documents split at 2048), and adversarial `uniform`, `bimodal`
(half above `max_seq_len/2`), `third_plus_one` (many of exactly `max_seq_len/3+1`),
`power_law`. LB is the lower bound on bins: the largest of `ceil(tokens/max_seq_len)`,
Martello–Toth L2 and the sequences that cannot share a bin; the LP bound is the cutting-stock
LP's (`seqpack_cli.packing.lp.lp_lower_bound`).

The quick sizes are small (seconds per script); each script's full size (`python
benchmarks/<script>.py` with no flag, or `run_all.py --full`) is the one its docstring describes.
Scripts not run here: `bench_lp_gate.py` (when the default packer runs the LP),
`bench_sweep.py` (the capped `seqpack stats` sweep) and `bench_balance_training.py` (needs a CUDA
GPU).
"""


@dataclass(frozen=True)
class Run:
    """One script's run: its arguments, what it printed, its exit status and wall time."""

    script: str
    args: list[str]
    output: str
    returncode: int
    seconds: float


def script_args(script: str, full: bool) -> list[str]:
    return [] if full else QUICK_ARGS.get(script, ["--quick"])


def run_script(script: str, full: bool, capture: bool) -> Run:
    """Run one script, echoing its output as it comes (and keeping it when `capture`)."""
    args = script_args(script, full)
    command = [sys.executable, str(HERE / script), *args]
    print(f"\n=== {script} {' '.join(args)}".rstrip(), flush=True)
    start = time.perf_counter()
    if not capture:
        returncode = subprocess.run(command).returncode
        return Run(script, args, "", returncode, time.perf_counter() - start)
    lines = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            lines.append(line)
    return Run(script, args, "".join(lines), process.returncode, time.perf_counter() - start)


def summary_line(script: str) -> str:
    """The first paragraph of a script's docstring, on one line."""
    docstring = ast.get_docstring(ast.parse((HERE / script).read_text())) or ""
    return " ".join(docstring.split("\n\n")[0].split())


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = (
        ", ".join(f"{value:.2f}" for value in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    )
    return (
        f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, load average at the start {load}"
    )


def render_page(runs: list[Run], command: str, started: datetime, host: str, full: bool) -> str:
    total = sum(run.seconds for run in runs)
    failed = [run.script for run in runs if run.returncode != 0]
    ran = ", ".join(f"`{run.script}`" for run in runs)
    header = [
        "# Benchmarks",
        "",
        "<!-- GENERATED by benchmarks/run_all.py --write-docs: do not edit by hand. -->",
        "",
        f"- command: `{command}`",
        f"- date: {started:%Y-%m-%d %H:%M} UTC, {total:.0f} s in all",
        f"- machine: {host}",
        f"- sizes: {'full' if full else 'quick'}; scripts: {ran}",
    ]
    if failed:
        header.append(f"- failed (exit status not 0): {', '.join(failed)}")
    parts = ["\n".join(header), PAGE_INTRO.rstrip()]
    for run in runs:
        title = f"`{run.script}{' ' + ' '.join(run.args) if run.args else ''}`"
        status = "" if run.returncode == 0 else f", exit status {run.returncode}"
        parts.append(
            f"## {title}\n\n{summary_line(run.script)} ({run.seconds:.1f} s{status})\n\n"
            f"```text\n{run.output.strip()}\n```"
        )
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--full", action="store_true", help="full sizes (minutes to hours)")
    parser.add_argument(
        "--write-docs", action="store_true", help="write the scripts' tables into the docs page"
    )
    parser.add_argument(
        "--docs-path", type=Path, default=DOCS_PAGE, help="default docs/benchmarks.md"
    )
    parser.add_argument("--only", default="", help="comma-separated scripts to run (default all)")
    args = parser.parse_args(argv)
    scripts = [name for name in args.only.split(",") if name] or SCRIPTS
    unknown = [name for name in scripts if not (HERE / name).is_file()]
    if unknown:
        parser.error(f"--only names no script in benchmarks/: {', '.join(unknown)}")

    started = datetime.now(timezone.utc)
    host = machine()
    runs = [run_script(script, args.full, capture=args.write_docs) for script in scripts]
    failed = [run.script for run in runs if run.returncode != 0]
    if args.write_docs:
        command = shlex.join(["python", "benchmarks/run_all.py", *(argv or sys.argv[1:])])
        args.docs_path.parent.mkdir(parents=True, exist_ok=True)
        args.docs_path.write_text(render_page(runs, command, started, host, args.full))
        print(f"\nwrote {args.docs_path}", file=sys.stderr)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
