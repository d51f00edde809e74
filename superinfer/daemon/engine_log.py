"""The vLLM child's output: forwarded line by line to the daemon's stderr, and read for the root cause.

vLLM reports a failed start as hundreds of lines from several processes (API server, engine core,
workers), each line prefixed ``(EngineCore pid=N) ERROR mm-dd hh:mm:ss [file.py:line]``, and ends with a
generic ``RuntimeError: Engine core initialization failed. See root cause above.`` The root cause is
the exception that ends the *first* traceback (chained exceptions print the innermost cause first);
:class:`RootCause` keeps that line, and only that line, so the daemon's error can say it.

Invariants: every line the child writes reaches the daemon's stderr unchanged and in order; the root
cause, once found, never changes; a line is at most :data:`MAX_CAUSE` characters.
"""

from __future__ import annotations

import re
import signal
import sys
import threading
from typing import IO

MAX_CAUSE = 300
MAX_LINE = 1 << 16  # bytes read at once: binary or newline-less output cannot grow memory
_PREFIX = re.compile(r"^\((?:[\w-]+(?: [\w-]+)*) pid=(?P<pid>\d+)\)\s*")
_LEVEL = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Failed)"
                        r"(?:\([\w.]+\))?(?::.*)?$")
_DETAIL_AFTER = ("validation error",)  # pydantic: the message is on the next, indented line


def strip_prefixes(line: str) -> tuple[str, str | None]:
    """A line without vLLM's process and logger prefixes, and its level (None if it had none)."""
    return _split(line)[1:]


def _split(line: str) -> tuple[str, str, str | None]:
    """(the process's pid, or "" without a prefix; the text; its log level or None)."""
    line = line.rstrip("\r\n")
    p = _PREFIX.match(line)
    pid = p.group("pid") if p else ""
    line = line[p.end():] if p else line
    m = _LEVEL.match(line)
    if m is None:
        return pid, line, None
    return pid, line[m.end():], m.group("level")


class RootCause:
    """Reads the child's lines one by one; :attr:`line` is the root cause once one is seen.

    Preference: the exception line ending the first traceback (with pydantic's detail line appended);
    failing that, the first ``ERROR``/``CRITICAL`` log line. Tracebacks are followed per process (the
    ``pid=`` prefix), so processes writing at once do not cut each other's short. :meth:`reset` forgets
    everything (the engine became ready: a later crash has a cause of its own)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.exception: str | None = None
        self.first_error: str | None = None
        self._in_traceback: set[str] = set()  # pids whose traceback is being read
        self._want_detail: str | None = None  # the pid whose next line completes a pydantic error

    @property
    def line(self) -> str | None:
        return self.exception or self.first_error

    def feed(self, raw: str) -> None:
        pid, text, level = _split(raw)
        if self._want_detail is not None and self._want_detail == pid:
            self._want_detail = None
            if text.strip():
                self.exception = _cap(f"{self.exception}: {text.strip()}")
                return
        if self.exception is not None:
            return
        if text.startswith("Traceback (most recent call last)"):
            self._in_traceback.add(pid)
            return
        if pid in self._in_traceback:
            if not text or text[0].isspace():
                return  # a frame, its source line or a caret line
            if _EXCEPTION.match(text):
                self.exception = _cap(text)
                self._want_detail = pid if any(s in text for s in _DETAIL_AFTER) else None
            self._in_traceback.discard(pid)
            return
        if level in ("ERROR", "CRITICAL") and self.first_error is None and text.strip():
            self.first_error = _cap(text.strip())


def _cap(text: str) -> str:
    return text if len(text) <= MAX_CAUSE else text[:MAX_CAUSE - 1] + "…"


def exit_text(returncode: int) -> str:
    """``exited with 1``, or ``was killed by SIGKILL`` (with the usual reason for that one)."""
    if returncode >= 0:
        return f"exited with {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    return f"was killed by {name}" + (" (out of memory? see the kernel log)" if name == "SIGKILL" else "")


class OutputPump:
    """A thread that copies a child's merged stdout/stderr to ``sink`` and feeds :class:`RootCause`."""

    def __init__(self, stream: IO[bytes], sink: IO[bytes] | None = None) -> None:
        self.cause = RootCause()
        self._stream = stream
        self._sink = sink if sink is not None else sys.stderr.buffer
        self._thread = threading.Thread(target=self._run, name="vllm-output", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for raw in iter(lambda: self._stream.readline(MAX_LINE), b""):  # a longer line arrives in pieces
            try:
                self._sink.write(raw)
                self._sink.flush()
            except (OSError, ValueError):
                pass  # the daemon's stderr is gone; still read, so the child never blocks on a full pipe
            self.cause.feed(raw.decode("utf-8", "replace"))
        self._stream.close()

    def join(self, timeout_s: float) -> None:
        """Wait until the child's output has been read to its end (the child has exited)."""
        self._thread.join(timeout_s)
