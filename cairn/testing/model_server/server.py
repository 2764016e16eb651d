"""The stand-in itself: started and stopped, scripted, inspected, and its own limits kept."""

from __future__ import annotations

import contextlib
import itertools
import socket
import sys
import threading
import time
import traceback
from collections import deque
from types import TracebackType

from cairn.testing.model_server.handler import HTTPServer
from cairn.testing.model_server.values import Fault, Reply, Request, Responder, ResponderFailed


class ModelServer:
    """A local stand-in for the OpenAI and Anthropic APIs; see the module's docstring."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        responder: Responder | None = None,
        limit_in_flight: int | None = None,
        limit_requests: tuple[int, float] | None = None,
    ) -> None:
        self._host = host
        self._port = port
        # Asked for each request the script leaves unanswered; may be swapped at any time.
        self.responder = responder
        # The provider's concurrency limit: a request beyond it is answered 429 (and
        # counted in ``over_limit``), as a real provider's would be.
        self.limit_in_flight = limit_in_flight
        # The provider's request rate limit, (count, window seconds): a request past
        # ``count`` answered within the last ``window`` is answered 429 with Retry-After
        # (and counted in ``over_rate``).
        self.limit_requests = limit_requests
        self._answered_at: deque[float] = deque()
        self._refused_rate = 0
        self._in_flight = 0
        self._peak_in_flight = 0
        self._over_limit = 0
        self._lock = threading.Lock()
        self._queue: deque[Reply | Fault] = deque()
        self._log: list[Request] = []
        self._answered_log: list[Request] = []
        # Replies scripted ``until_released`` wait for this.
        self._released = threading.Event()
        self._defaults = 0
        self._serial = itertools.count(1)
        self._stopping = threading.Event()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._httpd: HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---

    def start(self) -> ModelServer:
        with self._lock:
            if self._httpd is not None:
                return self
            self._stopping = threading.Event()
            self._httpd = HTTPServer((self._host, self._port), self)
            # A short poll: stop() waits on it, once for every server a test suite starts.
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.01},
                name=f"model-server:{self._httpd.server_address[1]}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            httpd, thread = self._httpd, self._thread
            self._httpd = self._thread = None
            if httpd is None:
                return
            # Releases the handlers holding a hung request, a delay, or a paced stream.
            self._stopping.set()
            connections = dict(self._connections)
        httpd.shutdown()
        httpd.server_close()
        # Idle keep-alive connections hold a handler thread each, blocked on a read.
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for handler in connections.values():
            handler.join(timeout=2)
        if thread is not None:
            thread.join(timeout=2)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        httpd = self._httpd
        if httpd is None:
            raise RuntimeError("the model server is not running: start() it first")
        host, port = httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host
        return f"http://{host}:{port}"

    @property
    def openai_base_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # --- scripting and inspection ---

    def script(self, *replies: Reply | Fault) -> None:
        """Queue replies and faults for the next requests, in order, whichever provider
        they are for."""
        for reply in replies:
            if not isinstance(reply, Reply | Fault):
                raise TypeError(f"script() takes Reply and Fault, not {type(reply).__name__}")
        with self._lock:
            self._queue.extend(replies)

    def reset(self) -> None:
        """Forget the queue and the requests received; default replies count from 0 again."""
        with self._lock:
            self._queue.clear()
            self._log.clear()
            self._answered_log.clear()
            self._defaults = 0
            self._peak_in_flight = self._in_flight
            self._over_limit = 0
            self._refused_rate = 0
            self._answered_at.clear()

    @property
    def requests(self) -> list[Request]:
        """The requests received, in arrival order, faulted ones included."""
        with self._lock:
            return list(self._log)

    @property
    def answered(self) -> list[Request]:
        """The requests answered with a reply, whole, in the order their answers ended (a
        request whose client went away first, or that was faulted, is not among them)."""
        with self._lock:
            return list(self._answered_log)

    def release(self) -> None:
        """Answer the replies held ``until_released``, and those to come, at once."""
        self._released.set()

    def hold(self) -> None:
        """Hold the replies scripted ``until_released`` again, until :meth:`release`."""
        self._released.clear()

    def count(self, provider: str | None = None) -> int:
        with self._lock:
            return sum(1 for r in self._log if provider is None or r.provider == provider)

    # --- for the handlers ---

    def _began(self) -> bool:
        """A request is being answered: False (and nothing counted) past the limit."""
        with self._lock:
            if self.limit_in_flight is not None and self._in_flight >= self.limit_in_flight:
                self._over_limit += 1
                return False
            self._in_flight += 1
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)
            return True

    def _over_rate(self) -> float | None:
        """None: within ``limit_requests`` (and counted); else the seconds until the
        window has room."""
        with self._lock:
            if self.limit_requests is None:
                return None
            count, window = self.limit_requests
            now = time.monotonic()
            while self._answered_at and self._answered_at[0] <= now - window:
                self._answered_at.popleft()
            if len(self._answered_at) >= count:
                self._refused_rate += 1
                return self._answered_at[-count] + window - now
            self._answered_at.append(now)
            return None

    @property
    def over_rate(self) -> int:
        """Requests refused (429) for being past ``limit_requests``."""
        with self._lock:
            return self._refused_rate

    def peak_in_window(self, seconds: float, *, refused: bool = True) -> int:
        """The most requests that arrived within any ``seconds`` (a sliding window over
        the log; ``refused=False``: only those it answered with a reply, not a 429)."""
        with self._lock:
            times = sorted(r.at for r in self._log if refused or not r.refused)
        most, first = 0, 0
        for last, at in enumerate(times):
            while at - times[first] >= seconds:
                first += 1
            most = max(most, last - first + 1)
        return most

    def _ended(self) -> None:
        with self._lock:
            self._in_flight -= 1

    @property
    def in_flight(self) -> int:
        """How many requests it is answering now."""
        with self._lock:
            return self._in_flight

    @property
    def peak_in_flight(self) -> int:
        """The most requests it was answering at once."""
        with self._lock:
            return self._peak_in_flight

    @property
    def over_limit(self) -> int:
        """Requests refused (429) for being past ``limit_in_flight``."""
        with self._lock:
            return self._over_limit

    def _answered(self, request: Request) -> None:
        with self._lock:
            self._answered_log.append(request)

    def _logged(self, request: Request) -> None:
        with self._lock:
            self._log.append(request)

    def _admit(self, request: Request) -> Reply | Fault:
        with self._lock:
            self._log.append(request)
            if self._queue:
                return self._queue.popleft()
            responder = self.responder
        if responder is not None:
            # Outside the lock: a responder may take its time, and other requests must not
            # wait for it.
            item = respond(responder, request)
            if item is not None:
                return item
        with self._lock:
            number = self._defaults
            self._defaults += 1
        return Reply(text=f"reply {number}")

    def _new_id(self, prefix: str) -> str:
        # Numbered rather than random, so that a test run reads the same every time.
        with self._lock:
            return f"{prefix}{next(self._serial):06d}"

    def _opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections[connection] = threading.current_thread()

    def _closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.pop(connection, None)


def respond(responder: Responder, request: Request) -> Reply | Fault | None:
    name = getattr(responder, "__qualname__", repr(responder))
    try:
        item = responder(request)
    except Exception as exc:
        # The client only sees a 500; whoever runs the server sees where the responder broke.
        traceback.print_exc(file=sys.stderr)
        raise ResponderFailed(f"The responder {name} raised {exc!r}.") from exc
    if item is not None and not isinstance(item, Reply | Fault):
        raise ResponderFailed(
            f"The responder {name} answered {type(item).__name__}, not a Reply, Fault or None."
        )
    return item
