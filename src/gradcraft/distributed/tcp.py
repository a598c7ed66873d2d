"""The CPU process group: NumPy arrays summed over processes through TCP sockets.

The rendezvous's connections stay open and carry the traffic: a star around global rank 0, which
receives every rank's array, adds them in rank order and sends the result back, so every rank
ends with the same bits. The processes may be on one machine (two launchers on 127.0.0.1 form a
two-"node" job, which is what the tests run) or on several. A star sends every byte through rank 0:
right for CPU training and tests, not a substitute for NCCL's rings on GPUs.

Collectives (every rank calls the same ones in the same order, with arrays of the same sizes):
    all_reduce(arrays)                 sum in place
    reduce_scatter(flat) -> shard      the sum of flat, of which this rank keeps its 1/world slice
    all_gather(shard, flat)            flat = every rank's shard, in rank order
"""

import numpy as np

from gradcraft.distributed.rendezvous import PeerGone, recv_bytes, send_bytes
from gradcraft.errors import UserError


def _bytes_of(array: np.ndarray) -> memoryview:
    return memoryview(array.reshape(-1).view(np.uint8))  # (ml_dtypes' bfloat16 has no buffer format of its own)


class PeerLost(UserError):
    """Another rank's connection closed: that rank stopped, and its own error says why."""


class TCPGroup:
    backend = "tcp"

    def __init__(self, rank: int, world: int, connections):
        """connections: rank 0: one socket per other rank, in rank order; others: [the socket to rank 0]."""
        self.rank, self.world = rank, world
        self.connections = list(connections)

    # ------------------------------------------------------------ plumbing

    def _send(self, sock, array: np.ndarray, peer: int) -> None:
        try:
            send_bytes(sock, _bytes_of(array))
        except OSError as e:
            raise self._lost(peer, e) from None

    def _recv(self, sock, into: np.ndarray, peer: int) -> None:
        try:
            recv_bytes(sock, _bytes_of(into))
        except (OSError, PeerGone) as e:
            raise self._lost(peer, e) from None

    def _lost(self, peer: int, error) -> Exception:
        if isinstance(error, PeerGone) or isinstance(error, (BrokenPipeError, ConnectionResetError)):
            return PeerLost(f"rank {peer} left the job (its connection closed); see that process's error")
        return PeerLost(f"rank {self.rank}: the connection to rank {peer} failed ({error})")

    def _peers(self):
        return enumerate(self.connections, start=1)

    # ------------------------------------------------------------ collectives

    def all_reduce(self, arrays) -> None:
        """Sum each array over the processes, in place."""
        if self.world == 1:
            return
        work = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays]
        if self.rank == 0:
            for array in work:
                part = np.empty_like(array)
                for peer, sock in self._peers():
                    self._recv(sock, part, peer)
                    array += part  # rank order: the same sum on every rank
                for peer, sock in self._peers():
                    self._send(sock, array, peer)
        else:
            for array in work:
                self._send(self.connections[0], array, 0)
                self._recv(self.connections[0], array, 0)
        for array, done in zip(arrays, work):
            if array is not done:
                array[...] = done

    def reduce_scatter(self, flat: np.ndarray, out=None, stream=None) -> np.ndarray:
        """The sum over the processes of flat (its length a multiple of world): this rank's slice
        (a new array; out and stream are NCCLGroup's, unused here)."""
        shard = flat.size // self.world
        if flat.size != shard * self.world:
            raise ValueError(f"reduce_scatter: {flat.size} elements do not split into {self.world} shards")
        flat = np.ascontiguousarray(flat).reshape(-1)
        if self.world == 1:
            return flat.copy()
        if self.rank == 0:
            total, part = flat.copy(), np.empty_like(flat)
            for peer, sock in self._peers():
                self._recv(sock, part, peer)
                total += part
            for peer, sock in self._peers():
                self._send(sock, total[peer * shard : (peer + 1) * shard], peer)
            return total[:shard].copy()
        self._send(self.connections[0], flat, 0)
        mine = np.empty(shard, flat.dtype)
        self._recv(self.connections[0], mine, 0)
        return mine

    def all_gather(self, shard: np.ndarray, flat: np.ndarray) -> None:
        """flat (world x shard.size elements, contiguous) = every rank's shard in rank order."""
        n = shard.size
        flat[self.rank * n : (self.rank + 1) * n] = shard.reshape(-1)
        if self.world == 1:
            return
        if self.rank == 0:
            for peer, sock in self._peers():
                self._recv(sock, flat[peer * n : (peer + 1) * n], peer)
            for peer, sock in self._peers():
                self._send(sock, flat, peer)
        else:
            self._send(self.connections[0], np.ascontiguousarray(shard).reshape(-1), 0)
            self._recv(self.connections[0], flat, 0)

    def close(self) -> None:
        for sock in self.connections:
            sock.close()
        self.connections = []
