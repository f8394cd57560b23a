"""``clustersim explore``: the interactive explorer in the browser (``[explore]`` extra)."""

from __future__ import annotations

import argparse

from sim.cli.outputs import count


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``explore`` subcommand."""
    p = sub.add_parser(
        "explore",
        help="turn a job's knobs in the browser and watch its step (local web page)",
        description="Serve an interactive page at http://127.0.0.1:PORT/: pick a scenario or "
        "study, move GPUs, fabric, TP/PP/DP/CP, ZeRO, micro-batch, sequence length and "
        "precision, and see the step time, its breakdown, memory against capacity, the "
        "pipeline timeline and cost (analytical network). The URL holds the view.",
    )
    p.add_argument(
        "--port",
        type=count(0, 65535),
        default=8050,
        help="port on 127.0.0.1 (default 8050; 0: any)",
    )
    p.add_argument("--no-browser", action="store_true", help="do not open a browser")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted (Ctrl-C)."""
    from sim.explore.server import make_server

    server = make_server(args.port)
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    print(f"clustersim explore: {url}  (Ctrl-C to stop)", flush=True)
    if not args.no_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped")
    finally:
        server.server_close()
    return 0
