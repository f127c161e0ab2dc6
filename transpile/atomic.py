"""Writing files whole or not at all, whatever signal arrives (Ctrl-C, `kill`, a closed terminal).

A file is written to a temporary file beside it and renamed over it. SIGINT, SIGTERM and SIGHUP are held while the
temporary file exists: one that arrives then is delivered once the file is renamed into place (or removed), so that
neither half a file nor a hidden `.name.XXXX.tmp` is ever left behind.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: the signals a user or a supervisor sends to stop a run
HELD = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextmanager
def signals_held() -> Iterator[None]:
    """Holds SIGINT, SIGTERM and SIGHUP for the block; one that arrived meanwhile is delivered when it ends (Python
    raises KeyboardInterrupt, or runs the handler, right after). Where signals cannot be held (Windows, a thread other
    than the main one: Python runs handlers in the main thread only), the block runs as it is."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def write_atomic(path: Path, text: str, encoding: str = "utf-8") -> None:
    """Writes `text` to `path` via a temporary file in the same directory and an atomic rename: readers never see half
    a file, and an interrupted run leaves the old file or the new one, never a temporary one. Line ends are written
    as they are in `text`. A new file gets mode 0644, an existing one keeps its mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode(encoding)
    with signals_held():
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            try:
                mode = path.stat().st_mode & 0o777
            except FileNotFoundError:
                mode = 0o644
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


__all__ = ["HELD", "signals_held", "write_atomic"]
