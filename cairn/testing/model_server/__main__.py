"""``python -m cairn.testing.model_server``: serve the stand-in until interrupted."""

from __future__ import annotations

import argparse
import importlib
import threading
from typing import Any, cast

from cairn.testing.model_server.server import ModelServer
from cairn.testing.model_server.values import Responder


def _load_responder(spec: str) -> Responder:
    """The function ``module:function`` names (imported from ``sys.path``)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"a responder is named module:function, not {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{spec} is not callable")
    return cast(Responder, target)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m cairn.testing.model_server",
        description="Serve a stand-in for the OpenAI and Anthropic APIs until interrupted.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument(
        "--responder",
        metavar="MODULE:FUNCTION",
        help="answer requests with this function of a Request (returning a Reply, a Fault, "
        "or None for the default reply)",
    )
    args = parser.parse_args(argv)
    try:
        responder = _load_responder(args.responder) if args.responder else None
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        parser.error(f"--responder: {exc}")
    server = ModelServer(args.host, args.port, responder=responder).start()
    print(f"model server listening on {server.url}", flush=True)
    print(f"  OpenAI(base_url={server.openai_base_url!r}, api_key='test')", flush=True)
    print(f"  Anthropic(base_url={server.anthropic_base_url!r}, api_key='test')", flush=True)
    if args.responder:
        print(
            f"{args.responder} answers requests (None: a default reply); Ctrl-C stops", flush=True
        )
    else:
        print(
            "every request gets a default reply: 'reply 0', 'reply 1', ...; Ctrl-C stops",
            flush=True,
        )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
