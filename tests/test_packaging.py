"""The distribution is `seqpack-cli` (issue 21): the registry's `seqpack` is another project.

What a user installs from a hint must be this project: the built wheel's metadata, every install
command the code, docs and build files print, and the one line a torch-free environment gets for
a name that needs torch.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import seqpack_cli

ROOT = Path(__file__).resolve().parents[1]

# Where install hints live: the package, the docs, the build and CI files, the examples.
_HINT_SOURCES = [
    "seqpack_cli",
    "benchmarks",
    "examples",
    "README.md",
    "docs",
    "Makefile",
    ".ci/run",
]

# `seqpack[...]` and `pip install seqpack` name the registry's other project; `seqpack-cli[...]`
# and `pip install seqpack-cli` are this one. A command may wrap onto the next line of the docs.
_OTHER_PROJECT = re.compile(r"(?<![\w.-])seqpack\[|pip install\s+['\"]?seqpack(?![\w-])")


def _hint_files() -> list[Path]:
    files: list[Path] = []
    for name in _HINT_SOURCES:
        path = ROOT / name
        if path.is_dir():
            files += [p for p in sorted(path.rglob("*")) if p.suffix in (".py", ".md", ".sql")]
        elif path.exists():
            files.append(path)
    return files


def test_no_install_hint_names_the_other_projects_distribution() -> None:
    files = _hint_files()
    assert ROOT / "README.md" in files and ROOT / "seqpack_cli" / "masking.py" in files
    wrong = []
    for path in files:
        text = path.read_text()
        for match in _OTHER_PROJECT.finditer(text):
            number = text.count("\n", 0, match.start()) + 1
            wrong.append(f"{path.relative_to(ROOT)}:{number}: {match.group()!r}")
    assert wrong == [], "install hints that would install the registry's `seqpack`:\n" + "\n".join(
        wrong
    )


@pytest.mark.parametrize(
    ("line", "other"),
    [
        ("pip install 'seqpack[dask]'", True),
        ("pip install seqpack", True),
        ("`pip install\nseqpack` on every worker", True),
        ('pip install "seqpack[torch]"', True),
        ("pip install 'seqpack-cli[dask]'", False),
        ("pip install seqpack-cli", False),
        ("pip install '.[torch]'", False),
        ("import seqpack_cli", False),
    ],
)
def test_the_hint_check_tells_the_two_distributions_apart(line: str, other: bool) -> None:
    assert bool(_OTHER_PROJECT.search(line)) == other


def _build_wheel(tmp_path: Path) -> Path:
    """The wheel of a copy of the sources (the build writes build/ and *.egg-info beside them)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for name in ("seqpack_cli", "sql"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    command += ["--no-index", "--quiet", "--wheel-dir", str(wheels), str(source)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (wheel,) = wheels.glob("*.whl")
    return wheel


def test_the_wheel_is_seqpack_cli_with_its_extras_command_and_queries(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    wheel = _build_wheel(tmp_path)
    assert wheel.name == f"seqpack_cli-{seqpack_cli.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"seqpack_cli-{seqpack_cli.__version__}.dist-info"
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert metadata["Name"] == "seqpack-cli"
    # The version the manifest records is the one the wheel declares.
    assert metadata["Version"] == seqpack_cli.__version__
    extras = sorted(metadata.get_all("Provides-Extra"))
    assert {"dask", "dev", "hf", "tokenize", "torch"} <= set(extras), extras
    requires = metadata.get_all("Requires-Dist")
    assert 'torch>=2.5; extra == "torch"' in requires
    assert any(r.startswith("dask[distributed]") and 'extra == "dask"' in r for r in requires)
    assert not any(r.startswith("torch") and "extra" not in r for r in requires), requires
    assert 'transformers>=5.0; extra == "hf"' in requires
    assert "seqpack_cli/hf/attention.py" in names
    # Every subpackage is in the wheel (pyproject lists them by hand).
    packages = {
        p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "seqpack_cli").rglob("__init__.py")
    }
    assert all(f"{package}/__init__.py" in names for package in packages), packages
    assert "seqpack = seqpack_cli.__main__:main" in entry_points
    queries = sorted(p.name for p in (ROOT / "sql").glob("*.sql"))
    assert queries and all(f"seqpack_cli/sql/{q}" in names for q in queries)


# A fresh interpreter in which the packages named on its command line cannot be imported
# (installed or not): it imports each public name and prints, for each, "ok" or the error's class
# and message.
_WITHOUT = """
import importlib.abc, sys

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in sys.argv[1:]:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
import seqpack_cli
from seqpack_cli.errors import ConfigError, MissingDependencyError

for name in seqpack_cli.__all__:
    try:
        exec(f"from seqpack_cli import {name}")
    except MissingDependencyError as error:
        assert isinstance(error, ImportError) and isinstance(error, ConfigError)
        print(name, "MissingDependencyError", error, sep="\\t")
    except BaseException as error:
        print(name, type(error).__name__, error, sep="\\t")
    else:
        print(name, "ok", sep="\\t")
"""


def _import_every_name_without(*packages: str) -> dict[str, tuple[str, ...]]:
    """{public name: ("ok",) or (its error's class, message)}, imported without `packages`."""
    command = [sys.executable, "-c", _WITHOUT, *packages]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    outcomes = {}
    for line in result.stdout.splitlines():
        name, *outcome = line.split("\t")
        outcomes[name] = tuple(outcome)
    assert outcomes.keys() == set(seqpack_cli.__all__)
    return outcomes


def test_a_name_that_needs_torch_says_which_extra_to_install() -> None:
    outcomes = _import_every_name_without("torch")
    # Everything but the torch datasets imports without torch (the builders import it when
    # called); the datasets give one line naming the extra, never a bare ModuleNotFoundError.
    needs_torch = {name for name, outcome in outcomes.items() if outcome[0] != "ok"}
    assert needs_torch == {"PackedDataLoader", "PackedDataset", "PackedIterableDataset"}
    for name in needs_torch:
        assert outcomes[name] == (
            "MissingDependencyError",
            f"seqpack_cli.{name} needs torch, which is not installed: "
            "pip install 'seqpack-cli[torch]'",
        )


def test_a_broken_import_other_than_torch_is_not_reported_as_a_missing_extra() -> None:
    # Only a missing optional dependency becomes an install hint; a missing core dependency is
    # a broken environment and keeps its own error.
    outcomes = _import_every_name_without("torch", "numpy")
    assert outcomes["load_prepared"] == ("ModuleNotFoundError", "No module named 'numpy'")


def test_the_datasets_package_without_torch_says_which_extra_to_install() -> None:
    # `from seqpack_cli.data import PackedDataset` (the datasets' own package) gives the same
    # one line as the top-level name, not torch's bare "No module named 'torch'".
    code = _WITHOUT.split("import seqpack_cli\n")[0] + (
        "from seqpack_cli.errors import MissingDependencyError\n"
        "try:\n"
        "    from seqpack_cli.data import PackedDataset\n"
        "except MissingDependencyError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "torch"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'seqpack-cli[torch]'" in result.stdout
