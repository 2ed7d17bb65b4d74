"""Errors of the connectors: each carries the HTTP status it becomes when a request meets it."""

from __future__ import annotations

from sparql_ext.errors import ConcentratorError


class ConnectorError(ConcentratorError):
    """Base of every error raised by ``connectors``."""


class MessageRejected(ConnectorError):
    """An MQTT message that is not one stream element (it goes to the dead-letter stream)."""

    status_hint = 400


class UnsupportedMessageFormat(ConnectorError):
    """A message whose content type is not an RDF format a stream takes."""

    status_hint = 415


class PublicationNotFound(ConnectorError):
    status_hint = 404


class LdesError(ConnectorError):
    """What an LDES source serves cannot be followed (no view, no timestamp path, a member without a timestamp…): the
    source's fault, not the request's."""

    status_hint = 502


class ConnectorSettingInvalid(ConnectorError):
    """A stream's MQTT or LDES setting its connector cannot take (``PUT /streams/{name}``)."""

    status_hint = 400


class NoBroker(ConnectorError):
    """``mqtt-topic`` on a server started without ``--mqtt``."""

    status_hint = 409


class BrokerSettingInvalid(ConnectorError):
    """``serve --mqtt URL``: not an mqtt:// or mqtts:// URL."""

    status_hint = 400
