"""Nothing lost, nothing misreported: what `prepare` may replace or delete, the atomic commit,
killed runs' leftovers, and how interruptions end (issue 10).

The commit swaps the new directory into place in one step (renameat2 RENAME_EXCHANGE; two
renames where the system lacks it, with the old copy put back by the next run). Subprocess tests
pause a real run at a chosen point (a patched hook writes a marker file and sleeps) and signal
or kill it there.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import with_default_signals, write_parquet
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepared import PreparedWriter, load_prepared, pool_files, write_prepared
from seqpack_cli.prepared import siblings as siblings_module

COUNTS = {3: 2, 5: 1}
POOLS = {3: [1, 2], 5: [0]}


def _write(path: Path, **kwargs) -> Path:
    return write_prepared(
        path,
        counts=COUNTS,
        templates={(5, 3): 1, (3,): 1},
        pools=POOLS,
        manifest={"config": {"max_seq_len": 10}},
        **kwargs,
    )


def _write_another(path: Path) -> Path:
    """Other contents than `_write`'s, replacing what `path` holds."""
    return write_prepared(
        path,
        counts={4: 1},
        templates={(4,): 1},
        pools={4: [9]},
        manifest={"config": {"max_seq_len": 10}},
        overwrite=True,
    )


def _tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".seqpack-" in p.name)


def _dataset(root: Path, lengths=(5, 7, 9)) -> Path:
    write_parquet(root / "a.parquet", {"n": list(lengths), "id": list(range(len(lengths)))})
    return root


def _cli(*args) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["prepare", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def _prepare_args(inputs: Path, output: Path, *extra: str, max_seq_len: int = 100) -> list[str]:
    args = [inputs, "--length-column", "n", "--max-seq-len", str(max_seq_len), "--output"]
    return [*map(str, args), str(output), *extra]


# ---- 1. inputs inside the output ----------------------------------------------------------------


def test_overwrite_refuses_inputs_inside_the_output(tmp_path: Path) -> None:
    # `prepare out/data --output out --overwrite` used to end with rc 0 and the inputs gone.
    out = tmp_path / "out"
    _write(out)
    data = _dataset(out / "data")
    before = _tree(out)
    for named in (data, data / "a.parquet", out / "*" / "*.parquet"):
        code, _, stderr = _cli(*_prepare_args(named, out, "--overwrite"))
        assert code == 1
        line = _one_error_line(stderr)
        assert "lies inside the output directory" in line and str(out) in line
        assert "--output" in line
        assert _tree(out) == before and _hidden(tmp_path) == []


def test_an_input_reached_through_a_symlink_into_the_output_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _write(out)
    _dataset(out / "data")
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "link.parquet").symlink_to(out / "data" / "a.parquet")
    config = PrepareConfig(
        inputs=[tmp_path / "inputs"], length_column="n", max_seq_len=100, output=out, overwrite=True
    )
    with pytest.raises(ConfigError, match=r"link\.parquet lies inside the output directory"):
        prepare_dataset(config)
    assert (out / "data" / "a.parquet").exists()


def test_overwrite_never_deletes_files_it_did_not_write(tmp_path: Path) -> None:
    out = _write(tmp_path / "out")
    (out / "notes.txt").write_text("mine")
    (out / "pools" / "README").write_text("mine too")
    with pytest.raises(ConfigError, match=r"holds 2 entries that are not part of its prepared "):
        _write(out, overwrite=True)
    assert (out / "notes.txt").read_text() == "mine" and (out / "pools" / "README").exists()


# ---- 2. only a seqpack manifest makes a directory replaceable ---------------------------------


@pytest.mark.parametrize(
    ("manifest", "found"),
    [
        ('{"name": "my-model", "files": {}}', "has no format 'seqpack-prepared'"),
        ('{"format": "hf-dataset", "format_version": 1}', "has format 'hf-dataset'"),
        ('{"format": "seqpack-prepared", "format_version": "1"}', "no integer format_version"),
        ('{"format_version": true, "seqpack_version": "0.1", "files": {}}', "has no format"),
        ("[1, 2]", "is not a JSON object"),
        ("not json", "cannot be read as JSON"),
    ],
)
def test_overwrite_replaces_only_a_seqpack_manifest(
    tmp_path: Path, manifest: str, found: str
) -> None:
    other = tmp_path / "model"
    other.mkdir()
    (other / "manifest.json").write_text(manifest)
    (other / "weights.bin").write_bytes(b"\x00" * 10)
    code, _, stderr = _cli(*_prepare_args(_dataset(tmp_path / "in"), other, "--overwrite"))
    assert code == 1
    line = _one_error_line(stderr)
    assert f"output directory {other} is not empty and is not a seqpack prepared" in line
    assert found in line and "--overwrite will not replace it" in line
    assert (other / "weights.bin").exists() and (other / "manifest.json").read_text() == manifest


def test_overwrite_replaces_a_manifest_written_before_format_names(tmp_path: Path) -> None:
    out = _write(tmp_path / "out")
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["format"]  # what seqpack wrote before manifests carried `format`
    (out / "manifest.json").write_text(json.dumps(manifest))
    _write_another(out)
    assert load_prepared(out).counts == {4: 1} and _hidden(tmp_path) == []


def test_overwrite_is_named_for_each_audience(tmp_path: Path) -> None:
    out = _write(tmp_path / "out")
    with pytest.raises(ConfigError) as caught:
        _write(out)
    assert "pass overwrite=True to replace it" in str(caught.value)
    assert "--" not in str(caught.value)
    code, _, stderr = _cli(*_prepare_args(_dataset(tmp_path / "in"), out))
    line = _one_error_line(stderr)
    assert code == 1 and "pass --overwrite to replace it" in line and "=True" not in line


# ---- 4. leftovers of killed runs ----------------------------------------------------------------

_HOLD_A_WRITER = """
import sys, time
from seqpack_cli.prepared import PreparedWriter
with PreparedWriter(sys.argv[1]) as writer:
    writer.write_bytes("counts.json", b"x" * 100_000)
    print(writer.tmp_path.name, flush=True)
    time.sleep(60)
"""


def _start_writer(output: Path) -> tuple[subprocess.Popen[str], Path]:
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD_A_WRITER, str(output)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    name = process.stdout.readline().strip()
    assert name, "the writer never started"
    return process, output.parent / name


def test_a_sigkilled_run_leaves_a_sibling_that_the_next_run_removes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    output = tmp_path / "out"
    process, sibling = _start_writer(output)
    try:
        # Alive: another run leaves its temporary directory alone.
        _write(tmp_path / "other")
        _write(output)
        assert sibling.is_dir()
    finally:
        process.kill()
        process.wait()
    assert sibling.is_dir()  # SIGKILL: nothing ran to remove it
    with caplog.at_level(logging.INFO, logger="seqpack_cli.prepared.siblings"):
        _write(output, overwrite=True)
    assert not sibling.exists() and _hidden(tmp_path) == []
    assert any(sibling.name in record.getMessage() for record in caplog.records)


def test_only_this_outputs_own_siblings_are_ever_removed(tmp_path: Path) -> None:
    output = tmp_path / "out"
    keep = [
        ".out.seqpack-tmp-999999999-deadbeef.bak",  # not exactly the pattern
        ".out.seqpack-tmp-abc-deadbeef",
        ".out.seqpack-tmp-999999999-DEADBEEF",
        ".outer.seqpack-tmp-999999999-deadbeef",  # another output's
        ".ou.seqpack-tmp-999999999-deadbeef",
        "out.seqpack-tmp-999999999-deadbeef",  # not hidden
        ".out.seqpack-new-999999999-deadbeef",
    ]
    for name in keep:
        (tmp_path / name).mkdir()
        (tmp_path / name / "data").write_text("keep")
    (tmp_path / ".out.seqpack-tmp-999999998-deadbeef").write_text("a file, not our directory")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "data").write_text("keep")
    (tmp_path / ".out.seqpack-tmp-999999997-deadbeef").symlink_to(target)
    _write(output)
    for name in keep:
        assert (tmp_path / name / "data").read_text() == "keep", name
    assert (tmp_path / ".out.seqpack-tmp-999999998-deadbeef").exists()
    assert (target / "data").exists()


# ---- 16. names, full disks, mount points -------------------------------------------------------


@pytest.mark.parametrize("length", [230, 255])
def test_long_output_names_work_and_their_leftovers_are_recognised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, length: int
) -> None:
    # A legal 230-character name was refused: `.NAME.seqpack-tmp-PID-RANDOM` was too long.
    output = tmp_path / ("p" * length)
    seen: list[str] = []
    real_rename2 = siblings_module.rename2

    def rename2(source, target, flags):
        seen.append(Path(source).name)
        return real_rename2(source, target, flags)

    monkeypatch.setattr(siblings_module, "rename2", rename2)
    _write(output)
    monkeypatch.undo()
    assert load_prepared(output).counts == COUNTS
    assert all(len(name.encode()) <= 255 for name in seen) and seen
    # A leftover of a killed run under the shortened name is still this output's.
    leftover = tmp_path / seen[0].replace(f"-{os.getpid()}-", "-999999999-")
    leftover.mkdir()
    other = tmp_path / (seen[0].replace(f"-{os.getpid()}-", "-999999999-").replace("~", "_"))
    other.mkdir()
    _write(output, overwrite=True)
    assert not leftover.exists() and other.exists()


def test_a_long_output_names_leftover_inside_the_input_directory_is_no_input(
    tmp_path: Path,
) -> None:
    # The output's siblings were recognised by `.{name}.seqpack-`, which misses the shortened
    # names of outputs longer than 222 bytes: what a killed run left there (here a scratch
    # parquet like the id checks write) counted as input wherever an argument reached it.
    data = _dataset(tmp_path / "data")
    output = data / ("p" * 240)
    args = _prepare_args(data / "**", output, "--overwrite")
    code, _, stderr = _cli(*args)
    assert code == 0, stderr
    process, marker = _paused_run(tmp_path, "commit", args)  # the second run, SIGKILLed
    process.kill()
    process.communicate(timeout=60)
    marker.unlink()
    (sibling,) = (data / name for name in _hidden(data))
    assert not sibling.name.startswith(f".{output.name}.seqpack-")  # shortened
    scratch = write_parquet(sibling / ".work" / "candidate_ids.parquet", {"n": [5]})
    code, _, stderr = _cli(*_prepare_args(scratch, output, "--overwrite"))
    assert code == 1 and "lies inside the output directory" in _one_error_line(stderr)
    glob = data / ".*" / ".work" / "*.parquet"
    code, _, stderr = _cli(*_prepare_args(glob, output, "--overwrite"))
    assert code == 1 and "matches only the output directory" in _one_error_line(stderr)
    assert sibling.exists()  # refused before anything was touched
    code, _, stderr = _cli(*args)  # the third run over data/**
    assert code == 0, stderr
    assert load_prepared(output, verify=True).counts == {5: 1, 7: 1, 9: 1}
    assert not sibling.exists() and _hidden(data) == []


def test_an_output_name_too_long_for_the_filesystem_is_one_line(tmp_path: Path) -> None:
    code, _, stderr = _cli(*_prepare_args(_dataset(tmp_path / "in"), tmp_path / ("x" * 256)))
    assert code == 1
    line = _one_error_line(stderr)
    assert "is 256 bytes long" in line and "at most 255" in line and "shorter --output" in line


@pytest.mark.parametrize("name", ["manifest.json", "counts.json"])
def test_a_full_disk_while_writing_the_json_files_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # manifest.json used to end in an OSError traceback.
    real_write_text, real_write_bytes = Path.write_text, Path.write_bytes

    def full(path: Path, real, *args, **kwargs):
        if path.name == name:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", lambda p, *a, **k: full(p, real_write_text, *a, **k))
    monkeypatch.setattr(Path, "write_bytes", lambda p, *a: full(p, real_write_bytes, *a))
    output = tmp_path / "deep" / "out"
    code, _, stderr = _cli(*_prepare_args(_dataset(tmp_path / "in"), output))
    assert code == 1
    line = _one_error_line(stderr)
    assert f"cannot write {name} of {output}: No space left on device" in line
    assert "--output" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # nor the parents it made


def test_a_mount_point_output_is_refused_up_front(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _write(tmp_path / "out")
    real_ismount = os.path.ismount
    monkeypatch.setattr(os.path, "ismount", lambda p: Path(p) == out or real_ismount(p))
    code, _, stderr = _cli(*_prepare_args(_dataset(tmp_path / "in"), out, "--overwrite"))
    assert code == 1
    line = _one_error_line(stderr)
    assert "is a mount point" in line and "choose a directory inside it as --output" in line
    assert load_prepared(out).counts == COUNTS


@pytest.mark.parametrize("code", [errno.EBUSY, errno.EXDEV])
@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two renames"])
def test_a_commit_the_filesystem_refuses_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, exchange: bool
) -> None:
    out = _write(tmp_path / "out")
    before = _tree(out)
    failure = OSError(code, os.strerror(code))

    def rename2(source, target, flags):
        if exchange:
            raise failure
        return False

    real_rename = os.rename

    def rename(source, target):
        if Path(source).name.startswith(".out.seqpack-tmp-"):  # the second of two renames
            raise failure
        real_rename(source, target)

    monkeypatch.setattr(siblings_module, "rename2", rename2)
    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(ConfigError, match=r"cannot move the new prepared directory into place"):
        _write(out, overwrite=True)
    assert _tree(out) == before and _hidden(tmp_path) == []
    exit_code, _, stderr = _cli(*_prepare_args(_dataset(tmp_path / "in"), out, "--overwrite"))
    line = _one_error_line(stderr)
    assert exit_code == 1 and os.strerror(code) in line and "is it a mount point?" in line
    assert _tree(out) == before and _hidden(tmp_path) == []


# ---- 18. parents, and what a finished run returns ---------------------------------------------


def test_a_failed_run_removes_the_parent_directories_it_created(tmp_path: Path) -> None:
    # Over the cap: found inside the writer, after it created a/b/c.
    data = _dataset(tmp_path / "in", lengths=(5, 500))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "kept").write_text("")
    config = PrepareConfig(
        inputs=[data], length_column="n", max_seq_len=100, output=tmp_path / "a" / "b" / "c" / "o"
    )
    with pytest.raises(InputError, match="longer than max_seq_len 100"):
        prepare_dataset(config)
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["kept"]


@pytest.mark.parametrize(
    ("option", "value", "fragment"),
    [
        ("--temp-dir", "a_file", "is a file, not a directory"),
        ("--temp-dir", "missing/spill", "does not exist, nor does its parent"),
        ("--memory-limit", "1MB", "too little for DuckDB"),
    ],
)
def test_resource_options_are_checked_up_front(
    tmp_path: Path, option: str, value: str, fragment: str
) -> None:
    # `--temp-dir` naming a file was accepted (and failed only if DuckDB spilled).
    (tmp_path / "a_file").write_text("")
    args = _prepare_args(_dataset(tmp_path / "in"), tmp_path / "out", option)
    code, _, stderr = _cli(*args, str(tmp_path / value) if option == "--temp-dir" else value)
    line = _one_error_line(stderr)
    assert code == 1 and option in line and fragment in line
    assert not (tmp_path / "out").exists()


def test_prepare_returns_what_it_wrote_without_reading_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Re-reading the output raced with the next run replacing it ("pools/13.npy is missing").
    # Every name the reader is reachable by, in every seqpack module loaded, refuses to run.
    import sys

    def no_reading(*args, **kwargs):
        raise AssertionError("the output was read again")

    for name, module in list(sys.modules.items()):
        if name.startswith("seqpack_cli") and hasattr(module, "load_prepared"):
            monkeypatch.setattr(module, "load_prepared", no_reading)
    data = _dataset(tmp_path / "in", lengths=(5, 7, 9, 5, 80))
    config = PrepareConfig(inputs=[data], length_column="n", max_seq_len=100, output=tmp_path / "o")
    prepared = prepare_dataset(config)
    monkeypatch.undo()
    loaded = load_prepared(tmp_path / "o", verify=True)
    assert prepared.manifest == loaded.manifest
    assert list(prepared.counts.items()) == list(loaded.counts.items())
    assert prepared.templates == loaded.templates
    assert {n: list(ids) for n, ids in prepared.pools.items()} == {
        n: list(ids) for n, ids in loaded.pools.items()
    }


def test_concurrent_overwrites_all_succeed(tmp_path: Path) -> None:
    data = _dataset(tmp_path / "in", lengths=list(range(1, 40)) * 3)
    output = tmp_path / "out"
    errors: list[BaseException] = []

    def run() -> None:
        config = PrepareConfig(
            inputs=[data], length_column="n", max_seq_len=100, output=output, overwrite=True
        )
        try:
            for _ in range(3):
                prepare_dataset(config)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert load_prepared(output, verify=True).counts == {n: 3 for n in range(1, 40)}
    assert _hidden(tmp_path) == []


# ---- 5. the commit is one step; signals tell the truth (real processes) -------------------------

# A run of `seqpack prepare` whose hook writes `marker` and then waits for the test's signal (at
# most `pause` seconds): raised there before the commit, or recorded by the command's
# `Interrupts` during it (a fixed sleep let a slow test's signal come after the commit).
_PAUSED_RUN = """
import os, sys, time
from pathlib import Path
from seqpack_cli.interrupts import Interrupts
from seqpack_cli.prepared import siblings, writer
marker, pause, where, *args = sys.argv[1:]
real = {"commit": writer.PreparedWriter.commit, "rename": os.rename}
real["rename2"] = siblings.rename2

def wait():
    if not os.path.exists(marker):
        Path(marker).write_text("")
        interrupts = Interrupts.installed()
        deadline = time.monotonic() + float(pause)
        while interrupts.late is None and time.monotonic() < deadline:
            time.sleep(0.01)

def commit(self, manifest):
    wait()
    return real["commit"](self, manifest)

def rename2(source, target, flags):
    wait()
    return real["rename2"](source, target, flags)

def unsupported(source, target, flags):
    return False

def rename(source, target):  # pauses between the two renames
    real["rename"](source, target)
    if ".seqpack-old-" in os.fspath(target):
        wait()

if where == "commit":
    writer.PreparedWriter.commit = commit
elif where == "exchange":
    siblings.rename2 = rename2
elif where == "renames":
    siblings.rename2 = unsupported
    os.rename = rename
from seqpack_cli.cli.app import app
app(["prepare", *args], prog_name="seqpack")
"""


def _paused_run(
    tmp_path: Path, where: str, args: list[str], *, pause: float = 300
) -> tuple[subprocess.Popen[str], Path]:
    marker = tmp_path / f"marker-{random.random()}"
    command = [sys.executable, "-c", _PAUSED_RUN, str(marker), str(pause), where, *args]
    process = subprocess.Popen(  # signalled: see with_default_signals
        with_default_signals(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run never reached its pause"
        time.sleep(0.01)
    return process, marker


@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [
        (signal.SIGINT, 130, "interrupted; nothing written"),
        (signal.SIGTERM, 143, "terminated (SIGTERM); nothing written"),
    ],
    ids=["SIGINT", "SIGTERM"],
)
def test_an_interrupt_before_the_commit_is_one_line_and_its_exit_code(
    tmp_path: Path, signum: int, code: int, line: str
) -> None:
    out = _write(tmp_path / "out")
    before = _tree(out)
    args = _prepare_args(_dataset(tmp_path / "in"), out, "--overwrite")
    process, marker = _paused_run(tmp_path, "commit", args)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert stderr.strip() == line and stdout == ""
    marker.unlink()
    assert _tree(out) == before and _hidden(tmp_path) == []


@pytest.mark.parametrize("where", ["exchange", "renames"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_during_the_commit_lets_the_run_finish(
    tmp_path: Path, where: str, signum: int
) -> None:
    out = _write(tmp_path / "out")
    args = _prepare_args(_dataset(tmp_path / "in"), out, "--overwrite", "--json")
    process, marker = _paused_run(tmp_path, where, args)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    # The output was replaced: the run says so and exits 0.
    assert process.returncode == 0, stderr
    assert json.loads(stdout)["output"] == str(out)
    assert "came after the output was written" in stderr and "Traceback" not in stderr
    marker.unlink()
    assert load_prepared(out, verify=True).counts == {5: 1, 7: 1, 9: 1}
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("fails", [False, True], ids=["commits", "commit fails"])
def test_a_signal_during_the_commit_in_process(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fails: bool,
) -> None:
    # Library use, default handlers: SIGTERM while the output is swapped in is recorded and
    # logged once the swap is done; if the swap then fails, the signal ends the run after all.
    out = _write(tmp_path / "out")
    before = _tree(out)
    real_rename2 = siblings_module.rename2

    def rename2(source, target, flags):
        signal.raise_signal(signal.SIGTERM)
        if fails:
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        return real_rename2(source, target, flags)

    monkeypatch.setattr(siblings_module, "rename2", rename2)
    handler = signal.getsignal(signal.SIGTERM)
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.prepared.writer"):
        if fails:
            with pytest.raises(SystemExit) as stopped:
                _write_another(out)
            assert stopped.value.code == 143 and _tree(out) == before
        else:
            _write_another(out)
            assert load_prepared(out).counts == {4: 1}
            assert any("SIGTERM arrived after" in r.getMessage() for r in caplog.records)
    assert signal.getsignal(signal.SIGTERM) is handler and _hidden(tmp_path) == []


def test_sigkill_between_two_renames_is_undone_by_the_next_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = _write(tmp_path / "out")
    before = _tree(out)
    data = _dataset(tmp_path / "in")
    process, marker = _paused_run(tmp_path, "renames", _prepare_args(data, out, "--overwrite"))
    process.kill()
    process.communicate(timeout=60)
    marker.unlink()
    assert not out.exists()  # the old copy is hidden aside, the new one not yet in place
    assert any(".out.seqpack-old-" in name for name in _hidden(tmp_path))
    # The next run, even one that then fails, puts the old copy back rather than deleting it.
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError, match="already exists"):
        _write(out)
    assert _tree(out) == before and _hidden(tmp_path) == []
    assert any("put back" in record.getMessage() for record in caplog.records)


def test_random_signals_always_leave_a_complete_output(tmp_path: Path) -> None:
    # SIGTERM or SIGKILL at random points of `prepare --overwrite`: --output always holds a
    # complete old or new copy, exit code 143 means the old one is untouched, 0 the new one.
    data = _dataset(tmp_path / "in", lengths=list(range(1, 60)) * 5)
    out = tmp_path / "out"
    _write(out)
    old = _tree(out)
    command = [sys.executable, "-m", "seqpack_cli.prepare", "--input", str(data)]
    command += ["--length-column", "n", "--max-seq-len", "100", "--output", str(out)]
    command = with_default_signals([*command, "--overwrite", "--quiet"])  # signalled
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    duration = time.perf_counter() - started
    new = _tree(out)
    rng = random.Random(5)
    for trial in range(16):
        _write(out, overwrite=True)
        old = _tree(out)
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.3, 1.0) * duration)
        signum = signal.SIGKILL if trial % 3 == 2 else signal.SIGTERM
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
        load_prepared(out, verify=True)
        tree = _tree(out)
        assert tree in (old, new), trial
        assert "Traceback" not in stderr
        code = process.returncode
        if signum == signal.SIGTERM:
            # 143 with its line: stopped before the commit; -15: still starting up; 0: done.
            assert code in (0, 143, -signal.SIGTERM), (trial, code, stderr)
            assert tree == (new if code == 0 else old), (trial, code)
            assert ("nothing written" in stderr) == (code == 143), (trial, stderr)
        assert (data / "a.parquet").exists()
    subprocess.run(command, check=True, capture_output=True)
    assert _tree(out) == new and _hidden(tmp_path) == []


def _in_function(thread_id: int, name: str) -> bool:
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def test_sigterm_while_waiting_for_the_pool_files_removes_every_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SIGTERM while the first append waits for the thread creating the pool files. On Python
    # 3.11 a Thread.join cut short by the handler's exception marks the thread as ended while it
    # runs on: the cleanup then deleted the directory while that thread still created files, and
    # a file created while pools/ was being emptied was left, with the temporary directory.
    creating, release = threading.Event(), threading.Event()
    real_header, real_rmdir = pool_files.npy_header, os.rmdir
    calls, early = [], []

    def header(dtype: np.dtype, count: int) -> bytes:
        if threading.current_thread().name == "seqpack-create":
            calls.append(count)
            if len(calls) == 2:  # the first file exists; the second is about to be created
                creating.set()
                release.wait(300)
        return real_header(dtype, count)

    def rmdir(path, *args, **kwargs):
        if os.fspath(path).endswith("pools") and not release.is_set():
            early.append(path)  # deleting while the creator still runs: let it create its file
            release.set()
            time.sleep(0.2)
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(pool_files, "npy_header", header)
    monkeypatch.setattr(os, "rmdir", rmdir)
    main = threading.get_ident()

    def until(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 300
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.001)

    def interrupt() -> None:
        assert creating.wait(300)
        # The main thread blocked in the first append, waiting for the creator (Event.wait)...
        until(lambda: _in_function(main, "ready") and _in_function(main, "wait"))
        signal.pthread_kill(main, signal.SIGTERM)
        # ... then in the cleanup: stopping the creator (right), or deleting already (early).
        until(lambda: _in_function(main, "stop") or bool(early))
        release.set()

    helper = threading.Thread(target=interrupt)
    helper.start()
    writer = PreparedWriter(tmp_path / "out")
    with pytest.raises(SystemExit) as stopped, writer:
        writer.create_pool_files({3: 1, 4: 1, 5: 1})
        writer.append_pool(3, np.array([0]))
    helper.join()
    assert stopped.value.code == 143 and len(calls) >= 2
    assert early == [], "the cleanup did not wait for the thread creating the pool files"
    deadline = time.monotonic() + 300  # the creating thread is gone before the test looks
    while any(t.name == "seqpack-create" for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert _hidden(tmp_path) == [] and not writer.tmp_path.exists()


@pytest.mark.parametrize("failures", [1, 2], ids=["once", "always"])
def test_what_the_cleanup_cannot_remove_is_retried_then_named(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    failures: int,
) -> None:
    real_rmdir, refused = os.rmdir, []

    def rmdir(path, *args, **kwargs):
        if os.fspath(path).endswith("pools") and len(refused) < failures:
            refused.append(path)
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", rmdir)
    writer = PreparedWriter(tmp_path / "out")
    with caplog.at_level(logging.WARNING), pytest.raises(RuntimeError, match="stop"), writer:
        raise RuntimeError("stop")
    warnings = [record.getMessage() for record in caplog.records]
    assert len(refused) == failures
    if failures == 1:
        assert warnings == [] and _hidden(tmp_path) == []
    else:
        assert len(warnings) == 1 and str(writer.tmp_path) in warnings[0]
        assert "the next run writing" in warnings[0]
        monkeypatch.undo()
        _write(tmp_path / "out")  # which removes it
        assert _hidden(tmp_path) == []


# `seqpack prepare` with SIGTERM raised inside the initialisation of DuckDB's extension module
# (the first Enum it creates), where a handler's exception aborted the process (SIGABRT, "Critical
# nanobind error") or was swallowed ("Exception ignored in", and the run went on).
_SIGNAL_WHILE_DUCKDB_LOADS = """
import enum, signal, sys
state = {"loading": False, "signalled": False}

def audit(event, args):
    if event == "import" and args[0] == "_duckdb":
        state["loading"] = True

sys.addaudithook(audit)
real_call = enum.EnumType.__call__

def call(cls, *args, **kwargs):
    if state["loading"] and not state["signalled"]:
        state["signalled"] = True
        print("signalled", flush=True)
        signal.raise_signal(signal.SIGTERM)
    return real_call(cls, *args, **kwargs)

enum.EnumType.__call__ = call
from seqpack_cli.cli.app import app
app(["prepare", *sys.argv[1:]], prog_name="seqpack")
"""


def test_sigterm_while_duckdb_loads_ends_the_run_with_its_line(tmp_path: Path) -> None:
    args = _prepare_args(_dataset(tmp_path / "in"), tmp_path / "out", "--quiet")
    process = subprocess.run(  # signals itself: see with_default_signals
        with_default_signals([sys.executable, "-c", _SIGNAL_WHILE_DUCKDB_LOADS, *args]),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert process.stdout == "signalled\n"
    assert process.returncode == 143, process.stderr
    assert process.stderr.strip() == "terminated (SIGTERM); nothing written"
    assert not (tmp_path / "out").exists() and _hidden(tmp_path) == []
