"""`check_scheduler`: that `--scheduler` names a Dask scheduler, within a bounded wait.

`distributed.Client` waits for the other side's handshake without a timeout, so a port that
accepts connections but does not speak Dask (the dashboard's 8787 for the scheduler's 8786, an
easy slip) hangs it forever, and one that answers with other bytes ends in whatever decoding them
raised (numpy "Unable to allocate 3.07 EiB"). So before the client connects, one connection asks
the address who it is (Dask's `identity` call) with the whole exchange under one deadline, and
any failure is one line naming the address and the fix.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from seqpack_cli.errors import ConfigError, first_line, option

__all__ = ["check_scheduler"]


class _Setup(Exception):
    """This side could not open a connection of the address's kind (TLS without its settings,
    UCX not installed): `args[0]` is what Dask raised."""


async def _identity(address: str, timeout_s: float) -> Any:
    from distributed.comm import connect, parse_address, registry
    from distributed.security import Security

    # Dask's config may hold TLS settings (distributed.comm.tls.*): the client would use them.
    try:  # what this side needs before it can connect: the kind's backend, TLS settings
        arguments = Security().get_connection_args("client")
        scheme, _ = parse_address(address)
        registry.get_backend(scheme).get_connector()
    except Exception as error:
        raise _Setup(error) from None
    if scheme == "tls" and arguments.get("ssl_context") is None:
        raise _Setup(ValueError("Dask's config holds no TLS settings"))
    comm = await connect(address, timeout=timeout_s, **arguments)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()


def _ask(address: str, timeout_s: float) -> Any:
    """The answer to `identity`, or the exception the exchange raised (TimeoutError when it ran
    past `timeout_s`). In a thread of its own: the caller may be inside an event loop."""
    outcome: list[Any] = [TimeoutError()]

    def run() -> None:
        try:
            # A second past the connect timeout: an address that refuses connections is
            # reported as refused (connect's own error), not as silent.
            exchange = _identity(address, timeout_s)
            outcome[0] = asyncio.run(asyncio.wait_for(exchange, timeout_s + 1))
        except BaseException as error:  # reported by the caller, whatever it is
            outcome[0] = error

    thread = threading.Thread(target=run, name="seqpack-dask-handshake", daemon=True)
    thread.start()
    thread.join(timeout_s + 2)  # asyncio's own deadline ends it first
    return outcome[0]


def _fix(address: str) -> str:
    scheme = address.partition("://")[0] if "://" in address else "tcp"
    if scheme == "tls":
        return (
            "a tls:// scheduler needs Dask's TLS settings (distributed.comm.tls.ca-file, "
            ".client.cert and .client.key in Dask's config); set them, or pass a tcp:// address"
        )
    if scheme == "ucx":
        return "ucx:// needs Dask's UCX support (distributed-ucxx) installed, or a tcp:// address"
    return (
        f"pass the scheduler's own address to {option('scheduler')} (dask scheduler prints it; "
        "port 8786 by default, not the dashboard's 8787)"
    )


def check_scheduler(address: str, timeout_s: float) -> None:
    """`ConfigError` in one line unless `address` answers as a Dask scheduler within
    `timeout_s` seconds."""
    answer = _ask(address, timeout_s)
    where = f"the Dask scheduler at {address}"
    if isinstance(answer, TimeoutError | asyncio.TimeoutError):
        raise ConfigError(
            f"cannot connect to {where}: it accepted the connection but gave no Dask answer "
            f"within {timeout_s:g} s; {_fix(address)}"
        )
    if isinstance(answer, OSError):
        raise ConfigError(
            f"cannot reach {where} ({first_line(answer)}); start one (dask scheduler) and pass "
            f"its address to {option('scheduler')}"
        )
    if isinstance(answer, _Setup):
        error = answer.args[0]
        raise ConfigError(
            f"cannot connect to {where} ({type(error).__name__}: {first_line(error)}); "
            f"{_fix(address)}"
        )
    if isinstance(answer, BaseException):
        raise ConfigError(
            f"cannot connect to {where}: it does not speak Dask's protocol "
            f"({type(answer).__name__}: {first_line(answer)}); {_fix(address)}"
        )
    kind = answer.get("type") if isinstance(answer, dict) else None
    if kind != "Scheduler":
        raise ConfigError(
            f"{address} is a Dask {kind or 'service'}, not a scheduler; {_fix(address)}"
        )
