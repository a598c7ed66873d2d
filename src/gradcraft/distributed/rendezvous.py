"""Rendezvous: how the processes of a data-parallel job find each other, over TCP.

Global rank 0 listens on MASTER_ADDR:MASTER_PORT; every other rank connects to it (retrying until
the master is up) and says who it is: its rank, the world size and the job's signature (the
settings that every rank must share). When all world-1 ranks have arrived, rank 0 answers each
with what the group needs: on GPUs NCCL's unique id, made by rank 0 (NCCL then connects the ranks
itself); on the CPU nothing more, because these very connections carry the CPU group's traffic
(gradcraft/distributed/tcp.py). If someone is missing when the timeout runs out, rank 0 raises one
line naming the missing ranks and tells every connected rank, which raises one line too; a rank
that cannot reach the master gives up after the same timeout.

Messages are framed: 8 bytes of little-endian length, then the payload (JSON here; raw array bytes
in the CPU group).
"""

import errno
import json
import socket
import struct
import time

from gradcraft.errors import UserError

_LENGTH = struct.Struct("<Q")
_RETRY_S = 0.1  # between attempts to reach a master that is not listening yet


class PeerGone(ConnectionError):
    """The other end of a connection closed it (its process stopped)."""


def send_bytes(sock: socket.socket, payload) -> None:
    view = memoryview(payload).cast("B")
    sock.sendall(_LENGTH.pack(view.nbytes))
    sock.sendall(view)


def recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < view.nbytes:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise PeerGone("connection closed")
        got += n


def recv_bytes(sock: socket.socket, into: memoryview | None = None) -> bytes | None:
    """The next message: into `into` (whose size it must have), or as new bytes."""
    header = bytearray(_LENGTH.size)
    recv_exact(sock, memoryview(header))
    (length,) = _LENGTH.unpack(header)
    if into is None:
        data = bytearray(length)
        recv_exact(sock, memoryview(data))
        return bytes(data)
    if length != into.nbytes:
        raise ConnectionError(
            f"expected a message of {into.nbytes} bytes, got {length}: the processes disagree "
            "on the model or the batch (were they started with the same flags?)"
        )
    recv_exact(sock, into)
    return None


def send_json(sock, message: dict) -> None:
    send_bytes(sock, json.dumps(message).encode())


def recv_json(sock) -> dict:
    return json.loads(recv_bytes(sock))


def _where(addr: str, port: int) -> str:
    return f"{addr}:{port}"


def serve(addr: str, port: int, world: int, signature: str, timeout: float, make_payload=None) -> list:
    """Rank 0's side: wait for ranks 1..world-1, check them, answer each with make_payload()'s dict.
    Returns the connections in rank order (index r-1 for rank r), ready for the CPU group."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((addr, port))
    except OSError as e:
        listener.close()
        if e.errno == errno.EADDRINUSE:
            raise UserError(f"--master_port {port} is already in use on {addr}; choose another free port") from None
        if e.errno in (errno.EADDRNOTAVAIL, errno.EINVAL) or isinstance(e, socket.gaierror):
            raise UserError(
                f"--master_addr {addr} is not an address of this machine: the node with --node_rank 0 "
                "(global rank 0) must run on the master host"
            ) from None
        raise UserError(f"cannot listen on {_where(addr, port)} for the other ranks ({e})") from None
    listener.listen(max(world, 8))
    deadline = time.monotonic() + timeout
    peers: dict[int, socket.socket] = {}
    try:
        while len(peers) < world - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(1, world)) - set(peers))
                message = (
                    f"rendezvous at {_where(addr, port)}: {len(peers) + 1} of {world} ranks arrived within "
                    f"{timeout:g} s; missing rank{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(map(str, missing))}; start every node with the same --nnodes, --nproc, "
                    "--master_addr and --master_port (or raise --rdzv_timeout)"
                )
                for sock in peers.values():
                    _try_send(sock, {"error": f"the master gave up waiting: {message}"})
                raise UserError(message)
            listener.settimeout(left)
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            sock.settimeout(max(1.0, deadline - time.monotonic()))
            try:
                hello = recv_json(sock)
            except (OSError, ValueError):  # not one of ours (a port scanner, a stale client): ignore it
                sock.close()
                continue
            problem = _check_hello(hello, world, signature, peers)
            if problem:
                _try_send(sock, {"error": problem})
                sock.close()
                for other in peers.values():
                    _try_send(other, {"error": problem})
                raise UserError(problem)
            peers[hello["rank"]] = sock
        payload = make_payload() if make_payload else {}
        for rank, sock in sorted(peers.items()):
            sock.settimeout(None)
            send_json(sock, {"ok": True, **payload})
            _no_delay(sock)
    except BaseException:
        for sock in peers.values():
            sock.close()
        raise
    finally:
        listener.close()
    return [peers[r] for r in range(1, world)]


def _check_hello(hello: dict, world: int, signature: str, peers: dict) -> str | None:
    rank = hello.get("rank")
    if hello.get("world") != world:
        return (
            f"rank {rank} was started for a world of {hello.get('world')} processes but rank 0 for {world}; "
            "give every node the same --nnodes and --nproc"
        )
    if not isinstance(rank, int) or not 0 < rank < world:
        return f"a process claims rank {rank} in a world of {world}; check --node_rank on each node"
    if rank in peers:
        return f"two processes claim rank {rank}; give each node its own --node_rank"
    if hello.get("signature") != signature:
        return (
            f"rank {rank} was started with other training settings than rank 0 ({hello.get('signature')} vs "
            f"{signature}); start every node with the same flags"
        )
    return None


def _try_send(sock, message) -> None:
    try:
        send_json(sock, message)
    except OSError:
        pass


def _no_delay(sock) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # small messages (losses) go out at once


def join(addr: str, port: int, rank: int, world: int, signature: str, timeout: float) -> tuple:
    """Rank r's side: connect to the master (retrying until it listens), introduce ourselves, and
    wait for its answer. Returns (the connection, the master's payload)."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise UserError(
                f"rank {rank} could not reach the master at {_where(addr, port)} within {timeout:g} s "
                f"({last_error or 'no answer'}); start the node with --node_rank 0 there, check "
                "--master_addr/--master_port and the firewall (or raise --rdzv_timeout)"
            )
        try:
            sock = socket.create_connection((addr, port), timeout=min(left, 5.0))
            break
        except socket.gaierror as e:
            raise UserError(
                f"--master_addr {addr} is not a known host ({e.strerror}); give the master's address or name"
            ) from None
        except OSError as e:
            last_error = e.strerror or str(e)
            time.sleep(min(_RETRY_S, max(0.0, deadline - time.monotonic())))
    try:
        # the master keeps its own deadline from when it started listening: wait for its answer that long
        sock.settimeout(timeout + 5.0)
        send_json(sock, {"rank": rank, "world": world, "signature": signature})
        answer = recv_json(sock)
    except TimeoutError:
        sock.close()
        raise UserError(
            f"rank {rank} reached the master at {_where(addr, port)} but the other ranks did not all "
            f"arrive within {timeout:g} s; start every node (or raise --rdzv_timeout)"
        ) from None
    except (OSError, ValueError) as e:
        sock.close()
        raise UserError(
            f"rank {rank}: the master at {_where(addr, port)} closed the rendezvous ({e}); see the master's error"
        ) from None
    if "error" in answer:
        sock.close()
        raise UserError(answer["error"])
    sock.settimeout(None)
    _no_delay(sock)
    return sock, answer


def free_port(addr: str = "127.0.0.1") -> int:
    """A port nobody listens on now (for a single-host job's own rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]
