"""The revision log as pure data: records, designator resolution, commit-time ordering.

A dataset is a log of transactions. Revision ``n`` is the state after the n-th transaction;
revision 0 is the empty state before the first. No I/O here: ``history`` persists the records.
"""

from __future__ import annotations

import bisect
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sparql_ext.revision import Head, Instant, Ordinal, RevisionDesignator, RevisionId
from store.errors import RevisionNotFound


@dataclass(frozen=True)
class Revision:
    """One committed transaction."""

    ordinal: int
    uuid: uuid.UUID
    committed_at: datetime  # UTC, strictly increasing along the log
    operation: str  # e.g. "gsp-put", "gsp-post", "gsp-delete", "update"
    inserted: int  # quads in the revision's insert delta
    deleted: int  # quads in the revision's delete delta

    def to_json(self) -> dict[str, object]:
        return {
            "ordinal": self.ordinal,
            "uuid": str(self.uuid),
            "committed_at": self.committed_at.isoformat(),
            "operation": self.operation,
            "inserted": self.inserted,
            "deleted": self.deleted,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Revision:
        return cls(
            ordinal=int(str(data["ordinal"])),
            uuid=uuid.UUID(str(data["uuid"])),
            committed_at=datetime.fromisoformat(str(data["committed_at"])),
            operation=str(data["operation"]),
            inserted=int(str(data["inserted"])),
            deleted=int(str(data["deleted"])),
        )


class RevisionLog:
    """The ordered list of revisions with look-ups by ordinal, UUID and instant."""

    def __init__(self, revisions: list[Revision] | None = None) -> None:
        self._revisions: list[Revision] = []
        self._by_uuid: dict[uuid.UUID, Revision] = {}
        for revision in revisions or []:
            self.append(revision)

    def __len__(self) -> int:
        return len(self._revisions)

    @property
    def head(self) -> int:
        """Ordinal of the latest revision (0 when nothing was ever committed)."""
        return len(self._revisions)

    def get(self, ordinal: int) -> Revision | None:
        return self._revisions[ordinal - 1] if 1 <= ordinal <= len(self._revisions) else None

    def since(self, ordinal: int) -> list[Revision]:
        """The revisions after ``ordinal``, oldest first."""
        return self._revisions[max(ordinal, 0) :]

    def next_revision(self, operation: str, inserted: int, deleted: int, now: datetime) -> Revision:
        """The record the next commit will append (commit time forced strictly increasing)."""
        committed_at = now.astimezone(UTC)
        if self._revisions and committed_at <= self._revisions[-1].committed_at:
            committed_at = self._revisions[-1].committed_at + timedelta(microseconds=1)
        return Revision(self.head + 1, uuid.uuid4(), committed_at, operation, inserted, deleted)

    def append(self, revision: Revision) -> None:
        if revision.ordinal != self.head + 1:
            raise ValueError(f"revision {revision.ordinal} appended after {self.head}")
        self._revisions.append(revision)
        self._by_uuid[revision.uuid] = revision

    def resolve(self, designator: RevisionDesignator, spelled: str) -> int:
        """The ordinal a designator names; ``spelled`` is the user's text, for messages."""
        head = self.head
        if isinstance(designator, Head):
            ordinal = head - designator.back
            if ordinal < 0:
                raise RevisionNotFound(
                    f"revision {spelled!r} does not exist: the dataset has {head} revision(s), "
                    f"so HEAD~{head} (the empty initial state) is the oldest"
                )
            return ordinal
        if isinstance(designator, Ordinal):
            if designator.number > head:
                raise RevisionNotFound(
                    f"revision {spelled!r} does not exist: the latest revision is {head}"
                )
            return designator.number
        if isinstance(designator, RevisionId):
            revision = self._by_uuid.get(designator.uuid)
            if revision is None:
                raise RevisionNotFound(f"revision {spelled!r}: no revision has this UUID")
            return revision.ordinal
        if isinstance(designator, Instant):
            at = designator.at.astimezone(UTC)
            times = [r.committed_at for r in self._revisions]
            return bisect.bisect_right(times, at)  # 0 when before the first commit
        raise TypeError(designator)
