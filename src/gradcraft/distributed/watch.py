"""Noticing that a process of a GPU job has gone: NCCL itself would wait for it forever.

On GPUs the rendezvous's connections carry nothing once NCCL is connected, so they serve as a
lifeline: rank 0 keeps one to every rank, every rank keeps its own to rank 0, and a thread waits
on them. A process that ends normally first says "bye" on its connections (`PeerWatch.done`); a
connection that closes without it means that process died (an error, a crash, a lost node). The
watching process then reports one line, "rank R left the job", and exits, which closes its own
connections: a failure anywhere stops every process of the job, each with one line, instead of
leaving them inside an all-reduce.
"""

import selectors
import socket
import threading

BYE = b"B"


class PeerWatch:
    def __init__(self, connections, rank: int, on_lost):
        """connections: as TCPGroup's (rank 0: ranks 1..world-1 in order; others: [rank 0]).
        on_lost(message) runs on the watching thread when a peer goes without saying bye; it is
        expected not to return (it ends the process)."""
        self.connections, self.rank, self.on_lost = list(connections), rank, on_lost
        self._finished = threading.Event()
        # Registered here, not on the thread: close() may come before the thread first runs.
        self._selector = selectors.DefaultSelector()
        for index, sock in enumerate(self.connections):
            self._selector.register(sock, selectors.EVENT_READ, index)
        self._thread = threading.Thread(target=self._watch, name="gradcraft-peer-watch", daemon=True)
        self._thread.start()

    def _peer(self, index: int) -> int:
        return index + 1 if self.rank == 0 else 0

    def _watch(self) -> None:
        try:
            self._watch_until_done()
        finally:
            self._selector.close()

    def _watch_until_done(self) -> None:
        selector = self._selector
        said_bye = set()
        while len(said_bye) < len(self.connections) and not self._finished.is_set():
            for key, _ in selector.select(timeout=1.0):
                try:
                    data = key.fileobj.recv(16)
                except OSError:
                    data = b""
                if data and BYE in data:
                    said_bye.add(key.data)
                if not data:
                    selector.unregister(key.fileobj)
                    if key.data not in said_bye and not self._finished.is_set():
                        self.on_lost(
                            f"rank {self._peer(key.data)} left the job (its connection closed without "
                            "finishing); see that process's error"
                        )
                        return
                    said_bye.add(key.data)

    def done(self) -> None:
        """This process finished normally: tell the others, and stop watching."""
        self._finished.set()
        for sock in self.connections:
            try:
                sock.sendall(BYE)
            except OSError:  # it finished (and went) first
                pass

    def close(self) -> None:
        self._finished.set()
        for sock in self.connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
