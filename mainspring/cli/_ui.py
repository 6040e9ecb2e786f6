"""``mainspring ui``: serve the local web view of the store's runs until Ctrl-C.

Prints the URL with its random token (open it once: the browser keeps the token in a
cookie of that address). The controls go through a runtime on the store opened for
writing; ``--app module:attr`` gives it the user's code, as ``resume --app`` does, so the
resume button can run it.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

import anyio

from ..storage import Store
from ._codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE, CliError
from ._controls import load_app
from ._output import Out
from ._store import shown


def run_ui(store: Store, out: Out, args: argparse.Namespace) -> int:
    """Serve the view of ``store`` on the backend asked for; returns the exit code."""
    try:
        from ..ui import RemoteRefused, is_loopback, serve
    except ImportError as exc:
        raise CliError(
            f"mainspring ui needs the 'ui' extra: pip install 'mainspring[ui]' ({exc})",
            EXIT_USAGE,
        ) from None
    config = load_app(args.app) if args.app else None
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise CliError(
                f"--host {args.host} is not a loopback address: the runs and their controls "
                "would be open to the network (add --allow-remote to do it anyway)",
                EXIT_USAGE,
            )
        out.warn(
            f"warning: listening on {args.host}: anyone who can reach it and learns the "
            "token can see and steer these runs, over plain HTTP"
        )

    async def main() -> None:
        async with serve(
            store, host=args.host, port=args.port, app=config, allow_remote=args.allow_remote
        ) as ui:
            # Printed as is: the token is this view's own, made for this line (not a
            # stored secret for redaction to hide).
            if out.as_json:
                line = json.dumps({"url": ui.url, "host": ui.host, "port": ui.port})
            else:
                line = (
                    f"mainspring ui: the runs of {shown(args.store_path)}\n"
                    f"    {ui.url}\n"
                    "open it in a browser (Ctrl-C stops the view)"
                )
            print(line, file=out.stream, flush=True)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break

    try:
        anyio.run(main, backend=args.backend)
    except RemoteRefused as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    except OSError as exc:  # the port is taken, the address is not this machine's
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc}", EXIT_FAILED) from None
    if not out.as_json:
        print("mainspring ui: stopped", file=sys.stderr, flush=True)
    return EXIT_OK
