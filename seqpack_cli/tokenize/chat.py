"""Chat templates rendered as transformers 5 renders them, with the character spans to train on.

The Jinja environment copies `transformers.utils.chat_template_utils`: an
`ImmutableSandboxedEnvironment` with `trim_blocks`/`lstrip_blocks`, the loop controls, the
`{% generation %}` tag, `raise_exception`, `strftime_now`, the `tojson` filter (no HTML escaping),
`dict` and a namespace that refuses underscore names; the template sees `messages`, `tools=None`,
`documents=None`, `add_generation_prompt` and the tokenizer's named special tokens (`bos_token`,
...). `CompiledTemplate.render_with_spans` returns the text and the spans of its
`{% generation %}` blocks; `CompiledTemplate.split_assistant_spans` gives the spans of a
template without markers (see its docstring).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from seqpack_cli.tokenize.optional import import_jinja2

__all__ = ["CompiledTemplate", "has_generation_markers"]

Span = tuple[int, int]
_GENERATION_TAG = re.compile(r"\{\%-?\s*generation\s*-?\%\}")


def has_generation_markers(template: str) -> bool:
    """Whether `template` marks its assistant text with `{% generation %}` (transformers' test)."""
    return _GENERATION_TAG.search(template) is not None


class CompiledTemplate:
    """A compiled chat template and the special tokens it sees.

    Args:
        template: the Jinja source.
        special_tokens: the named special tokens (`bos_token`, ...) passed as variables.
    """

    def __init__(self, template: str, special_tokens: Mapping[str, str]) -> None:
        self.source = template
        self.marked = has_generation_markers(template)
        self._template = _compile(template)
        self._variables = dict(special_tokens)

    def render(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = False) -> str:
        """The rendered chat.

        Args:
            messages: the checked messages (`rows.check_messages`).
            add_generation_prompt: end with the assistant header, as for generation.

        Returns:
            The text.
        """
        return str(
            self._template.render(
                messages=messages,
                tools=None,
                documents=None,
                add_generation_prompt=add_generation_prompt,
                **self._variables,
            )
        )

    def render_with_spans(self, messages: list[dict[str, Any]]) -> tuple[str, list[Span]]:
        """The rendered chat and what its `{% generation %}` blocks wrote.

        Args:
            messages: the checked messages.

        Returns:
            `(chat, spans)`: the text (no generation prompt) and the `[start, end)` character
            spans of its generation blocks, in the order they closed.
        """
        blocks: list[str] = []
        spans: list[Span] = []
        with self._template.environment.track_generation(blocks, spans):
            for block in self._template.generate(
                messages=messages,
                tools=None,
                documents=None,
                add_generation_prompt=False,
                **self._variables,
            ):
                blocks.append(block)
        return "".join(blocks), spans

    def split_assistant_spans(self, messages: list[dict[str, Any]]) -> tuple[str, list[Span]] | int:
        """The rendered chat and, for a template without markers, each assistant turn's span.

        Assistant turn `i` (a message whose role is "assistant") keeps the characters between
        the rendering of `messages[:i]` with `add_generation_prompt=True` (the prompt, ending in
        the assistant header) and the rendering of `messages[:i + 1]` without it: the turn's
        content and whatever the template writes after it (an end-of-turn token, a newline).

        Args:
            messages: the checked messages.

        Returns:
            `(chat, spans)`, or the index of the first assistant turn whose prompt is not a
            prefix of the chat (the template is not incremental: it needs generation markers).
        """
        chat = self.render(messages)
        spans = []
        for turn, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            prompt = self.render(messages[:turn], add_generation_prompt=True) if turn else ""
            upto = self.render(messages[: turn + 1])
            if not (upto.startswith(prompt) and chat.startswith(upto)):
                return turn
            spans.append((len(prompt), len(upto)))
        return chat, spans


@functools.lru_cache(maxsize=8)
def _compile(template: str) -> Any:
    jinja2 = import_jinja2()
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from jinja2.utils import Namespace

    class GenerationTracker(Extension):
        """`{% generation %}...{% endgeneration %}`: renders its body and, while tracking,
        records the body's span in the text rendered so far."""

        tags = {"generation"}  # noqa: RUF012 - Jinja's own class attribute

        def __init__(self, environment: Any) -> None:
            super().__init__(environment)
            environment.extend(track_generation=self.track_generation)
            # A context variable, as in transformers: each thread renders with its own tracker.
            self._tracking: ContextVar[tuple[list[str], list[Span]] | None] = ContextVar(
                "generation_tracker", default=None
            )

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            call = self.call_method("_generation_support")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _generation_support(self, caller: Any) -> str:
            text = str(caller())
            tracking = self._tracking.get()
            if tracking is not None:
                blocks, spans = tracking
                start = sum(map(len, blocks))
                spans.append((start, start + len(text)))
            return text

        @contextmanager
        def track_generation(self, blocks: list[str], spans: list[Span]) -> Iterator[None]:
            token = self._tracking.set((blocks, spans))
            try:
                yield
            finally:
                self._tracking.reset(token)

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        # Jinja's own tojson escapes HTML characters; transformers' does not.
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(Namespace):
        # Namespaces refuse underscore names, so a template cannot reach CPython internals.
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace.check_name(name)
            Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace.check_name(name)
            Namespace.__setitem__(self, name, value)

        @staticmethod
        def check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    f"chat templates cannot store underscore attributes on a namespace: {name!r}"
                )

    environment = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTracker, loopcontrols]
    )
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    environment.globals["strftime_now"] = strftime_now
    environment.globals["dict"] = TemplateDict()
    environment.globals["namespace"] = TemplateNamespace
    return environment.from_string(template)
