"""Where the MQTT broker is (``serve --mqtt mqtt://[user[:password]@]host[:port]``, ``mqtts://`` for TLS with the
system's certificate authorities), and the client ids this server uses there."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from paho.mqtt.properties import Properties

from connectors.errors import BrokerSettingInvalid
from store.durable import write_json

DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}


@dataclass(frozen=True)
class Broker:
    host: str
    port: int
    tls: bool = False
    username: str | None = None
    password: str | None = None

    def __str__(self) -> str:
        """The broker's address without its credentials (for /status and logs)."""
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"


def parse_broker(url: str) -> Broker:
    """
    >>> parse_broker("mqtt://127.0.0.1:1884")
    Broker(host='127.0.0.1', port=1884, tls=False, username=None, password=None)
    >>> str(parse_broker("mqtts://sensor:s%40cret@broker.example"))
    'mqtts://broker.example:8883'
    """
    parts = urlsplit(url)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        raise BrokerSettingInvalid(f"{url!r} is not a broker URL: write mqtt://HOST[:PORT] (or mqtts:// for TLS, "
                                   "with USER:PASSWORD@ before the host if the broker needs them)")
    try:
        port = parts.port or DEFAULT_PORTS[parts.scheme]
    except ValueError:
        raise BrokerSettingInvalid(f"{url!r}: the port is not a number from 1 to 65535") from None
    return Broker(parts.hostname, port, parts.scheme == "mqtts",
                  None if parts.username is None else unquote(parts.username),
                  None if parts.password is None else unquote(parts.password))


def client_id_prefix(data_dir: Path) -> str:
    """This server's client id prefix, made once and kept in ``<data>/mqtt.json``: the broker keeps a persistent
    session per client id, so a restarted server must come back under the same ids, and two servers sharing a
    broker must not take each other's."""
    path = data_dir / "mqtt.json"
    if path.exists():
        return str(json.loads(path.read_text())["client_id_prefix"])
    prefix = f"concentrator-{secrets.token_hex(4)}"
    write_json(path, {"client_id_prefix": prefix})
    return prefix


def packet_properties(packet_type: int, **values: object) -> Properties:
    """MQTT 5 properties of a packet (paho's ``Properties`` takes them as attributes)."""
    properties = Properties(packet_type)  # type: ignore[no-untyped-call]  # paho leaves its constructor untyped
    for name, value in values.items():
        setattr(properties, name, value)
    return properties
