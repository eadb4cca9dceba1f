"""The operator's console: ``serve`` and ``token``."""

from __future__ import annotations

import click

from ..settings import get_settings
from .common import fail


@click.command()
@click.option("--host", default=None, help="Address to bind (default SAGA_CONSOLE_HOST, 127.0.0.1).")
@click.option("--port", default=None, type=int, help="Port (default SAGA_CONSOLE_PORT, 8350).")
def serve(host: str | None, port: int | None) -> None:
    """Serve the operator's console (pages, JSON API, /metrics); needs SAGA_CONSOLE_TOKENS."""
    try:
        import uvicorn

        from ..console.app import create_app
    except ImportError as exc:
        fail(f"the console needs its extra: pip install 'saga-worker[console]' ({exc})")
    from ..console.security import plain_http_warning

    settings = get_settings()
    app = create_app(settings)  # refuses without tokens, before anything binds
    bind = host or settings.console_host
    warning = plain_http_warning(bind)
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)
    uvicorn.run(
        app,
        host=bind,
        port=port or settings.console_port,
        log_level="info",
        proxy_headers=False,
        server_header=False,
    )


@click.command()
@click.argument("name")
@click.option(
    "--role",
    type=click.Choice(["viewer", "operator"]),
    default="viewer",
    show_default=True,
    help="What it may do.",
)
def token(name: str, role: str) -> None:
    """Make a console token: prints the token (once) and its SAGA_CONSOLE_TOKENS entry (a digest)."""
    from ..console.auth import Role, new_token

    secret, entry = new_token(name, Role(role))
    click.echo(f"token (give it to {name}; it is not stored anywhere): {secret}")
    click.echo(f"SAGA_CONSOLE_TOKENS entry: {entry}")
