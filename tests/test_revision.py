from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparql_ext import Head, Instant, Ordinal, RevisionId, RevisionSyntaxError, parse_revision


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
