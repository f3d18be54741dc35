"""A filesystem mounted inside `--output` is never entered: refused up front, never emptied.

A token store kept on its own volume at `OUT/tokens` used to be emptied by `prepare --overwrite`
(exit 0): the old copy was swapped aside with the mount inside it and removed with `rmtree`, and
the mount stayed under a hidden `.OUT.seqpack-tmp-*` sibling. The real mounts below need root
(tmpfs, and a bind mount of the same filesystem, whose `st_dev` does not change); the same logic
is covered everywhere by reporting another `st_dev` for one directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from token_datasets import write_token_files
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError
from seqpack_cli.prepared import load_prepared, recover_siblings, write_prepared
from seqpack_cli.prepared import output_checks as output_checks_module
from seqpack_cli.prepared.mounts import mounts_inside, remove_tree

_SEQUENCES = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]


def _prepare(inputs: Path, output: Path, *extra: str) -> tuple[int, str]:
    args = ["prepare", str(inputs), "--length-column", "n", "--tokens-column", "input_ids"]
    args += ["--max-seq-len", "16", "--output", str(output), *extra]
    result = CliRunner().invoke(app, args)
    return result.exit_code, result.stderr


def _tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _hidden(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".seqpack-" in p.name)


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr
    return lines[0]


@contextlib.contextmanager
def _mounted(point: Path, within: Path, *, bind: Path | None = None) -> Iterator[None]:
    """A tmpfs (or a bind mount of `bind`) at `point`, unmounted at the end wherever it is then
    inside `within`; skips the test where mounting is not permitted (not root, no mount
    command, a container without the capability)."""
    point.mkdir(parents=True, exist_ok=True)
    command = ["mount", "--bind", str(bind), str(point)] if bind else ["mount", "-t", "tmpfs"]
    if not bind:
        command += ["seqpack-test", str(point)]
    if not sys.platform.startswith("linux") or shutil.which("mount") is None:
        pytest.skip("mounting needs Linux and the mount command")
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here: {done.stderr.strip()}")
    try:
        yield
    finally:
        # Wherever it is now: a run that moved it (the old bug) must not leave it mounted.
        for mount in reversed(mounts_inside(within)):
            subprocess.run(["umount", "-l", str(mount)], check=False)


def _foreign_device(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """Make `os.lstat` report another device for `directory` (found by inode, so it follows
    the directory through renames), as for a filesystem mounted there."""
    inode, real_lstat = os.lstat(directory).st_ino, os.lstat

    def lstat(path, *args, **kwargs):
        info = real_lstat(path, *args, **kwargs)
        if info.st_ino != inode:
            return info
        fields = list(info[:10])
        fields[2] = info.st_dev + 1  # st_dev
        return os.stat_result(fields)

    monkeypatch.setattr(os, "lstat", lstat)


# ---- a real mount (root only) -----------------------------------------------------------------


@pytest.mark.parametrize("role", ["tokens", "pools"])
@pytest.mark.parametrize("kind", ["tmpfs", "bind"])
def test_a_volume_mounted_inside_the_output_is_refused_and_kept(
    tmp_path: Path, role: str, kind: str
) -> None:
    inputs = write_token_files(tmp_path, _SEQUENCES)
    out = tmp_path / "out"
    assert _prepare(inputs, out)[0] == 0
    # The store (or the pools) kept on a volume of its own, holding the files the run wrote.
    kept = tmp_path / "kept"
    shutil.copytree(out / role, kept)
    shutil.rmtree(out / role)
    with _mounted(out / role, tmp_path, bind=kept if kind == "bind" else None):
        if kind == "tmpfs":
            for item in kept.iterdir():
                shutil.copy(item, out / role / item.name)
        before = _tree(out)
        code, stderr = _prepare(inputs, out, "--overwrite")
        line = _one_line(stderr)
        assert code == 1
        assert f"has another filesystem mounted at {out / role}" in line
        assert "unmount it" in line and "--output" in line
        assert _tree(out) == before and _hidden(tmp_path) == []
        assert load_prepared(out).counts


def test_removing_a_tree_stops_at_a_real_mount(tmp_path: Path) -> None:
    top = tmp_path / "top"
    (top / "a").mkdir(parents=True)
    (top / "a" / "file").write_text("ours")
    with _mounted(top / "a" / "volume", tmp_path):
        (top / "a" / "volume" / "tokens.npy").write_text("not ours")
        assert mounts_inside(top) == [top / "a" / "volume"]
        assert remove_tree(top) == [top / "a" / "volume"]
        assert (top / "a" / "volume" / "tokens.npy").read_text() == "not ours"
        assert sorted(p.name for p in top.rglob("*")) == ["a", "tokens.npy", "volume"]


# ---- another st_dev reported for one directory (every machine) --------------------------------


def _write(path: Path, **kwargs) -> Path:
    return write_prepared(
        path,
        counts={3: 2, 5: 1},
        templates={(5, 3): 1, (3,): 1},
        pools={3: [1, 2], 5: [0]},
        manifest={"config": {"max_seq_len": 10}},
        **kwargs,
    )


def test_the_check_names_the_mount_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _write(tmp_path / "out")
    before = _tree(out)
    _foreign_device(monkeypatch, out / "pools")
    with pytest.raises(ConfigError, match=r"has another filesystem mounted at .*pools") as caught:
        _write(out, overwrite=True)
    assert "overwrite=True" in str(caught.value) and "unmount it" in str(caught.value)
    assert _tree(out) == before and _hidden(tmp_path) == []


def test_the_replaced_copy_is_removed_up_to_a_mount_that_came_after_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A volume mounted between the check and the swap: it moves aside with the old copy, which
    # is then removed around it, never through it.
    out = _write(tmp_path / "out")
    (out / "pools" / "volume").mkdir()
    (out / "pools" / "volume" / "3.npy").write_bytes(b"not ours")
    _foreign_device(monkeypatch, out / "pools" / "volume")
    monkeypatch.setattr(output_checks_module, "check_no_mounts_inside", lambda output: None)
    monkeypatch.setattr(output_checks_module, "_foreign_entries", lambda output: [])
    with caplog.at_level(logging.WARNING):
        _write(out, overwrite=True)
    assert load_prepared(out).counts == {3: 2, 5: 1}
    [left] = _hidden(tmp_path)
    assert (tmp_path / left / "pools" / "volume" / "3.npy").read_bytes() == b"not ours"
    assert sorted(p.name for p in (tmp_path / left).rglob("*")) == ["3.npy", "pools", "volume"]
    [warning] = [record.getMessage() for record in caplog.records]
    assert "another filesystem is mounted there" in warning and "volume" in warning


def test_a_leftover_sibling_holding_a_mount_is_removed_around_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the old bug left behind: a killed run's temporary sibling with the mount inside.
    out = _write(tmp_path / "out")
    leftover = tmp_path / ".out.seqpack-tmp-999999999-0123abcd"
    (leftover / "tokens").mkdir(parents=True)
    (leftover / "tokens" / "tokens.npy").write_bytes(b"not ours")
    (leftover / "counts.json").write_text("{}")
    _foreign_device(monkeypatch, leftover / "tokens")
    recover_siblings(out)
    assert _tree(leftover) == {"tokens/tokens.npy": b"not ours"}


def test_removing_a_tree_deletes_all_of_it_on_one_filesystem(tmp_path: Path) -> None:
    top = tmp_path / "top"
    (top / "a" / "b").mkdir(parents=True)
    (top / "a" / "b" / "f").write_text("x")
    (top / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "g").write_text("kept")
    assert mounts_inside(top) == [] and remove_tree(top) == []
    assert not top.exists() and (tmp_path / "outside" / "g").read_text() == "kept"
