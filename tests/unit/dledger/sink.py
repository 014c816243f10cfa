"""A connection as ``HeldAnswers`` sees it (what ``DLedgerNode.commit`` releases answers to,
the part a broker's client connection plays), recording every answer with when it came."""

from __future__ import annotations

import trio

from rmq_cluster.cluster.remoting.codec import FrameDecoder, RemotingCommand


class Receiver:
    def __init__(self) -> None:
        self.answers: list[tuple[float, RemotingCommand]] = []
        self.changed = trio.Event()

    def _held_released(self, frames: bytearray, n: int) -> None:
        got = FrameDecoder().feed(frames)
        assert len(got) == n
        now = trio.current_time()
        self.answers.extend((now, a) for a in got)
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, n: int) -> None:
        while len(self.answers) < n:
            await self.changed.wait()


def ok_answer(i: int) -> RemotingCommand:
    """A SUCCESS answer to request ``i`` (its opaque)."""
    return RemotingCommand.request(0, {"i": str(i)}).response(0)
