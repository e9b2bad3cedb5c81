"""A TCP relay for the partition test: `python -m tests.support.forward LISTEN TARGET`
(each `host:port`) accepts on LISTEN and pipes every connection to TARGET, both ways, until
either side closes. Run on each side of a veth pair, it lets a process in a network namespace
reach the session's broker by the address the broker advertises (127.0.0.1:<port>), so
taking the link down is a network partition between that process and the broker."""

from __future__ import annotations

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _relay(target: tuple[str, int], reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
    try:
        up_reader, up_writer = await asyncio.open_connection(*target)
    except OSError:
        writer.close()
        return
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


async def main(listen: str, target: str) -> None:
    server = await asyncio.start_server(
        lambda r, w: _relay(_address(target), r, w), *_address(listen))
    print(f"forwarding {listen} -> {target}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
