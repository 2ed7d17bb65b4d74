"""The one error base of the server, and the errors of the extended-SPARQL layer (each knows where in the user's
text it happened).

Every package raises its own family under ``ConcentratorError`` (``sparql_ext``: ``SparqlExtError``; ``store``:
``StoreError``; ``engine``: ``EngineError``; ``rules``: ``RuleError``; ``pipeline``: ``PipelineError``;
``protocol``: ``HttpProblem``), where the problem is known, with the HTTP status it should become
(``status_hint``, as h11's ``ProtocolError``); ``protocol/errors.py`` turns them into responses in one place.
"""

from __future__ import annotations

from collections.abc import Mapping


class ConcentratorError(Exception):
    """An error raised on purpose: a message that names the problem (and how to fix it) and a status hint."""

    status_hint = 500

    def __init__(self, message: str, *, status_hint: int | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status_hint is not None:
            self.status_hint = status_hint
        self.headers = dict(headers or {})  # response headers that go with it (e.g. Elements-Committed)

    def with_context(self, more: str, headers: Mapping[str, str]) -> ConcentratorError:
        """The same error, told with what the caller knows besides (how far an upload got), and more headers."""
        told = ConcentratorError(f"{self.message}\n{more}", status_hint=self.status_hint,
                                 headers={**self.headers, **headers})
        told.__cause__ = self
        return told


class SparqlExtError(ConcentratorError):
    """Base of every error raised by ``sparql_ext``."""

    status_hint = 400


class QuerySyntaxError(SparqlExtError):
    """A syntax error at a position of the text the user sent (not of any rewritten text)."""

    def __init__(self, message: str, text: str, offset: int) -> None:
        self.line, self.column = line_and_column(text, offset)
        self.offset = offset
        super().__init__(f"Syntax error at line {self.line} column {self.column}: {message}")


class NestingTooDeep(SparqlExtError):
    """Brackets (and ``!``) nested deeper than ``sparql_ext.lexer.MAX_NESTING``: refused before pyoxigraph's recursive
    parser, whose stack a few thousand levels overflow (killing the process). Not a ``QuerySyntaxError``: text that
    is otherwise passed on to pyoxigraph unparsed must never pass with it."""

    def __init__(self, text: str, offset: int, limit: int) -> None:
        self.line, self.column = line_and_column(text, offset)
        self.offset, self.limit = offset, limit
        super().__init__(f"Syntax error at line {self.line} column {self.column}: brackets ({{, (, [ or <<) and ! are "
                         f"nested more than {limit} deep here; this server refuses deeper queries, updates and rules")


class UnsupportedOperation(SparqlExtError):
    """A well-formed request this service refuses (e.g. ``LOAD`` of a remote document)."""

    status_hint = 501


class ProtocolConflict(SparqlExtError):
    """Protocol parameters that contradict the request text (e.g. ``using-graph-uri`` + ``WITH``)."""


class RevisionSyntaxError(SparqlExtError):
    """A revision designator that is not one of HEAD, HEAD~n, UUID, ordinal or xsd:dateTime."""


class InstantSyntaxError(RevisionSyntaxError):
    """A value that must be an ``xsd:dateTime`` with timezone (a revision, a punctuation, a timestamp) and is not,
    or is finer than the microsecond stream times keep; the message names the value as the caller calls it."""


class WindowRefSyntaxError(SparqlExtError):
    """A ``WINDOWS=`` WindowRef that does not parse; the message names the bad part and the whole ref."""


class ReportSyntaxError(SparqlExtError):
    """A report policy list or stream operator that does not parse; the message names the bad part."""


def line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of ``offset`` in ``text``.

    >>> line_and_column("ab\\ncd", 4)
    (2, 2)
    """
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column
