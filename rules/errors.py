"""Errors of rules: registration refusals and executor failures."""

from __future__ import annotations

from sparql_ext.errors import ConcentratorError


class RuleError(ConcentratorError):
    """Base of every error raised by ``rules``."""


class RuleRejected(RuleError):
    """A rule that cannot be registered as written."""

    status_hint = 400


class RuleCycle(RuleError):
    """A rule whose output would feed back into its own inputs."""

    status_hint = 409


class RuleNotFound(RuleError):
    status_hint = 404


class ExecutorRuleFailed(RuleError):
    """A firing evaluated in a Spark executor failed there (its error, raised again in the driver)."""
