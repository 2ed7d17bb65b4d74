"""Errors of the Spark pipeline."""

from __future__ import annotations

from sparql_ext.errors import ConcentratorError


class PipelineError(ConcentratorError):
    """Base of every error raised by ``pipeline``: a batch that cannot be applied (it is retried after a restart
    of the query, see ``pipeline.batches``)."""
