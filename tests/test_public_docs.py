"""The public entry points document themselves (Google style, as `help()` and IDEs show them).

For every public class and function in `seqpack_cli.__all__` (exceptions aside) defined in one of
`DOCUMENTED_MODULES`, and every public method of such a class (and `__call__`): an `Args:` section
naming every parameter of the signature when it takes any (a class documents its constructor's),
and a `Returns:` or `Yields:` section when its return annotation is not None. The check reads the
signature with `inspect`, so a parameter added later without a line in `Args:` fails here.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import seqpack_cli
from seqpack_cli.errors import MissingDependencyError

DOCUMENTED_MODULES = frozenset(
    {
        "seqpack_cli.collate",
        "seqpack_cli.data.iterable",
        "seqpack_cli.data.loader",
        "seqpack_cli.data.map_style",
        "seqpack_cli.epoch.cursor",
        "seqpack_cli.epoch.plan",
        "seqpack_cli.masking",
        "seqpack_cli.packing.efficiency",
        "seqpack_cli.packing.histogram",
        "seqpack_cli.packing.per_sequence",
        "seqpack_cli.prepare.config",
        "seqpack_cli.prepare.job",
        "seqpack_cli.prepare.token_files",
        "seqpack_cli.prepared.format",
        "seqpack_cli.prepared.reader",
        "seqpack_cli.seeding",
        "seqpack_cli.token_sources",
    }
)

_SECTION = re.compile(r"^\s*(Args|Returns|Yields|Raises|Examples?|Notes?|Attributes):\s*$", re.M)


def _sections(doc: str) -> dict[str, str]:
    """A docstring's Google-style sections, title -> body (up to the next section)."""
    found = list(_SECTION.finditer(doc))
    ends = [match.start() for match in found[1:]] + [len(doc)]
    return {match.group(1): doc[match.end() : end] for match, end in zip(found, ends, strict=True)}


def _problems(obj: Callable[..., Any], *, is_class: bool = False) -> list[str]:
    """What `obj`'s docstring lacks: the `Args:` lines of its parameters, its `Returns:`."""
    signature = inspect.signature(obj)
    params = [name for name in signature.parameters if name not in ("self", "cls")]
    sections = _sections(inspect.getdoc(obj) or "")
    problems = []
    if params and "Args" not in sections:
        problems.append(f"no Args: section for {', '.join(params)}")
    elif params:
        missing = [p for p in params if not re.search(rf"\b{p}\b", sections["Args"])]
        if missing:
            problems.append(f"Args: does not name {', '.join(missing)}")
    returned = signature.return_annotation
    returns_something = returned not in (None, "None", inspect.Signature.empty)
    if not is_class and returns_something and not {"Returns", "Yields"} & set(sections):
        problems.append(f"returns {returned} but has no Returns:/Yields: section")
    return problems


def _methods(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """`cls`'s own public methods (and `__call__`), classmethods and staticmethods included."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__call__":
            continue
        function = value.__func__ if isinstance(value, (classmethod, staticmethod)) else value
        if inspect.isfunction(function):
            yield name, function


def _entry_points() -> Iterator[Any]:
    for name in seqpack_cli.__all__:
        if name == "__version__":
            continue
        try:
            obj = getattr(seqpack_cli, name)
        except MissingDependencyError as error:
            yield pytest.param(name, None, False, id=name, marks=pytest.mark.skip(str(error)))
            continue
        is_class = inspect.isclass(obj)
        if getattr(obj, "__module__", None) not in DOCUMENTED_MODULES:
            continue
        if is_class and issubclass(obj, BaseException):
            continue
        if not (is_class or inspect.isfunction(obj)):
            continue  # a type alias (BinTemplate)
        yield pytest.param(name, obj, is_class, id=name)
        if is_class:
            for method_name, method in _methods(obj):
                qualname = f"{name}.{method_name}"
                yield pytest.param(qualname, method, False, id=qualname)


@pytest.mark.parametrize(("name", "obj", "is_class"), list(_entry_points()))
def test_public_entry_point_documents_args_and_returns(name: str, obj: Any, is_class: bool) -> None:
    assert _problems(obj, is_class=is_class) == [], name


def test_the_check_catches_an_undocumented_parameter_and_result() -> None:
    def documented(length: int, *, seed: int = 0) -> int:
        """Sum.

        Args:
            length: a length.
            seed: a seed.

        Returns:
            The sum.
        """
        return length + seed

    def undocumented(length: int, *, seed: int = 0) -> int:
        """Sum.

        Args:
            length: a length; the keyword is not named here.
        """
        return length + seed

    class Sized:
        """A size.

        Args:
            size: its size.
        """

        def __init__(self, size: int, unnamed: int) -> None:
            self.size = size + unnamed

    assert _problems(documented) == []
    assert _problems(undocumented) == [
        "Args: does not name seed",
        "returns int but has no Returns:/Yields: section",
    ]
    assert _problems(Sized, is_class=True) == ["Args: does not name unnamed"]
