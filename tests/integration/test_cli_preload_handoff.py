"""The command's side of the hand-over (cairn.cli.preload.handoff), against a stand-in for
the preloaded process on a real Unix socket: a signal that comes before the child running
the command is known is the command's all the same — relayed once the child is told
``go``, or, when no child answers, raised in the command's own process as if it came then.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cairn.cli.preload import handoff


@pytest.fixture(autouse=True)
def own_handlers() -> Iterator[None]:
    """The hand-over installs its relay for the process's life; the test's go back."""
    saved = {signum: signal.getsignal(signum) for signum in handoff.RELAYED}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _stand_in(path: Path, answer: Callable[[socket.socket], None]) -> threading.Thread:
    """A preloaded process that takes one command, interrupts its caller (SIGINT to this
    process) before it says which child runs it, and then does ``answer``."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        with server:
            connection, _address = server.accept()
            with connection:
                _frame, descriptors, _flags, _address = socket.recv_fds(connection, 65536, 3)
                for descriptor in descriptors:
                    os.close(descriptor)
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the command starts
                answer(connection)

    thread = threading.Thread(target=serve)
    thread.start()
    return thread


def test_an_interrupt_before_the_child_is_known_reaches_it_once_it_is_told_go(
    tmp_path: Path,
) -> None:
    child = subprocess.Popen(["sleep", "60"])

    def answer(connection: socket.socket) -> None:
        connection.sendall(json.dumps({"pid": child.pid}).encode() + b"\n")
        assert connection.recv(3, socket.MSG_WAITALL) == b"go\n"
        status = child.wait(timeout=30)  # the relayed interrupt ends it
        connection.sendall(json.dumps({"exit": 130 if status == -2 else 1}).encode() + b"\n")

    served = _stand_in(tmp_path / "cli.sock", answer)
    try:
        assert handoff.run(str(tmp_path / "cli.sock"), ["wait", "run-1"]) == 130
    finally:
        child.kill()
        served.join(timeout=30)
    assert child.returncode == -signal.SIGINT


def test_an_interrupt_before_a_child_that_never_answers_interrupts_the_command_here(
    tmp_path: Path,
) -> None:
    served = _stand_in(tmp_path / "cli.sock", lambda connection: None)  # then goes away
    try:
        with pytest.raises(KeyboardInterrupt):
            handoff.run(str(tmp_path / "cli.sock"), ["wait", "run-1"])
    finally:
        served.join(timeout=30)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the command's own
