"""Remote inputs: objects on S3, GCS, HTTP(S) servers and the Hugging Face Hub, read in place.

The layer `seqpack prepare` uses for `s3://`, `gs://`, `https://` and `hf://` inputs: it
resolves URLs (objects, prefixes, globs) to a sorted list of objects with their identity, opens
them as seekable files or hands pyarrow a filesystem (so only the column chunks read are
fetched), and words every failure as one line naming the URL and the fix. It imports only
`errors` and pyarrow; fsspec, aiohttp and huggingface_hub (the `seqpack-cli[remote]` extra)
load when an https:// or hf:// input is used.

- `urls`: `is_remote`, `parse_url` -> `RemoteURL`, glob patterns; no network.
- `options`: `parse_storage_options`, the keys each scheme takes, credential sources in words.
- `filesystems`: `arrow_filesystem(url, options) -> (pyarrow FileSystem, path)`, one per scheme.
- `faults`: failures (no bucket, no object, denied, unreachable) sorted into one-line messages.
- `objects`: `RemoteFile`, `open_input` (random access), `open_stream` (front to back),
  `identity` (what the manifest records), `changed`.
- `listing`: `resolve_remote(inputs, options) -> list[RemoteFile]`: files, prefixes, globs.
"""

from seqpack_cli.remote.filesystems import arrow_filesystem
from seqpack_cli.remote.listing import resolve_remote
from seqpack_cli.remote.objects import RemoteFile, changed, identity, open_input, open_stream
from seqpack_cli.remote.options import parse_storage_options
from seqpack_cli.remote.urls import RemoteURL, is_remote, parse_url

__all__ = [
    "RemoteFile",
    "RemoteURL",
    "arrow_filesystem",
    "changed",
    "identity",
    "is_remote",
    "open_input",
    "open_stream",
    "parse_storage_options",
    "parse_url",
    "resolve_remote",
]
