"""The remote layer without a server: URLs, globs, storage options, credential sources, hf://.

Parsing needs no network, so these run anywhere; hf:// is tested here only for its URL parsing
and its error lines (the Hub cannot be reached from the test machine: an endpoint on a closed
port stands for an unreachable one).
"""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from remote_servers import closed_port

from seqpack_cli.errors import ConfigError, InputError, MissingDependencyError
from seqpack_cli.prepare import inputs as local_inputs
from seqpack_cli.remote import arrow_filesystem, is_remote, parse_storage_options, parse_url
from seqpack_cli.remote import listing as remote_listing
from seqpack_cli.remote.options import check_storage_options, credential_source, settings_for
from seqpack_cli.remote.urls import RemoteURL, glob_pattern


@pytest.mark.parametrize(
    ("text", "remote"),
    [
        ("s3://bucket/key.parquet", True),
        ("gs://bucket/", True),
        ("https://host/f.parquet", True),
        ("hf://datasets/org/name", True),
        ("ftp://host/f.parquet", True),  # remote, and refused by parse_url with a line
        ("data/train.parquet", False),
        ("/abs/path/x.parquet", False),
        ("C:/data/x.parquet", False),
        ("s3:/bucket/one-slash", False),
    ],
)
def test_is_remote(text: str, remote: bool) -> None:
    assert is_remote(text) is remote


@pytest.mark.parametrize(
    ("text", "parsed", "canonical"),
    [
        ("s3://bucket/data/a.parquet", RemoteURL("s3", "bucket", "data/a.parquet"), None),
        ("S3://bucket", RemoteURL("s3", "bucket", ""), "s3://bucket/"),
        ("gcs://b//k.parquet", RemoteURL("gs", "b", "k.parquet"), "gs://b/k.parquet"),
        (
            "https://host:8080/d/f.parquet",
            RemoteURL("https", "https://host:8080", "d/f.parquet"),
            None,
        ),
        (
            "hf://datasets/org/name/train/0.parquet",
            RemoteURL("hf", "datasets/org/name", "train/0.parquet"),
            None,
        ),
        (
            "hf://datasets/org/name@refs/convert/parquet/default/train/0.parquet",
            RemoteURL("hf", "datasets/org/name", "default/train/0.parquet", "refs/convert/parquet"),
            None,
        ),
        (
            "hf://datasets/org/name@refs/pr/3/data/",
            RemoteURL("hf", "datasets/org/name", "data/", "refs/pr/3"),
            None,
        ),
        (
            "hf://datasets/org/name@v1.0/data/*.parquet",
            RemoteURL("hf", "datasets/org/name", "data/*.parquet", "v1.0"),
            None,
        ),
        (
            "hf://org/model/w.parquet",
            RemoteURL("hf", "models/org/model", "w.parquet"),
            "hf://models/org/model/w.parquet",
        ),
    ],
)
def test_parse_url(text: str, parsed: RemoteURL, canonical: str | None) -> None:
    assert parse_url(text) == parsed
    assert parsed.url == (canonical or text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ftp://host/f.parquet", "input ftp://host/f.parquet has the scheme ftp://, which seqpack"),
        ("s3:///key.parquet", "input s3:///key.parquet names no bucket"),
        ("https:///f.parquet", "input https:///f.parquet names no host"),
        ("hf://datasets/org", "input hf://datasets/org names no repository"),
        ("hf://datasets/org/name@/x", "input hf://datasets/org/name@/x has an empty repository"),
        ("data/x.parquet", "input 'data/x.parquet' is not a URL"),
    ],
)
def test_bad_urls_are_one_line(text: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_url(text)
    assert str(caught.value).startswith(message), str(caught.value)


def test_hf_paths_inside_the_filesystem() -> None:
    pytest.importorskip("huggingface_hub")
    options = {"endpoint_url": f"http://127.0.0.1:{closed_port()}"}
    assert arrow_filesystem("hf://datasets/org/name@v2/a/b.parquet", options)[1] == (
        "datasets/org/name@v2/a/b.parquet"
    )
    assert arrow_filesystem("hf://org/m/x.parquet", options)[1] == "models/org/m/x.parquet"


def test_an_unreachable_hub_is_one_line() -> None:
    pytest.importorskip("huggingface_hub")
    port = closed_port()
    with pytest.raises(InputError) as caught:
        remote_listing.resolve_remote(
            ["hf://datasets/org/name@v1/data/*.parquet"],
            {"endpoint_url": f"http://127.0.0.1:{port}"},
        )
    assert str(caught.value).startswith(
        f"hf://datasets/org/name@v1/data/*.parquet: cannot reach http://127.0.0.1:{port} "
        "(huggingface_hub's timeouts"
    ), str(caught.value)


def _reference_match(pattern: list[str], key: list[str]) -> bool:
    """Segment-wise glob matching, the rules written out: `**` takes any number of segments."""
    if not pattern:
        return not key
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_reference_match(rest, key[skip:]) for skip in range(len(key) + 1))
    return bool(key) and fnmatch.fnmatchcase(key[0], head) and _reference_match(rest, key[1:])


_SEGMENT = st.text("ab.", min_size=1, max_size=3)
_PATTERN_SEGMENT = st.one_of(
    _SEGMENT, st.sampled_from(["*", "a*", "*.b", "?", "?a", "[ab]", "[!a]*", "**"])
)


# A segment that each wildcard segment matches: keys built from them match the pattern, so
# half the examples are matches (random keys alone almost never are).
_INSTANCES = {"*": "ab", "a*": "a.", "*.b": "a.b", "?": "b", "?a": "ba", "[ab]": "a", "[!a]*": "b"}


@given(
    pattern=st.lists(_PATTERN_SEGMENT, min_size=1, max_size=4).filter(lambda p: p[-1] != "**"),
    random_key=st.lists(_SEGMENT, min_size=1, max_size=5),
    derive=st.booleans(),
    spans=st.lists(st.lists(_SEGMENT, max_size=2), min_size=4, max_size=4),
)
def test_glob_patterns_match_as_segment_wise_globs(
    pattern: list[str], random_key: list[str], derive: bool, spans: list[list[str]]
) -> None:
    if not any(char in "/".join(pattern) for char in "*?["):
        pattern = [*pattern[:-1], pattern[-1] + "*"]
    key = random_key
    if derive:  # `**` spans 0-2 random segments, the others take their instance
        key = []
        for index, segment in enumerate(pattern):
            key += spans[index] if segment == "**" else [_INSTANCES.get(segment, segment)]
        key = [part.rstrip("*") or "a" for part in key]
    prefix, regex = glob_pattern("/".join(pattern))
    matched = regex.match("/".join(key)) is not None
    assert matched == _reference_match(pattern, key)
    if matched:
        assert "/".join(key).startswith(prefix)  # listing under the prefix finds every match


def test_the_suffixes_are_those_of_local_inputs() -> None:
    assert remote_listing.PARQUET_SUFFIXES == local_inputs.PARQUET_SUFFIXES
    assert remote_listing.JSONL_SUFFIXES == local_inputs.JSONL_SUFFIXES


def test_parse_storage_options() -> None:
    assert parse_storage_options(
        ["endpoint-url=http://127.0.0.1:9000", "Region = eu-west-1", "anonymous=true", "region=x=y"]
    ) == {"endpoint_url": "http://127.0.0.1:9000", "region": "x=y", "anonymous": "true"}
    assert parse_storage_options([]) == {}


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("endpoint_url", "storage_option 'endpoint_url' is not KEY=VALUE"),
        ("=x", "storage_option '=x' is not KEY=VALUE"),
        ("endpoint=http://x", "storage_option 'endpoint=http://x': unknown key 'endpoint'"),
    ],
)
def test_bad_storage_options_are_one_line(pair: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_storage_options(["region=x", pair])
    assert str(caught.value).startswith(message), str(caught.value)
    assert caught.value.cli_message().startswith("--storage-option")


@pytest.mark.parametrize(
    ("scheme", "options", "message"),
    [
        ("s3", {"anonymous": "maybe"}, "storage_option anonymous=maybe is not a boolean"),
        ("s3", {"connect_timeout": "0"}, "storage_option connect_timeout=0 is not a positive"),
        ("s3", {"max_attempts": "two"}, "storage_option max_attempts=two is not a positive int"),
        ("s3", {"endpoint_url": "127.0.0.1:9000"}, "storage_option endpoint_url=127.0.0.1:9000"),
    ],
)
def test_storage_options_are_checked_per_scheme(
    scheme: str, options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_for(scheme, options)
    assert str(caught.value).startswith(message), str(caught.value)


@pytest.mark.parametrize(
    ("schemes", "options", "message"),
    [
        (["https"], {"region": "x"}, "storage_option region=x does not apply to https:// inputs"),
        (["hf"], {"max_attempts": "2"}, "storage_option max_attempts=2 does not apply to hf://"),
        (
            ["https", "hf", "https"],
            {"connect_timeout": "3", "anonymous": "true"},
            "storage_option anonymous=true does not apply to hf://, https:// inputs; hf://, "
            "https:// take connect_timeout, endpoint_url, token",
        ),
    ],
)
def test_a_storage_option_no_input_takes_is_refused(
    schemes: list[str], options: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        check_storage_options(options, schemes)
    assert str(caught.value).startswith(message), str(caught.value)


def test_one_set_of_storage_options_serves_every_scheme() -> None:
    # endpoint_url is for the s3 inputs; the https ones take only their own key.
    options = {"endpoint_url": "http://127.0.0.1:9000", "connect_timeout": "2"}
    check_storage_options(options, ["s3", "https"])
    assert settings_for("https", options).endpoint_url is None
    assert settings_for("https", options).connect_timeout_s == 2
    assert settings_for("s3", options).endpoint_url == "http://127.0.0.1:9000"


def test_the_credential_source_in_words(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert credential_source(settings_for("s3", {})).startswith("none found (no AWS_ACCESS_KEY_ID")
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text("[default]\n")
    assert credential_source(settings_for("s3", {})) == (
        f"the default profile in {tmp_path / '.aws' / 'credentials'}"
    )
    assert credential_source(settings_for("s3", {"anonymous": "yes"})).startswith("anonymous")
    assert credential_source(settings_for("hf", {})) == "the token saved by `hf auth login`, if any"
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    assert credential_source(settings_for("hf", {})) == "the HF_TOKEN environment variable"


def test_a_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiohttp", None)  # `import aiohttp` now fails
    # A timeout no other test uses: a filesystem built earlier is not reused from the cache.
    with pytest.raises(MissingDependencyError) as caught:
        arrow_filesystem("https://host/f.parquet", {"connect_timeout": "7.125"})
    assert str(caught.value).startswith("reading https:// inputs needs the 'aiohttp' package")
    assert str(caught.value).endswith("install the remote extra: pip install 'seqpack-cli[remote]'")


def test_an_unreachable_gcs_endpoint_is_one_line_with_its_retry_limit() -> None:
    port = closed_port()
    options = {
        "endpoint_url": f"http://127.0.0.1:{port}",
        "anonymous": "true",
        "connect_timeout": "0.25",
        "max_attempts": "2",
    }
    with pytest.raises(InputError) as caught:
        remote_listing.resolve_remote(["gs://bucket/data/"], options)
    assert str(caught.value).startswith(
        f"gs://bucket/data/: cannot reach http://127.0.0.1:{port} (retried for up to 0.5 s)"
    ), str(caught.value)
