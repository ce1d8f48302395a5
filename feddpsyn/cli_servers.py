"""``feddpsyn keyserver`` and ``feddpsyn computeserver``: run one of the two servers
(for whoever hosts them)."""

from __future__ import annotations

from pathlib import Path

import typer

from feddpsyn.terminal import CA_HELP, check_url, fail, read_token


def keyserver(host: str = "127.0.0.1", port: int = 8700,
              state_dir: Path = typer.Option(..., help="where keys, ledger and state live"),
              peer_token_file: Path | None = typer.Option(
                  None, help="token shared with the compute server (default: "
                             "STATE_DIR/peer.token, created if missing)"),
              ssl_certfile: Path | None = typer.Option(None, help="serve HTTPS with this "
                                                                "certificate (PEM)"),
              ssl_keyfile: Path | None = typer.Option(None, help="its private key (PEM)"),
              workers: int = typer.Option(
                  1, help="spread the offline job (the joint noise's bits, the encryption "
                          "of uploads and of P2's inputs) over this many local worker "
                          "processes, never the server's own (each holds the session's keys: "
                          "up to 2.4 GB at Adult's widths)"),
              max_columns: int = typer.Option(
                  64, min=2, help="refuse a session of more columns (409, at once)"),
              max_categories: int = typer.Option(
                  4096, min=1, help="refuse a session with a column of more categories or "
                                    "bins"),
              max_cells: int = typer.Option(
                  200_000, min=1, help="refuse a session of more 1-way and 2-way counts "
                                       "(Adult: 12,090)"),
              max_clients: int = typer.Option(
                  1000, min=1, help="refuse a session of more data owners"),
              owner_caps: Path | None = typer.Option(
                  None, help="lifetime caps per owner id across this server's sessions: a "
                             "JSON file {\"alice\": {\"epsilon\": 3, \"delta\": 1e-5}}, "
                             "read at every session; a session past a cap is refused"),
              log_level: str = "info") -> None:
    """Run the key-management server."""
    from feddpsyn.common.credentials import read_or_create_token
    from feddpsyn.common.serving import configure_logging
    from feddpsyn.keyserver.app import create_app
    from feddpsyn.keyserver.limits import SessionLimits

    if workers < 1:
        fail("--workers is a positive number of worker processes")
    limits = SessionLimits(max_columns=max_columns, max_categories=max_categories,
                           max_cells=max_cells, max_clients=max_clients)
    if owner_caps is not None:
        from feddpsyn.keyserver.owner_caps import load_caps

        try:
            load_caps(owner_caps)
        except ValueError as exc:
            fail(str(exc))
    configure_logging(log_level.upper())
    state_dir.mkdir(parents=True, exist_ok=True)
    peer = read_or_create_token(peer_token_file or state_dir / "peer.token")
    _serve(create_app(state_dir, peer, offline_workers=workers, limits=limits,
                      owner_caps=owner_caps), host, port, log_level, ssl_certfile, ssl_keyfile)


# Seconds a stopping server gives the requests in flight (module ``_serve``).
GRACEFUL_S = 5


def _serve(app, host: str, port: int, log_level: str, certfile: Path | None,
           keyfile: Path | None) -> None:
    import uvicorn

    from feddpsyn.common.serving import BodyLimit

    if (certfile is None) != (keyfile is None):
        fail("--ssl-certfile and --ssl-keyfile go together")
    # A SIGTERM ends the server within seconds whatever it is doing: requests still open
    # after GRACEFUL_S are cut (a client retries; every state change is committed first).
    uvicorn.run(BodyLimit(app, app.state.max_body_bytes), host=host, port=port,
                log_level=log_level, ssl_certfile=certfile, ssl_keyfile=keyfile,
                timeout_graceful_shutdown=GRACEFUL_S)


def computeserver(host: str = "127.0.0.1", port: int = 8701,
                  state_dir: Path = typer.Option(...),
                  keyserver: str = typer.Option(..., callback=check_url,
                                                help="the key server's base URL"),
                  peer_token_file: Path | None = typer.Option(
                      None, help="token shared with the key server (default: "
                                 "STATE_DIR/peer.token, a copy of the key server's)"),
                  ca_file: Path | None = typer.Option(
                      None, help=CA_HELP),
                  ssl_certfile: Path | None = typer.Option(
                      None, help="serve HTTPS with this certificate (PEM)"),
                  ssl_keyfile: Path | None = typer.Option(None, help="its private key (PEM)"),
                  workers: int | None = typer.Option(
                      None, help="run the encrypted selection in this many local worker "
                                 "processes (0: threads in the server's process, the default)"),
                  dask_scheduler: str | None = typer.Option(
                      None, help="run it on a Dask cluster instead: the scheduler's address, "
                                 "tcp://HOST:PORT (tls://HOST:PORT with the --dask-tls-* files)"),
                  dask_tls_ca: Path | None = typer.Option(None, help="CA of the cluster"),
                  dask_tls_cert: Path | None = typer.Option(
                      None, help="this server's certificate for the cluster (PEM)"),
                  dask_tls_key: Path | None = typer.Option(None, help="its private key"),
                  log_level: str = "info") -> None:
    """Run the compute server (evaluation keys only)."""
    from feddpsyn.common.serving import configure_logging
    from feddpsyn.computeserver.app import create_app
    from feddpsyn.computeserver.executor_choice import make_executor

    configure_logging(log_level.upper())
    peer_token_file = peer_token_file or state_dir / "peer.token"
    if not peer_token_file.exists():
        fail(f"{peer_token_file} not found: copy the key server's peer.token there "
              "(or pass --peer-token-file)")
    if workers is not None and dask_scheduler is not None:
        fail("--workers and --dask-scheduler exclude each other")
    if workers is not None and workers < 0:
        fail("--workers is 0 (in-process) or a positive number of processes")
    tls = (dask_tls_ca, dask_tls_cert, dask_tls_key)
    security = None
    if any(tls):
        if not all(tls) or dask_scheduler is None:
            fail("--dask-tls-ca, --dask-tls-cert and --dask-tls-key go together, with "
                 "--dask-scheduler")
        from distributed import Security

        security = Security(tls_ca_file=str(dask_tls_ca), tls_client_cert=str(dask_tls_cert),
                            tls_client_key=str(dask_tls_key), require_encryption=True)
    app = create_app(state_dir, keyserver, read_token(peer_token_file),
                     verify=str(ca_file) if ca_file else True,
                     executor=make_executor(workers, dask_scheduler, security))
    _serve(app, host, port, log_level, ssl_certfile, ssl_keyfile)
