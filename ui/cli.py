"""``tailcut ui``: serve the trace viewer over a data dir until Ctrl-C.

The viewer binds loopback by default. Any other host needs a token (``--token``, or the environment
variable named by :data:`TOKEN_ENV`): every request without it is answered 401, and the printed URL
carries it once so a browser can keep it as a cookie.
"""

from __future__ import annotations

import socket
from typing import Final

import click

from tailcut import environment
from tailcut._cli_options import data_option

#: Environment variable holding the viewer's token (default: none; required beyond loopback).
TOKEN_ENV: Final = environment.TAILCUT_UI_TOKEN


def _listen(host: str, port: int) -> socket.socket:
    from tailcut.ui._errors import UiError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host.strip("[]"), port), family=family)
    except OSError as exc:
        raise UiError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _url(host: str, port: int, token: str | None) -> str:
    from urllib.parse import quote

    shown = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={quote(token)}" if token else "")


@click.command()
@data_option("The data dir to show.")
@click.option(
    "--corpus",
    "corpora",
    multiple=True,
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="A replay corpus, for why each replayed trace was selected (repeatable).",
)
@click.option(
    "--results",
    multiple=True,
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="A replay results file from `tailcut replay --out` (repeatable).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="0 picks one.")
@click.option(
    "--token",
    envvar=TOKEN_ENV,
    show_envvar=True,
    help="Token every request must carry; required when --host is not loopback.",
)
def ui(
    data_dir: str,
    corpora: tuple[str, ...],
    results: tuple[str, ...],
    host: str,
    port: int,
    token: str | None,
) -> None:
    """Serve a local, read-only trace viewer over DIR in the browser; prints its URL.

    Pages: the traces table (kept and dropped, filters, sorting), each trace's span tree and timeline
    with its decision and findings, each span's request and response, /compare (the verdict table of
    `tailcut compare --by`) and /replays (rates and divergences of --results files). Python twin:
    tailcut.ui.create_app.
    """
    import uvicorn

    from tailcut.ui._app import create_app
    from tailcut.ui._auth import LOOPBACK_HOSTS, is_loopback
    from tailcut.ui._viewer import Viewer

    if not is_loopback(host) and not token:
        raise click.UsageError(
            f"--host {host} is reachable from other machines: give --token TOKEN (or set {TOKEN_ENV})"
        )
    click.echo(f"opening {data_dir} (classifying its kept traces)...", err=True)
    viewer = Viewer(data_dir, results=results, corpora=corpora)
    listener = _listen(host, port)
    bound = listener.getsockname()[1]
    facets = viewer.facets
    click.echo(
        f"tailcut ui: {facets.kept:,} kept of {facets.seen:,} traces seen in {viewer.dataset.location}"
    )
    click.echo(_url(host, bound, token), nl=True)
    click.echo("press Ctrl-C to stop", err=True)
    hosts = LOOPBACK_HOSTS if is_loopback(host) and not token else None
    app = create_app(viewer, token=token, allowed_hosts=hosts)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        listener.close()
        viewer.close()
