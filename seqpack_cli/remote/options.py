"""`--storage-option KEY=VALUE`: parsing, checking per scheme, and where credentials come from.

Credentials and endpoints come first from the usual places (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE and ~/.aws/credentials, AWS_ENDPOINT_URL[_S3],
AWS_REGION; GOOGLE_APPLICATION_CREDENTIALS; HF_TOKEN): storage options are for the rest, and win
over the environment. Each key is checked against the scheme it is used with, so a typo is one
line naming the keys that scheme takes, not an option silently ignored.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from seqpack_cli.errors import ConfigError, option

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_MAX_ATTEMPTS",
    "KEYS",
    "Settings",
    "check_storage_options",
    "credential_source",
    "parse_storage_options",
    "settings_for",
]

DEFAULT_CONNECT_TIMEOUT_S = 5.0
"""Seconds to wait for a connection: short, so an unreachable endpoint fails fast."""

DEFAULT_MAX_ATTEMPTS = 3
"""Tries per request (the first and two retries) before an error is reported."""

_COMMON = ("connect_timeout", "max_attempts")
KEYS: dict[str, tuple[str, ...]] = {
    "s3": (
        *_COMMON,
        "endpoint_url",
        "region",
        "anonymous",
        "access_key_id",
        "secret_access_key",
        "session_token",
    ),
    "gs": (*_COMMON, "endpoint_url", "anonymous", "access_token", "project_id"),
    # fsspec's HTTP reader does not retry; huggingface_hub keeps its own timeouts
    # (HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT): no key here would be honoured.
    "http": ("connect_timeout",),
    "https": ("connect_timeout",),
    "hf": ("endpoint_url", "token"),
}
"""The storage options each scheme takes."""

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_storage_options(pairs: Iterable[str]) -> dict[str, str]:
    """`["endpoint_url=http://127.0.0.1:9000", "anonymous=true"]` -> a dict of strings.

    Keys are lower-cased and `-` becomes `_` (`endpoint-url` is `endpoint_url`); whether a key
    fits a scheme is checked when it is used (`settings_for`).

    Args:
        pairs: the values of `--storage-option`, each `KEY=VALUE`.

    Returns:
        The options by key; a later pair wins over an earlier one with the same key.

    Raises:
        ConfigError: a pair without `=`, with an empty key, or a key no scheme takes.
    """
    known = sorted({key for keys in KEYS.values() for key in keys})
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().lower().replace("-", "_")
        if not sep or not key:
            raise ConfigError(
                f"{option('storage_option')} {pair!r} is not KEY=VALUE; write it as e.g. "
                f"{option('storage_option')} endpoint_url=http://127.0.0.1:9000"
            )
        if key not in known:
            raise ConfigError(
                f"{option('storage_option')} {pair!r}: unknown key {key!r}; the keys are "
                f"{', '.join(known)}"
            )
        options[key] = value.strip()
    return options


@dataclass(frozen=True)
class Settings:
    """The checked storage options for one scheme, environment defaults applied."""

    scheme: str
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    endpoint_url: str | None = None
    region: str | None = None
    anonymous: bool = False
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    access_token: str | None = None
    project_id: str | None = None
    token: str | None = None


def check_storage_options(options: Mapping[str, str], schemes: Iterable[str]) -> None:
    """Refuse a storage option that none of the inputs' schemes takes.

    One set of `--storage-option`s serves every input, so with s3:// and https:// inputs
    together `endpoint_url` is meant for s3 only: a key is wrong when no scheme in use takes it.

    Args:
        options: from `parse_storage_options`.
        schemes: the normalised schemes of the inputs (`s3`, `gs`, `http`, `https`, `hf`).

    Raises:
        ConfigError: a key that no scheme in `schemes` takes, naming what they take.
    """
    used = sorted(set(schemes))
    allowed = sorted({key for scheme in used for key in KEYS[scheme]})
    for key, value in options.items():
        if key not in allowed:
            where = ", ".join(f"{scheme}://" for scheme in used)
            raise ConfigError(
                f"{option('storage_option')} {key}={value} does not apply to {where} inputs; "
                f"{where} {'takes' if len(used) == 1 else 'take'} {', '.join(allowed) or 'none'}"
            )


def settings_for(scheme: str, options: Mapping[str, str]) -> Settings:
    """The typed settings of `scheme` from `options` (keys of other schemes left out).

    Args:
        scheme: a normalised scheme (`s3`, `gs`, `http`, `https`, `hf`).
        options: from `parse_storage_options` (checked by `check_storage_options`).

    Returns:
        The settings; for s3 the endpoint falls back to AWS_ENDPOINT_URL_S3, then
        AWS_ENDPOINT_URL (the AWS SDK inside pyarrow does not read them).

    Raises:
        ConfigError: a value of the wrong kind.
    """
    options = {key: value for key, value in options.items() if key in KEYS[scheme]}
    endpoint = options.get("endpoint_url")
    if scheme == "s3" and not endpoint:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise ConfigError(
            f"{option('storage_option')} endpoint_url={endpoint} is not an http:// or https:// "
            "URL; write it as e.g. endpoint_url=http://127.0.0.1:9000"
        )
    return Settings(
        scheme=scheme,
        connect_timeout_s=_positive(options, "connect_timeout", float, DEFAULT_CONNECT_TIMEOUT_S),
        max_attempts=int(_positive(options, "max_attempts", int, DEFAULT_MAX_ATTEMPTS)),
        endpoint_url=endpoint or None,
        region=options.get("region") or None,
        anonymous=_boolean(options, "anonymous"),
        access_key_id=options.get("access_key_id") or None,
        secret_access_key=options.get("secret_access_key") or None,
        session_token=options.get("session_token") or None,
        access_token=options.get("access_token") or None,
        project_id=options.get("project_id") or None,
        token=options.get("token") or None,
    )


def _positive(options: Mapping[str, str], key: str, kind: type, default: float) -> float:
    text = options.get(key)
    if text is None:
        return default
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value <= 0:
        raise ConfigError(
            f"{option('storage_option')} {key}={text} is not a positive "
            f"{'integer' if kind is int else 'number'}; write e.g. {key}={int(default)}"
        )
    return float(value)


def _boolean(options: Mapping[str, str], key: str) -> bool:
    text = options.get(key, "false").lower()
    if text not in _TRUE + _FALSE:
        raise ConfigError(
            f"{option('storage_option')} {key}={options[key]} is not a boolean; write "
            f"{key}=true or {key}=false"
        )
    return text in _TRUE


def credential_source(settings: Settings) -> str:
    """Where the credentials for `settings` come from, in words, for an access-denied line.

    Args:
        settings: from `settings_for`.

    Returns:
        e.g. "the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables".
    """
    if settings.anonymous:
        return "anonymous access (storage option anonymous=true)"
    if settings.scheme == "s3":
        return _aws_source(settings)
    if settings.scheme == "gs":
        if settings.access_token:
            return "the access token given as a storage option"
        path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
        if path:
            return f"the service account file {path} (GOOGLE_APPLICATION_CREDENTIALS)"
        return "Google's application default credentials (gcloud auth application-default login)"
    if settings.scheme == "hf":
        if settings.token:
            return "the token given as a storage option"
        if os.environ.get("HF_TOKEN"):
            return "the HF_TOKEN environment variable"
        return "the token saved by `hf auth login`, if any"
    return "no credentials (plain HTTP requests)"


def _aws_source(settings: Settings) -> str:
    if settings.access_key_id:
        return "the access key given as storage option access_key_id"
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return "the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY environment variables"
    credentials = Path(
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE", Path.home() / ".aws" / "credentials")
    )
    profile = os.environ.get("AWS_PROFILE")
    if profile:
        return f"profile {profile} (AWS_PROFILE) in {credentials} and ~/.aws/config"
    if credentials.is_file():
        return f"the default profile in {credentials}"
    return (
        "none found (no AWS_ACCESS_KEY_ID, no AWS_PROFILE, no ~/.aws/credentials; "
        "the instance metadata service, if any)"
    )
