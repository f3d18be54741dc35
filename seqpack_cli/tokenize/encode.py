"""The three encoders: plain text, chat messages, prompt/completion pairs.

Each takes one batch of rows (a list, or a pyarrow array) and returns one `Encoded`. Tokenizing
is the `tokenizers` library's `encode_batch` (Rust threads, the GIL released); rendering chat
templates is Python (Jinja), which `workers=` can spread over processes (see `encode_messages`).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any, Literal

import numpy as np

from seqpack_cli.errors import ConfigError, first_line, option
from seqpack_cli.tokenize.chat import CompiledTemplate
from seqpack_cli.tokenize.encoded import Encoded, concatenate, join, spans_mask
from seqpack_cli.tokenize.loading import TokenizerSpec
from seqpack_cli.tokenize.optional import import_jinja2
from seqpack_cli.tokenize.rows import TokenizeError, check_messages, check_texts

__all__ = [
    "TrainOn",
    "chat_template",
    "encode_messages",
    "encode_prompt_completion",
    "encode_text",
    "worker_pool",
]

logger = logging.getLogger(__name__)

TrainOn = Literal["assistant", "all"]


def _check_not_empty(ids: Sequence[Sequence[int]], first_row: int, what: str) -> None:
    for index, row in enumerate(ids):
        if not row:
            raise TokenizeError(
                first_row + index, f"{what} gives zero tokens; drop the row or fill it"
            )


def encode_text(
    spec: TokenizerSpec,
    batch: Any,
    *,
    add_special_tokens: bool = True,
    column: str = "text",
    first_row: int = 0,
) -> Encoded:
    """Plain text (pretraining): each row's ids as `tokenizer(text)["input_ids"]` gives them.

    Args:
        spec: the tokenizer (`load_tokenizer`).
        batch: the rows, strings (a list or a pyarrow string array).
        add_special_tokens: let the tokenizer's post-processor add its BOS/EOS (True), or not.
        column: the column's name, for messages.
        first_row: the index of the batch's first row, for messages.

    Returns:
        `Encoded` with `loss_mask=None`.

    Raises:
        TokenizeError: a NULL or non-string row, or a row of zero tokens.
    """
    texts = check_texts(batch, column=column, first_row=first_row)
    encodings = spec.tokenizer.encode_batch_fast(texts, add_special_tokens=add_special_tokens)
    ids = [encoding.ids for encoding in encodings]
    _check_not_empty(ids, first_row, f"column {column!r}'s text")
    return concatenate(ids, None, spec.vocab_size)


def chat_template(spec: TokenizerSpec, column: str = "messages") -> CompiledTemplate:
    """The tokenizer's chat template, compiled: the one check that chats of `column` can be
    rendered, made before any row is read (by `encode_messages` and by `prepare`).

    Args:
        spec: the tokenizer.
        column: the messages column, for messages.

    Returns:
        The compiled template.

    Raises:
        ConfigError: the tokenizer has no chat template, or its template does not compile (one
            line naming `--tokenizer`, `--messages-column` and the fix).
        MissingDependencyError: `jinja2` is not installed.
    """
    folder = spec.path.parent
    if spec.chat_template is None:
        raise ConfigError(
            f"{option('tokenizer')} {folder} has no chat template, so "
            f"{option('messages_column')} {column} cannot be rendered; use a tokenizer whose "
            "tokenizer_config.json (or chat_template.jinja) holds one, or "
            f"{option('prompt_column')} and {option('completion_column')}"
        )
    jinja2 = import_jinja2()
    try:
        return CompiledTemplate(spec.chat_template, spec.special_tokens)
    except jinja2.TemplateSyntaxError as error:
        raise ConfigError(
            f"{option('tokenizer')} {folder}: its chat template does not compile (line "
            f"{error.lineno}: {first_line(error)}), so {option('messages_column')} {column} cannot "
            "be rendered; fix the template in tokenizer_config.json or chat_template.jinja"
        ) from None


def _render(
    template: CompiledTemplate,
    conversations: list[list[dict[str, str]]],
    train_on: TrainOn,
    first_row: int,
) -> tuple[list[str], list[list[tuple[int, int]]] | None]:
    """Each chat's text, and the character spans to train on (None: every token)."""
    chats, all_spans = [], []
    for index, messages in enumerate(conversations):
        try:
            if train_on == "all":
                chats.append(template.render(messages))
                continue
            if template.marked:
                chat, spans = template.render_with_spans(messages)
            else:
                split = template.split_assistant_spans(messages)
                if isinstance(split, int):
                    raise TokenizeError(
                        first_row + index,
                        f"message {split}: the chat template renders the messages before it "
                        "differently once the turn follows, so the assistant text cannot be "
                        "found; add {% generation %} markers to the template or use "
                        f"{option('train_on')} all",
                    )
                chat, spans = split
        except TokenizeError:
            raise
        except Exception as error:  # the template's raise_exception, or a Jinja error
            raise TokenizeError(
                first_row + index,
                f"the chat template failed: {first_line(error)}; fix the row or template",
            ) from None
        chats.append(chat)
        all_spans.append(spans)
    return chats, None if train_on == "all" else all_spans


def _encode_chats(
    spec: TokenizerSpec,
    template: CompiledTemplate,
    conversations: list[list[dict[str, str]]],
    train_on: TrainOn,
    first_row: int,
) -> Encoded:
    chats, spans = _render(template, conversations, train_on, first_row)
    # The template writes the BOS itself: transformers tokenizes a chat without special tokens.
    # Only the mask needs the offsets; without one, the faster batch call skips them.
    encode = spec.tokenizer.encode_batch_fast if spans is None else spec.tokenizer.encode_batch
    encodings = encode(chats, add_special_tokens=False)
    ids = [encoding.ids for encoding in encodings]
    _check_not_empty(ids, first_row, "the rendered chat")
    if spans is None:
        encoded = concatenate(ids, None, spec.vocab_size)
        return Encoded(encoded.lengths, encoded.tokens, np.ones(len(encoded.tokens), np.uint8))
    masks = [
        spans_mask(encoding.offsets, row_spans)
        for encoding, row_spans in zip(encodings, spans, strict=True)
    ]
    return concatenate(ids, masks, spec.vocab_size)


def _encode_chats_in_worker(
    spec: TokenizerSpec,
    column: str,
    conversations: list[list[dict[str, str]]],
    train_on: TrainOn,
    first_row: int,
) -> Encoded:
    # A compiled template does not pickle: each worker compiles its own (cached per process).
    return _encode_chats(spec, chat_template(spec, column), conversations, train_on, first_row)


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """A process pool for `encode_messages(..., executor=)`, made once per job and reused.

    Its processes are spawned, not forked: a fork of a process whose `tokenizers` thread pool
    has run makes the library turn its parallelism off in the child (with a warning).

    Args:
        workers: the number of processes.

    Returns:
        The pool; the caller shuts it down (`with worker_pool(2) as pool: ...`).
    """
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))


def encode_messages(
    spec: TokenizerSpec,
    batch: Any,
    *,
    train_on: TrainOn = "assistant",
    workers: int = 1,
    executor: Executor | None = None,
    column: str = "messages",
    first_row: int = 0,
) -> Encoded:
    """Chats: the tokenizer's chat template rendered, tokenized and masked as transformers 5's
    `apply_chat_template(messages, tokenize=True, return_dict=True,
    return_assistant_tokens_mask=True)` does.

    The chat is rendered without a generation prompt and tokenized without special tokens (the
    template writes the BOS). `train_on="assistant"` keeps, in a template with `{% generation %}`
    markers, every token overlapping a marked block (transformers' mask); in a template without
    markers, every token overlapping an assistant turn's text as `split_assistant_spans` defines
    it: between the rendering of the messages before the turn with `add_generation_prompt=True`
    and the rendering that includes the turn (its content and the end-of-turn text the template
    writes after it; the assistant header is not kept). `train_on="all"` keeps every token.

    Args:
        spec: the tokenizer; it needs a chat template.
        batch: the rows, lists of `{role, content}` (a list, or a pyarrow list<struct> array); a
            NULL content is the empty string, other keys reach the template unchanged.
        train_on: "assistant" or "all".
        workers: processes that render and tokenize, each a share of the rows (1: this
            process). On a 2-core machine one process is as fast as two processes or two
            threads (3,000 chats: 1.55 s, 1.50-1.65 s, 1.60 s): `encode_batch` already keeps both
            cores busy and rendering is ~6% of the time (benchmarks/bench_tokenize_kernel.py).
            More workers pay where templates are heavy or cores are many.
        executor: a pool to reuse across batches (`worker_pool(workers)`; any `Executor`, a
            thread pool too); without one, `workers > 1` spawns a pool for this call (~0.7 s).
        column: the column's name, for messages.
        first_row: the index of the batch's first row, for messages.

    Returns:
        `Encoded` with the loss mask.

    Raises:
        ConfigError: the tokenizer has no chat template (or one that does not compile), or
            `train_on`/`workers` is invalid.
        TokenizeError: a bad message (no role or content, a non-string content), a template
            error, or a chat of zero tokens.
    """
    if train_on not in ("assistant", "all"):
        raise ConfigError(
            f"{option('train_on')} {train_on!r} is not one of 'assistant', 'all'; pick one"
        )
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers={workers!r} is not a positive integer; give 1 or more")
    template = chat_template(spec, column)  # no template: fails before any row is read
    if train_on == "assistant" and not template.marked:
        logger.debug("no {%% generation %%} markers: masks from the prompt/answer split")
    conversations = check_messages(batch, column=column, first_row=first_row)
    if (workers == 1 and executor is None) or len(conversations) < 2:
        return _encode_chats(spec, template, conversations, train_on, first_row)
    pool = executor or worker_pool(workers)
    try:
        parts = workers
        bounds = np.linspace(0, len(conversations), parts + 1).astype(int)
        futures = [
            pool.submit(
                _encode_chats_in_worker,
                spec,
                column,
                conversations[start:end],
                train_on,
                first_row + int(start),
            )
            for start, end in itertools.pairwise(bounds)
            if end > start
        ]
        return join([future.result() for future in futures], spec.vocab_size)
    finally:
        if executor is None:
            pool.shutdown()


def encode_prompt_completion(
    spec: TokenizerSpec,
    prompts: Any,
    completions: Any,
    *,
    add_special_tokens: bool = True,
    prompt_column: str = "prompt",
    completion_column: str = "completion",
    first_row: int = 0,
) -> Encoded:
    """Prompt/completion pairs (TRL's convention): the tokens of `prompt + completion`, the mask
    keeping the completion.

    The pair is one text, `prompt + completion`, tokenized with the tokenizer's special tokens
    (unless `add_special_tokens=False`): the post-processor's leading tokens (BOS) come first
    and are masked 0, its trailing tokens (EOS) come last and are kept (1: the model learns to
    stop). Between them, a token is a
    completion token (1) when its characters reach past the prompt's end; so when the prompt
    tokenized alone is a prefix of the pair's text tokens (the usual case), exactly those
    prompt tokens are 0. A token merged across the boundary counts as the completion's.

    Args:
        spec: the tokenizer.
        prompts: the prompt rows, strings.
        completions: the completion rows, strings, as many.
        add_special_tokens: let the tokenizer's post-processor add its BOS/EOS (True), or not.
        prompt_column: the prompts' column, for messages.
        completion_column: the completions' column, for messages.
        first_row: the index of the batch's first row, for messages.

    Returns:
        `Encoded` with the loss mask.

    Raises:
        TokenizeError: a NULL or non-string prompt or completion, a completion of zero tokens.
    """
    prompt_texts = check_texts(prompts, column=prompt_column, first_row=first_row)
    completion_texts = check_texts(completions, column=completion_column, first_row=first_row)
    if len(prompt_texts) != len(completion_texts):
        raise ConfigError(
            f"{len(prompt_texts)} prompts but {len(completion_texts)} completions; "
            "give both columns of the same rows"
        )
    texts = [p + c for p, c in zip(prompt_texts, completion_texts, strict=True)]
    encodings = spec.tokenizer.encode_batch(texts, add_special_tokens=add_special_tokens)
    ids, masks = [], []
    for index, (encoding, prompt) in enumerate(zip(encodings, prompt_texts, strict=True)):
        # sequence_ids: None for the post-processor's tokens, 0 for the text's.
        is_text = np.asarray([sequence is not None for sequence in encoding.sequence_ids], bool)
        ends = np.asarray([end for _, end in encoding.offsets], dtype=np.int64).reshape(-1)
        completion = is_text & (ends > len(prompt))
        if not completion.any():
            raise TokenizeError(
                first_row + index,
                f"column {completion_column!r} gives zero tokens; drop the row or fill it",
            )
        text_positions = np.flatnonzero(is_text)
        trailing = np.arange(len(is_text)) > text_positions[-1]
        masks.append((completion | trailing).astype(np.uint8))
        ids.append(encoding.ids)
    return concatenate(ids, masks, spec.vocab_size)
