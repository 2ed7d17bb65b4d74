"""Extended SPARQL (seed 003): parsing and rewriting to SPARQL 1.1. Pure: no I/O."""

from sparql_ext.errors import (
    InstantSyntaxError,
    ProtocolConflict,
    QuerySyntaxError,
    ReportSyntaxError,
    RevisionSyntaxError,
    SparqlExtError,
    UnsupportedOperation,
    WindowRefSyntaxError,
)
from sparql_ext.event_matching import EventMatcher
from sparql_ext.event_syntax import EventQuery, parse_events
from sparql_ext.events import (
    Consumption,
    ElementRef,
    Equals,
    EqualsOptional,
    Event,
    EventFilter,
    EventOrderError,
    EventPattern,
    EventPatternError,
    EventStateError,
    EventWindow,
    Filtered,
    First,
    Join,
    Last,
    LeftJoin,
    Match,
    MatchClause,
    OptionalSeq,
    Selection,
    Seq,
    Union,
)
from sparql_ext.extended import (
    PLACEHOLDER,
    THEN_FUNCTION,
    ExtendedQuery,
    ExtensionPart,
    parse_extended,
)
from sparql_ext.reporting import Reporter, ReportPolicy, ReportSpec, StreamOperator, parse_report
from sparql_ext.revision import (
    Head,
    Instant,
    Ordinal,
    RevisionDesignator,
    RevisionId,
    parse_instant,
    parse_revision,
)
from sparql_ext.templates import QuadTemplate
from sparql_ext.update import DEFAULT_GRAPH, Operation, split_update
from sparql_ext.windowing import (
    Element,
    ElementIndex,
    ListIndex,
    Window,
    WindowNotResolvable,
    WindowSpec,
    bind_origin,
    bounds,
    from_micros,
    is_complete,
    resolve,
    to_micros,
    window,
    windows,
)
from sparql_ext.windowref import WindowRef, format_duration, format_revision, parse_window_ref

__all__ = [
    "DEFAULT_GRAPH", "Head", "Instant", "InstantSyntaxError", "Operation", "Ordinal", "ProtocolConflict",
    "QuerySyntaxError", "RevisionDesignator", "RevisionId", "RevisionSyntaxError",
    "SparqlExtError", "UnsupportedOperation", "parse_instant", "parse_revision", "split_update",
    "Element", "ElementIndex", "ListIndex", "Window", "WindowNotResolvable", "WindowRef", "WindowRefSyntaxError",
    "WindowSpec", "bind_origin", "bounds", "format_duration", "format_revision", "from_micros", "is_complete",
    "parse_window_ref", "resolve", "to_micros", "window", "windows",
    "ReportPolicy", "ReportSpec", "ReportSyntaxError", "Reporter", "StreamOperator", "parse_report",
    "PLACEHOLDER", "THEN_FUNCTION", "ExtendedQuery", "ExtensionPart", "QuadTemplate", "parse_extended",
    "Consumption", "ElementRef", "Equals", "EqualsOptional", "Event", "EventFilter", "EventMatcher", "EventOrderError",
    "EventPattern", "EventPatternError", "EventQuery", "EventStateError", "EventWindow", "Filtered", "First", "Join",
    "Last", "LeftJoin", "Match", "MatchClause", "OptionalSeq", "Selection", "Seq", "Union", "parse_events",
]
