"""Errors of rules: registration refusals and executor failures."""

from __future__ import annotations

from collections.abc import Mapping

from sparql_ext.errors import ConcentratorError


class RuleError(ConcentratorError):
    """Base of every error raised by ``rules``; ``rule`` names the rule it is about, when there is one (a refused
    batch names the rule that refused it)."""

    def __init__(self, message: str, *, rule: str | None = None, status_hint: int | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message, status_hint=status_hint, headers=headers)
        self.rule = rule


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
