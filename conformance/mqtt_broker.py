"""A real MQTT broker for tests and benchmarks: Debian's Mosquitto on 127.0.0.1, on a free port, with its
configuration and persistence in a temporary directory; stopped and started again on the same port (a broker
restart keeps its sessions and queued messages: ``persistence true``)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from conformance.server import free_port, stop

INSTALL_HINT = "run `bash .ci/install-clients` (apt-get install mosquitto mosquitto-clients)"


def mosquitto_binary() -> str | None:
    return shutil.which("mosquitto") or next((p for p in ("/usr/sbin/mosquitto",) if os.access(p, os.X_OK)), None)


def skip_reason_mosquitto() -> str | None:
    """Why the broker cannot be run here (a message for ``pytest.skip``), or None if it can."""
    if mosquitto_binary() is None:
        return f"Mosquitto not installed: {INSTALL_HINT}"
    return None


class Mosquitto:
    """A Mosquitto process; ``stop()`` ends it as an administrator would (SIGTERM: it saves its sessions),
    ``start()`` runs it again with the same configuration, port and saved state."""

    def __init__(self, directory: Path, port: int, inflight: int = 20) -> None:
        self.directory = directory
        self.port = port
        self.url = f"mqtt://127.0.0.1:{port}"
        self.config = directory / "mosquitto.conf"
        self.config.write_text("\n".join([
            f"listener {port} 127.0.0.1",
            "allow_anonymous true",
            "persistence true",
            f"persistence_location {directory}/",
            "autosave_interval 1",
            # a persistent session keeps every QoS 1 message published while its client is away (the default
            # drops those past 1000)
            "max_queued_messages 0",
            # QoS 1 messages sent to a client before its first PUBACK (Mosquitto's default is 20): the server
            # acknowledges after a commit, so this bounds how many elements one commit makes durable
            f"max_inflight_messages {inflight}",
            f"log_dest file {directory}/mosquitto.log",
            f"user {pwd.getpwuid(os.getuid()).pw_name}",  # as root it would switch to 'mosquitto' (no access here)
            "",
        ]))
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        binary = mosquitto_binary()
        assert binary is not None, skip_reason_mosquitto()
        self.process = subprocess.Popen([binary, "-c", str(self.config)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self.process.returncode}:\n{self.log()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return
            time.sleep(0.05)
        raise TimeoutError(f"mosquitto did not listen on {self.port} in {timeout} s:\n{self.log()}")

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log(self) -> str:
        path = self.directory / "mosquitto.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


@contextlib.contextmanager
def running_broker(inflight: int = 20) -> Iterator[Mosquitto]:
    with tempfile.TemporaryDirectory(prefix="mosquitto-") as tmp:
        broker = Mosquitto(Path(tmp), free_port(), inflight)
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()
