"""The one wording of a missing column (`input_batches.missing_column_error`), which the
footers, text, token, table and remote checks all raise."""

from __future__ import annotations

import pytest

from seqpack_cli.errors import InputError
from seqpack_cli.prepare.input_batches import check_columns, missing_column_error


def test_the_message_names_the_column_its_option_the_columns_and_the_fix() -> None:
    error = missing_column_error(
        "Len", "a.parquet", ["len", "ids"], option_name="length_column", role="length"
    )
    assert str(error) == (
        "length column 'Len' (length_column) is not in a.parquet; its columns are: len, ids; "
        "pass one of them as length_column (names are matched exactly: did you mean 'len'?)"
    )


def test_many_columns_are_cut_to_twenty_and_no_option_asks_for_a_name() -> None:
    names = [f"c{k}" for k in range(30)]
    text = str(missing_column_error("x", "s3://b/k.parquet", names))
    assert text.startswith("column 'x' is not in s3://b/k.parquet; its columns are: c0, c1,")
    assert "c19, ...; name one of them" in text and "c20" not in text


def test_check_columns_reports_the_first_missing_in_order() -> None:
    check_columns("t", ["a", "b"], {"a": "length_column", "b": None})  # nothing missing
    with pytest.raises(InputError) as error:
        check_columns("t", ["a"], {"a": "length_column", "z": "id_column", "y": None})
    expected = "column 'z' is not in t; its columns are: a; pass one of them as id_column"
    assert str(error.value) == expected
