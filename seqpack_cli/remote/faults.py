"""What went wrong with a remote input, as one line that names the URL and the fix.

pyarrow reports S3 and GCS failures as `OSError`s whose text carries the SDK's error name
(`NO_SUCH_BUCKET`, `ACCESS_DENIED`, `NETWORK_CONNECTION`...); fsspec and huggingface_hub raise
their own classes. `describe_failure` sorts any of them into the kinds a user acts on
differently: no such bucket, no such object, access denied (naming the credential source
tried), endpoint unreachable (naming the timeout and attempts) and anything else (the
library's own words, on one line).
"""

from __future__ import annotations

from seqpack_cli.errors import InputError, option
from seqpack_cli.remote.options import Settings, credential_source
from seqpack_cli.remote.urls import parse_url

__all__ = [
    "NOT_FOUND",
    "classify",
    "describe_failure",
    "no_such_bucket",
    "no_such_object",
    "remote_error",
]

NOT_FOUND = "not_found"

_KINDS: dict[str, tuple[str, ...]] = {
    "no_bucket": ("NO_SUCH_BUCKET", "NoSuchBucket", "The specified bucket does not exist"),
    "denied": (
        "ACCESS_DENIED",
        "INVALID_ACCESS_KEY_ID",
        "SIGNATURE_DOES_NOT_MATCH",
        "HTTP status 403",
        "HTTP status 401",
        "PermissionDenied",
        "Forbidden",
        "Unauthorized",
        "GatedRepoError",
        "401 Client Error",
        "403 Client Error",
    ),
    "unreachable": (
        "NETWORK_CONNECTION",
        "Could not connect",
        "Could not resolve",
        "Connection refused",
        "Cannot connect to host",
        "ConnectError",
        "ConnectTimeout",
        "Name or service not known",
        "timed out",
        "Timeout",
        "UNAVAILABLE",
    ),
    NOT_FOUND: (
        "NO_SUCH_KEY",
        "NoSuchKey",
        "Path does not exist",
        "FileNotFoundError",
        "RepositoryNotFoundError",
        "RevisionNotFoundError",
        "EntryNotFoundError",
        "HTTP status 404",
        "404",
    ),
}


def classify(error: BaseException) -> str:
    """The kind of a failure: `no_bucket`, `denied`, `unreachable`, `not_found` or `other`.

    Args:
        error: what a filesystem call raised.

    Returns:
        The first kind whose markers appear in the error's class names or text.
    """
    # fsspec's HTTP info() turns any failure, a refused connection too, into a
    # FileNotFoundError raised from it: the cause says what happened.
    cause = error.__cause__ or error.__context__
    if isinstance(error, FileNotFoundError) and cause is not None:
        kind = classify(cause)
        if kind != "other":
            return kind
    names = " ".join(cls.__name__ for cls in type(error).__mro__)
    text = f"{names} {error}"
    if isinstance(error, FileNotFoundError):
        return NOT_FOUND
    for kind, markers in _KINDS.items():
        if any(marker in text for marker in markers):
            return kind
    return "other"


def describe_failure(url: str, error: BaseException, settings: Settings) -> str:
    """One line for a failed request on `url`: what happened and what to do.

    Args:
        url: the input URL the request was for.
        error: what the filesystem raised.
        settings: the storage settings in force (for the credential source and the timeout).

    Returns:
        The message (no trailing newline, never several lines).
    """
    kind = classify(error)
    if kind == "no_bucket":
        return no_such_bucket(url, settings)
    if kind == "denied":
        return (
            f"{url}: access denied with {credential_source(settings)}; give credentials that "
            f"may read it (environment variables, a profile, {option('storage_option')}), or "
            "anonymous=true for public data"
        )
    if kind == "unreachable":
        endpoint = settings.endpoint_url or f"the {settings.scheme} service"
        return (
            f"{url}: cannot reach {endpoint} ({_patience(settings)}); check the network and the "
            f"endpoint{_longer(settings)}"
        )
    if kind == NOT_FOUND:
        return no_such_object(url)
    detail = " ".join(str(error).split()) or type(error).__name__
    return f"{url}: {detail}"


def no_such_bucket(url: str, settings: Settings) -> str:
    """The line for an s3:// or gs:// input whose bucket is not there (at the endpoint used)."""
    bucket = parse_url(url).root
    return (
        f"{url}: no such bucket {bucket}; check the bucket name (and the endpoint: "
        f"{settings.endpoint_url or 'the provider default'})"
    )


def no_such_object(url: str) -> str:
    """The line for an object (or prefix, or hub repository) that is not there."""
    if url.startswith("hf://"):
        return (
            f"{url}: no such repository, revision or file; check the URL "
            "(hf://datasets/org/name[@revision]/path) and, for a private or gated one, the token"
        )
    return f"{url}: no such object or prefix; check the key (listings are case-sensitive)"


def _patience(settings: Settings) -> str:
    """How long seqpack waited, as the settings of each scheme make it."""
    if settings.scheme == "s3":
        return (
            f"connect timeout {settings.connect_timeout_s:g} s, {settings.max_attempts} attempt(s)"
        )
    if settings.scheme == "gs":
        seconds = settings.connect_timeout_s * settings.max_attempts
        return f"retried for up to {seconds:g} s"
    if settings.scheme in ("http", "https"):
        return f"connect timeout {settings.connect_timeout_s:g} s, 1 attempt"
    return "huggingface_hub's timeouts: HF_HUB_ETAG_TIMEOUT, HF_HUB_DOWNLOAD_TIMEOUT"


def _longer(settings: Settings) -> str:
    if settings.scheme == "hf":
        return ", or raise HF_HUB_ETAG_TIMEOUT"
    return f", or raise {option('storage_option')} connect_timeout=SECONDS"


def remote_error(url: str, error: BaseException, settings: Settings) -> InputError:
    """`describe_failure` as the `InputError` to raise (`raise remote_error(...) from None`)."""
    return InputError(describe_failure(url, error, settings))
