#!/usr/bin/env python3
"""float-proxy.py - the floating address of an MDS pair, as the guest suite stands it in.

usage: float-proxy.py STATE_FILE LISTEN_PORT [LISTEN_PORT...]

Listens on 127.0.0.1:LISTEN_PORT... (the guest reaches them as 10.0.2.2) and forwards each
connection to 127.0.0.1 on the backend port of the same rank in STATE_FILE: one line of
ports, as many as LISTEN_PORTs, or "none". SIGHUP re-reads STATE_FILE.

What IPaddr2 does when Pacemaker moves the address (docs/ha.md "Pacemaker"):
- "none" is the address on no node: new connections wait, unanswered, until a backend is set
  (a client's SYN retransmitted until the address comes up), at most HOLD_SECONDS;
- a change of backend resets every open connection (the new node has no socket for them and
  answers their next segment with RST), so the clients reconnect to the new MDS.
Prints "float-proxy ready" on stdout once it listens.
"""
import asyncio
import os
import signal
import socket
import struct
import sys

HOLD_SECONDS = 120


def read_state(path, n):
    try:
        words = open(path).read().split()
    except OSError:
        return None
    if words == ["none"] or len(words) != n:
        return None
    return [int(w) for w in words]


class Proxy:
    def __init__(self, state_file, listen):
        self.state_file = state_file
        self.listen = listen
        self.backends = read_state(state_file, len(listen))
        self.changed = asyncio.Event()
        self.open = set()  # client writers of the forwarded connections

    def reload(self):
        new = read_state(self.state_file, len(self.listen))
        if new == self.backends:
            return
        print(f"float-proxy: backends {self.backends} -> {new}", flush=True)
        self.backends = new
        for w in list(self.open):
            reset(w)
        self.open.clear()
        self.changed.set()
        self.changed = asyncio.Event()

    async def backend(self, rank):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + HOLD_SECONDS
        while self.backends is None:
            left = deadline - loop.time()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                return None
        return self.backends[rank]

    async def serve(self, rank, reader, writer):
        port = await self.backend(rank)
        if port is None:
            reset(writer)
            return
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            reset(writer)  # the address is up but nothing listens: RST, as a host answers
            return
        self.open.add(writer)
        self.open.add(uw)
        await asyncio.gather(pipe(reader, uw), pipe(ur, writer), return_exceptions=True)
        self.open.discard(writer)
        self.open.discard(uw)
        for w in (writer, uw):
            w.close()


def reset(writer):
    """Close with RST (SO_LINGER 0), as a host answers a segment of a connection it lacks."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(1 << 16)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    finally:
        if not writer.is_closing():
            try:
                writer.write_eof()
            except OSError:
                pass


async def main():
    if len(sys.argv) < 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    listen = [int(p) for p in sys.argv[2:]]
    proxy = Proxy(sys.argv[1], listen)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, proxy.reload)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    for rank, port in enumerate(listen):
        await asyncio.start_server(
            lambda r, w, k=rank: proxy.serve(k, r, w), "127.0.0.1", port, reuse_address=True
        )
    print(f"float-proxy ready pid={os.getpid()} backends={proxy.backends}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except RuntimeError:
        pass  # SIGTERM stopped the loop
