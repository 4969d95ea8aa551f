"""`hdet serve [--host H] [--port P]`: the REST service and dashboard under uvicorn.

Settings come from the environment (HDET_TOKEN, HDET_DATA_DIR, HDET_DATABASE_URL, RAY_ADDRESS, ...;
see service/settings.py); without RAY_ADDRESS the service starts and owns a local Ray head.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument("--data-dir", help="overrides HDET_DATA_DIR")
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )


def public_url(host: str, port: int) -> str:
    reach = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{reach}:{port}"


def build_settings(args: argparse.Namespace):
    from service.settings import Settings

    settings = Settings()
    updates = {}
    if args.data_dir:
        updates["data_dir"] = args.data_dir
    if not settings.public_url:
        updates["public_url"] = public_url(args.host, args.port)
    return Settings.model_validate({**settings.model_dump(), **updates})


def main(args: argparse.Namespace) -> int:
    import uvicorn
    from pydantic import ValidationError

    from service.app import create_app
    from service.ray_head import listening_socket

    # the port is held before the app's lifespan starts a Ray head (whose processes bind ports of their own),
    # and a port in use is reported before anything starts (--port 0: a free one, shown below)
    try:
        sock = listening_socket(args.host, args.port)
    except OSError as e:
        print(f"hdet serve: cannot listen on {args.host}:{args.port} ({e.strerror}); choose another --port")
        return 2
    args.port = sock.getsockname()[1]
    try:
        settings = build_settings(args)
    except ValidationError as e:
        sock.close()
        for err in e.errors():
            print(f"hdet serve: setting HDET_{str(err['loc'][0]).upper()}: {err['msg']}")
        return 2
    app = create_app(settings)
    print(
        f"hdet serve: dashboard at {public_url(args.host, args.port)}/ (data in {settings.data_dir})",
        flush=True,
    )
    # Keep-alive longer than a slow poll, so clients do not race a closing idle connection.
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=30,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0
