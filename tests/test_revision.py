from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparql_ext import Head, Instant, Ordinal, RevisionId, RevisionSyntaxError, parse_revision
from sparql_ext.errors import InstantSyntaxError
from sparql_ext.revision import parse_datetime_stamp
from sparql_ext.windowing import to_micros


@pytest.mark.parametrize(("text", "expected"), [
    ("HEAD", Head(0)),
    ("HEAD~0", Head(0)),
    ("HEAD~12", Head(12)),
    ("7", Ordinal(7)),
    ("0", Ordinal(0)),
    ("b3e1c2d4-1111-4222-8333-944445555666",
     RevisionId(uuid.UUID("b3e1c2d4-1111-4222-8333-944445555666"))),
    ("urn:uuid:b3e1c2d4-1111-4222-8333-944445555666",
     RevisionId(uuid.UUID("b3e1c2d4-1111-4222-8333-944445555666"))),
    ("2016-06-20T10:00:00Z", Instant(datetime(2016, 6, 20, 10, tzinfo=UTC))),
    ("2016-06-20T10:00:00+02:00",
     Instant(datetime(2016, 6, 20, 10, tzinfo=timezone(timedelta(hours=2))))),
    # a '+' decoded into a space by a form decoder (Jena sends it raw)
    ("2016-06-20T10:00:00 02:00",
     Instant(datetime(2016, 6, 20, 10, tzinfo=timezone(timedelta(hours=2))))),
])
def test_designators(text: str, expected: object) -> None:
    assert parse_revision(text) == expected


@pytest.mark.parametrize(("text", "named"), [
    ("HEAD~", "HEAD~"),
    ("HEAD~x", "HEAD~x"),
    ("head", "head"),
    ("-1", "-1"),
    ("2016-06-20T10:00:00", "without a timezone"),
    ("2016-13-20T10:00:00Z", "2016-13-20T10:00:00Z"),
    ("PT5M", "PT5M"),
    ("", "''"),
])
def test_bad_designators_name_the_value(text: str, named: str) -> None:
    with pytest.raises(RevisionSyntaxError) as info:
        parse_revision(text)
    assert named in str(info.value)


@given(st.integers(min_value=0, max_value=10**9))
def test_head_offsets_round_trip(n: int) -> None:
    assert parse_revision(f"HEAD~{n}") == Head(n)
    assert parse_revision(str(n)) == Ordinal(n)


@given(st.text(max_size=40))
def test_any_text_parses_or_raises_revision_syntax_error(text: str) -> None:
    try:
        parse_revision(text)
    except RevisionSyntaxError as error:
        assert repr(text.strip())[:10] in str(error) or "timezone" in str(error)


@pytest.mark.parametrize("lexical, expected", [
    ("2016-06-20T10:00:00Z", datetime(2016, 6, 20, 10, tzinfo=UTC)),
    ("2016-06-20T10:00:00.5+02:00", datetime(2016, 6, 20, 10, 0, 0, 500_000, timezone(timedelta(hours=2)))),
    ("2016-06-20T10:00:00.123456-14:00", datetime(2016, 6, 20, 10, 0, 0, 123_456, timezone(timedelta(hours=-14)))),
    ("2016-06-20T10:00:00.1234560Z", datetime(2016, 6, 20, 10, 0, 0, 123_456, tzinfo=UTC)),  # zeros past µs
    ("12016-06-20T10:00:00Z", None),  # a 5-digit year: Python's datetime has none
    ("2016-13-20T10:00:00Z", None),
    ("2016-06-20T10:00:00+14:01", None),
    ("2016-06-20T10:00:00", None),
    ("20160620T100000Z", None),  # ISO 8601's basic form, which fromisoformat reads and XSD has not
    ("2016-06-20T10:00:00.0000001Z", None),
])
def test_timestamps_common_and_general_forms(lexical: str, expected: datetime | None) -> None:
    """Upload timestamps take a fast path for the common form; every form gives what XSD says (hand values)."""
    if expected is None:
        with pytest.raises(InstantSyntaxError):
            parse_datetime_stamp(lexical, "t")
        return
    parsed = parse_datetime_stamp(lexical, "t")
    assert parsed == expected and parsed.utcoffset() == expected.utcoffset()
    assert to_micros(parsed) == round((expected - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1e6)
