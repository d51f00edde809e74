"""sd_notify(3) without a dependency: one datagram to ``$NOTIFY_SOCKET`` per message.

A no-op when ``NOTIFY_SOCKET`` is unset. Abstract-namespace sockets (``@name``) are supported. Send
errors are logged once and never raised: a lost notification must not take the service down (systemd's
watchdog will notice if the loop is really stuck).
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("superinfer.daemon")


def watchdog_interval_s(env: dict[str, str] | None = None) -> float | None:
    """Half of ``WATCHDOG_USEC`` in seconds (when the watchdog is for this pid), else None."""
    env = os.environ if env is None else env
    usec = env.get("WATCHDOG_USEC")
    pid = env.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return max(int(usec) / 1e6 / 2, 0.05)
    except ValueError:
        return None


class Notifier:
    """Sends READY=1, STATUS=..., WATCHDOG=1, STOPPING=1 to the service manager."""

    def __init__(self, address: str | None = None) -> None:
        address = os.environ.get("NOTIFY_SOCKET") if address is None else address
        self.address: str | None = None
        self._sock: socket.socket | None = None
        self._warned = False
        if address:
            self.address = "\0" + address[1:] if address.startswith("@") else address
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, **fields: str | int) -> bool:
        """Send ``KEY=value`` lines (keys upper-cased); True if a datagram went out."""
        if self._sock is None or self.address is None:
            return False
        msg = "\n".join(f"{k.upper()}={v}" for k, v in fields.items()).encode()
        try:
            self._sock.sendto(msg, self.address)
            return True
        except OSError as exc:
            if not self._warned:
                log.warning("sd_notify to %s failed: %s", self.address.replace("\0", "@"), exc)
                self._warned = True
            return False

    def ready(self, status: str) -> bool:
        return self.send(READY=1, STATUS=status, MAINPID=os.getpid())

    def status(self, status: str) -> bool:
        return self.send(STATUS=status)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG=1)

    def stopping(self, status: str) -> bool:
        return self.send(STOPPING=1, STATUS=status)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
