"""Reading a local Hugging Face tokenizer: `load_tokenizer(path) -> TokenizerSpec`.

`path` is a `tokenizer.json` file or a directory holding one, with the optional
`tokenizer_config.json` (special tokens, `chat_template`) and `chat_template.jinja` files that
transformers reads too. Nothing is downloaded. As in transformers 5, the file's post-processor
decides BOS/EOS: a config's `add_bos_token`/`add_eos_token` are ignored when a tokenizer.json
exists (transformers drops them before building the tokenizer). The spec carries
the file's text (so it pickles to worker processes) and what the manifest records about it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqpack_cli.errors import ConfigError, MissingDependencyError, first_line, option
from seqpack_cli.tokenize.optional import import_tokenizers

__all__ = ["SPECIAL_TOKEN_NAMES", "TokenizerSpec", "load_tokenizer", "tokenizer_file"]

# The named special tokens transformers passes to a chat template (its SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
_RECORDED = ("bos", "eos", "pad", "unk")
logger = logging.getLogger(__name__)

# One built `tokenizers.Tokenizer` per tokenizer file (by sha256) in each process: building one
# parses the whole JSON, so encoders and worker processes reuse it.
_BUILT: dict[str, Any] = {}
_BUILT_LOCK = threading.Lock()


@dataclass(frozen=True)
class TokenizerSpec:
    """A tokenizer read from disk: everything encoding needs, and nothing live (it pickles).

    Attributes:
        path: the `tokenizer.json` file read.
        tokenizer_json: its text.
        sha256: the sha256 of its bytes.
        special_tokens: the named special tokens (`bos_token`, ...) found in
            `tokenizer_config.json`, as strings; absent names are left out.
        chat_template: the chat template (`chat_template.jinja` first, then the config's
            `chat_template`, its "default" entry for the list form), or None.
        tokenizer_class: the config's `tokenizer_class`, or None.
        rebuilt: whether `tokenizer_json` is the pipeline transformers built for that class
            (see `load_tokenizer`) rather than the file's text.
    """

    path: Path
    tokenizer_json: str = field(repr=False)
    sha256: str
    special_tokens: dict[str, str]
    chat_template: str | None = field(repr=False)
    tokenizer_class: str | None = None
    rebuilt: bool = False

    @property
    def tokenizer(self) -> Any:
        """The `tokenizers.Tokenizer`, built once per process."""
        with _BUILT_LOCK:
            key = f"{self.sha256}:{self.tokenizer_class if self.rebuilt else ''}"
            built = _BUILT.get(key)
            if built is None:
                built = self._build()
                _BUILT[key] = built
            return built

    def _build(self) -> Any:
        return import_tokenizers().Tokenizer.from_str(self.tokenizer_json)

    @functools.cached_property
    def vocab_size(self) -> int:
        """One more than the largest token id (added tokens included); read once, since the
        vocabulary is a dict of every token (128k for Llama 3)."""
        return max(self.tokenizer.get_vocab(with_added_tokens=True).values()) + 1

    def token_id(self, name: str) -> int | None:
        """The id of a named special token.

        Args:
            name: "bos_token", "eos_token", ... (`SPECIAL_TOKEN_NAMES`).

        Returns:
            Its id, or None when the config does not name it or the vocabulary lacks it.
        """
        token = self.special_tokens.get(name)
        return None if token is None else self.tokenizer.token_to_id(token)

    def record(self) -> dict[str, Any]:
        """The manifest's entry for this tokenizer.

        Returns:
            `{"sha256", "vocab_size", "special_tokens": {"bos": {"token", "id"}, ...},
            "chat_template_sha256", "tokenizer_class"}`; bos/eos/pad/unk appear where the
            config names them, the template's hash is None without a template.
        """
        special = {
            short: {
                "token": self.special_tokens[f"{short}_token"],
                "id": self.token_id(f"{short}_token"),
            }
            for short in _RECORDED
            if f"{short}_token" in self.special_tokens
        }
        template = self.chat_template
        return {
            "sha256": self.sha256,
            "vocab_size": self.vocab_size,
            "special_tokens": special,
            "chat_template_sha256": (
                None if template is None else hashlib.sha256(template.encode("utf-8")).hexdigest()
            ),
            "tokenizer_class": self.tokenizer_class,
        }


def _fail(path: Path, problem: str, fix: str) -> ConfigError:
    return ConfigError(f"{option('tokenizer')} {path}: {problem}; {fix}")


def _read_json(path: Path, tokenizer_path: Path, raw: bytes | None = None) -> Any:
    """`path`'s JSON (from `raw`, its bytes, when read already); `ConfigError` naming the file."""
    try:
        return json.loads((path.read_bytes() if raw is None else raw).decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _not_json(path, tokenizer_path, error) from None


def _not_json(path: Path, tokenizer_path: Path, error: Exception) -> ConfigError:
    return _fail(
        tokenizer_path,
        f"{path.name} is not readable JSON ({first_line(error)})",
        "give a Hugging Face tokenizer directory or its tokenizer.json",
    )


def _token_text(value: Any) -> str | None:
    """A special token as a config writes it: a string, or a serialized AddedToken."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _template(config: dict[str, Any], folder: Path | None, path: Path) -> str | None:
    # transformers 5 reads chat_template.jinja over the config's chat_template.
    if folder is not None and (folder / "chat_template.jinja").is_file():
        return (folder / "chat_template.jinja").read_text(encoding="utf-8")
    template = config.get("chat_template")
    if template is None or isinstance(template, str):
        return template
    if isinstance(template, list):
        named = {
            entry.get("name"): entry.get("template")
            for entry in template
            if isinstance(entry, dict)
        }
        if isinstance(named.get("default"), str):
            return str(named["default"])
    raise _fail(
        path,
        "tokenizer_config.json's chat_template is neither a string nor a list naming 'default'",
        "name one template 'default'",
    )


# Classes that load tokenizer.json as written; a model's own class (Qwen2Tokenizer,
# LlamaTokenizer, ...) rebuilds the pipeline in transformers 5 (its normalizer, pre-tokenizer,
# post-processor), so the same file can tokenize differently there.
_GENERIC_CLASSES = (None, "PreTrainedTokenizerFast", "TokenizersBackend")


def _rebuilt_by_transformers(folder: Path, tokenizer_class: str) -> str | None:
    """The pipeline transformers builds for `tokenizer_class` from `folder`, as tokenizer.json
    text; None (with a warning) where transformers is missing or cannot load it."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        logger.warning(
            "%s: tokenizer_class %s is rebuilt by transformers 5, which is not installed; "
            "tokenizing with tokenizer.json as written, which may differ from transformers",
            folder,
            tokenizer_class,
        )
        return None
    try:
        loaded = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        return str(loaded.backend_tokenizer.to_str())
    except Exception as error:  # any failure of a model class: fall back to the file
        logger.warning(
            "%s: transformers cannot load tokenizer_class %s (%s); tokenizing with "
            "tokenizer.json as written",
            folder,
            tokenizer_class,
            error,
        )
        return None


def tokenizer_file(path: str | Path) -> Path:
    """The `tokenizer.json` that `path` names: the file itself, or the one in the directory.

    Args:
        path: a `tokenizer.json` file, or a directory holding one.

    Returns:
        The file's path.

    Raises:
        ConfigError: the path is missing, or the directory holds no tokenizer.json (one line
            naming `--tokenizer` and the path).
    """
    path = Path(path)
    if not path.exists():
        raise _fail(path, "no such file or directory", "give a tokenizer.json or its directory")
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise _fail(
            path,
            "the directory holds no tokenizer.json",
            "save the tokenizer with save_pretrained() (a fast tokenizer) or point to its file",
        )
    return file


def load_tokenizer(path: str | Path) -> TokenizerSpec:
    """Read a local tokenizer.

    Args:
        path: a `tokenizer.json` file, or a directory holding `tokenizer.json` and optionally
            `tokenizer_config.json` and `chat_template.jinja`.

    Where `tokenizer_config.json` names a model's own `tokenizer_class` (not
    PreTrainedTokenizerFast/TokenizersBackend), transformers 5 rebuilds the pipeline from its
    class, so the spec encodes with the pipeline transformers builds (when transformers is
    installed; otherwise tokenizer.json as written, with a warning). The record's sha256 is
    always the file's.

    Returns:
        The `TokenizerSpec` (the tokenizer itself is built, and checked, here).

    Raises:
        ConfigError: the path is missing, a directory has no tokenizer.json, or a file is not
            readable JSON or not a tokenizer (one line naming `--tokenizer` and the path).
        MissingDependencyError: the `tokenizers` package is not installed.
    """
    path = Path(path)
    file = tokenizer_file(path)
    folder = path if path.is_dir() else None
    raw = file.read_bytes()
    try:
        file_text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _not_json(file, path, error) from None
    config: dict[str, Any] = {}
    if folder is not None and (folder / "tokenizer_config.json").is_file():
        loaded = _read_json(folder / "tokenizer_config.json", path)
        config = loaded if isinstance(loaded, dict) else {}
    special = {
        name: text for name in SPECIAL_TOKEN_NAMES if (text := _token_text(config.get(name)))
    }
    tokenizer_class = config.get("tokenizer_class")
    tokenizer_class = tokenizer_class if isinstance(tokenizer_class, str) else None
    rebuilt = None
    if folder is not None and tokenizer_class not in _GENERIC_CLASSES:
        _read_json(file, path, raw)  # a file that is not JSON: one error, not transformers' warning
        rebuilt = _rebuilt_by_transformers(folder, str(tokenizer_class))
    spec = TokenizerSpec(
        path=file,
        tokenizer_json=rebuilt or file_text,
        sha256=hashlib.sha256(raw).hexdigest(),
        special_tokens=special,
        chat_template=_template(config, folder, path),
        tokenizer_class=tokenizer_class,
        rebuilt=rebuilt is not None,
    )
    try:
        spec.tokenizer  # noqa: B018 - builds it, so a broken file fails here, not mid-job
    except MissingDependencyError:
        raise
    except Exception as error:  # tokenizers raises its own Exception for a bad model
        # Parsed here only, not on every load (~75 ms for a 10 MB file): a file that is
        # not JSON at all is named as such.
        _read_json(file, path, raw)
        raise _fail(
            path,
            f"tokenizer.json is not a tokenizer ({first_line(error)})",
            "re-save it with the tokenizers library",
        ) from None
    return spec
