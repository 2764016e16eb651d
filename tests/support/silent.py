"""An HTTP server that accepts connections, reads the request, and never answers: a
model endpoint that hangs, or a stream that never ends. It counts the connections open
now, so a test can see a cancelled caller close its own."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Silent:
    url: str
    accepted: int = 0
    open_now: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def silent_server() -> Iterator[Silent]:
    listener = socket.create_server(("127.0.0.1", 0))
    silent = Silent(f"http://127.0.0.1:{listener.getsockname()[1]}/never")
    stopping = threading.Event()

    def hold(connection: socket.socket) -> None:
        with connection:
            while not stopping.is_set():
                try:
                    if connection.recv(65536) == b"":  # the caller closed it
                        break
                except TimeoutError:
                    continue
                except OSError:
                    break
        with silent._lock:
            silent.open_now -= 1

    def serve() -> None:
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(0.2)
            with silent._lock:
                silent.accepted += 1
                silent.open_now += 1
            threading.Thread(target=hold, args=(connection,), daemon=True).start()

    listener.settimeout(0.2)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield silent
    finally:
        stopping.set()
        listener.close()
        thread.join(timeout=5)
