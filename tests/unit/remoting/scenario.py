"""A datadriven interpreter for ``tests/unit/remoting/scenarios/*.txt``: events into a
``ConnectionState``, the actions it takes out, compared with what the file expects.

A file is a sequence of blocks, each a command line, a ``----`` line and the expected output
(up to a blank line; ``#`` lines between blocks are comments)::

    recv request 10 op=7
    ----
    send answer op=7 code=0 remark=ok

Set ``REWRITE=1`` to rewrite the files with what the machine did (then read the diff).

Setup (output: ``ok``):
    max-in-flight N                  the connection's limit of requests in flight
    processor CODE KIND              KIND: inline (answers code 0 remark ok), task (async def),
                                     later (returns LATER, its request kept by its op),
                                     held (returns LATER, its answer held), await (returns
                                     Later(a coroutine)),
                                     raise (raises ValueError), none (returns None)
Events:
    call NAME deadline=T [reading]   a call starts (a lone call that reads: ``reading``)
    oneway                           a oneway request goes out (its opaque)
    recv FRAME; FRAME; ...           one read's decoded frames: ``request CODE op=N [oneway]``
                                     or ``response op=N [code=C]``
    resume                           room came for the last blocked read: go on, then take
                                     its rest
    resolve OP [none]                request OP's kept answer is given (``answer_later``: an
                                     answer, or None)
    release N                        HeldAnswers releases N answers (as encoded frames)
    task-done OP [none]              the spawned request OP's processor answered (or None)
    expire T                         the clock is at T: calls whose deadline passed end
    malformed FRAME; ...             a bad frame after these (decoded) frames
    flushing on|off                  a flusher task owns the send side (or not)
    close REASON                     the connection closes
    state                            running, pending calls, busy refusals, flags
Every event's output lists its actions in order, then what ``take_outbound`` hands the shell
(``send ...`` per frame), as the shell sends after each event; ``(nothing)`` if none.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rmq_cluster.cluster.remoting.codec import (
    FrameDecoder,
    ProtocolError,
    RemotingCommand,
    encode_into,
)
from rmq_cluster.cluster.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE
from rmq_cluster.cluster.remoting.connection_state import Blocked, ConnectionState
from rmq_cluster.cluster.remoting.errors import RemotingError, RemotingUnsentError
from rmq_cluster.cluster.remoting.processors import (
    LATER,
    AnyProcessor,
    Later,
    ProcessorTable,
)


class Slot:
    """A call's waiter that records when it is woken."""

    def __init__(self, name: str, deadline: float, reading: bool, machine: Machine) -> None:
        self.name, self.deadline, self.reading, self._machine = name, deadline, reading, machine
        self.response: RemotingCommand | None = None
        self.error: RemotingError | None = None
        self.woken = 0

    def finish(self) -> None:
        self.woken += 1
        if self.response is not None:
            what = f"response code={self.response.code}"
        elif self.error is not None:
            what = f"error {type(self.error).__name__}"
        else:
            what = "timeout"
        again = " (again!)" if self.woken > 1 else ""
        self._machine.log.append(f"wake {self.name}: {what}{again}")


def _answer(req: RemotingCommand) -> RemotingCommand:
    return RemotingCommand(code=0, opaque=req.opaque, flag=FLAG_RESPONSE, remark="ok")


class Machine:
    def __init__(self) -> None:
        self.log: list[str] = []
        self.processors: dict[int, AnyProcessor] = {}
        self.kept: dict[int, RemotingCommand] = {}  # requests whose processor replied LATER
        self.spawned: dict[int, RemotingCommand] = {}
        self.slots: dict[str, Slot] = {}
        self.blocked: Blocked | None = None
        self.max_in_flight = 4
        self.st: ConnectionState | None = None
        self.held_frames: list[RemotingCommand] = []
        self.flush_scheduled = False

    @property
    def state(self) -> ConnectionState:
        if self.st is None:
            self.st = ConnectionState(self, ProcessorTable(dict(self.processors)),
                                      max_in_flight=self.max_in_flight, peer="peer:1")
        return self.st

    # what processors see as their connection: a kept answer is given through it
    def answer_later(self, req: RemotingCommand, resp: RemotingCommand | None) -> None:
        if self.state.answer_later(req, resp):
            self.log.append("schedule later flush")
            self.flush_scheduled = True

    def processor(self, kind: str) -> AnyProcessor:
        def inline(conn: Any, req: RemotingCommand) -> Any:
            return _answer(req)

        async def task(conn: Any, req: RemotingCommand) -> Any:
            return _answer(req)

        def later(conn: Any, req: RemotingCommand) -> Any:
            self.kept[req.opaque] = req
            return LATER

        def held(conn: Any, req: RemotingCommand) -> Any:
            self.held_frames.append(_answer(req))
            return LATER

        def awaiting(conn: Any, req: RemotingCommand) -> Any:
            return Later(task(conn, req))

        def raising(conn: Any, req: RemotingCommand) -> Any:
            raise ValueError("boom")

        def none(conn: Any, req: RemotingCommand) -> Any:
            return None

        kinds: dict[str, AnyProcessor] = {"inline": inline, "task": task, "later": later,
                                       "held": held, "await": awaiting, "raise": raising,
                                       "none": none}
        return kinds[kind]

    def frames(self, text: str) -> list[RemotingCommand]:
        out = []
        for part in text.split(";"):
            words = part.split()
            if not words:
                continue
            opts = dict(w.split("=", 1) for w in words if "=" in w)
            op = int(opts["op"])
            if words[0] == "request":
                flag = FLAG_ONEWAY if "oneway" in words else 0
                out.append(RemotingCommand(code=int(words[1]), opaque=op, flag=flag))
            elif words[0] == "response":
                out.append(RemotingCommand(code=int(opts.get("code", 0)), opaque=op,
                                           flag=FLAG_RESPONSE))
            else:
                raise ValueError(f"unknown frame {part!r}")
        return out

    def take(self, commands: list[RemotingCommand]) -> None:
        spawns, answered, blocked = self.state.take(commands)
        for cmd, work in spawns or ():
            self.log.append(f"spawn op={cmd.opaque} code={cmd.code}")
            work.close()  # type: ignore[attr-defined]
            self.spawned[cmd.opaque] = cmd
        if answered:
            self.log.append("answered a call")
        if blocked is not None:
            self.log.append(f"blocked until running<={blocked.limit} rest={len(blocked.rest)}")
            self.blocked = blocked

    def run(self, line: str) -> str:
        self.log = []
        words = line.split()
        cmd, args = words[0], words[1:]
        setup = False
        if cmd == "max-in-flight":
            self.max_in_flight = int(args[0])
            setup = True
        elif cmd == "processor":
            self.processors[int(args[0])] = self.processor(args[1])
            setup = True
        elif cmd == "call":
            slot = Slot(args[0], float(args[1].split("=")[1]), "reading" in args, self)
            self.slots[args[0]] = slot
            try:
                opaque, rearm = self.state.start_call(slot)
            except RemotingUnsentError as exc:
                self.log.append(f"refused: {type(exc).__name__}: {exc}")
            else:
                self.log.append(f"opaque {opaque}" + (" (timer re-armed)" if rearm else ""))
        elif cmd == "oneway":
            self.log.append(f"opaque {self.state.next_opaque()}")
        elif cmd == "recv":
            self.take(self.frames(line[len("recv"):]))
        elif cmd == "resume":
            assert self.blocked is not None, "nothing blocked"
            blocked, self.blocked = self.blocked, None
            if self.state.running > blocked.limit:
                raise AssertionError(f"resume with running={self.state.running} over "
                                     f"{blocked.limit}")
            if blocked.rest:
                self.take(blocked.rest)
        elif cmd == "resolve":
            req = self.kept.pop(int(args[0]))
            self.answer_later(req, None if "none" in args else RemotingCommand(
                code=0, opaque=int(args[0]), remark="later"))
        elif cmd == "release":
            n = int(args[0])
            out = bytearray()
            for frame in self.held_frames[:n]:
                encode_into(out, frame, frame.opaque)
            del self.held_frames[:n]
            if not self.state.held_released(out, n):
                self.log.append("(closed: dropped)")
        elif cmd == "task-done":
            op = int(args[0])
            req = self.spawned.pop(op)
            resp = None if "none" in args else _answer(req)
            if not self.state.task_answer(req, resp):
                self.log.append("(no answer queued)")
            self.state.request_ended()
        elif cmd == "expire":
            reading = self.state.expire(float(args[0]))
            if reading:
                self.log.append("interrupt socket")
            self.log.append(f"timer at {self.state.timer_deadline:g}")
        elif cmd == "malformed":
            bad = ProtocolError("bad frame")
            bad.commands = self.frames(line[len("malformed"):])
            self.state.malformed(bad)
            self.log.append(f"close: {self.state.close_reason}")
        elif cmd == "flushing":
            self.state.flushing = args[0] == "on"
        elif cmd == "close":
            if not self.state.close(" ".join(args)):
                self.log.append("(already closed)")
        elif cmd == "state":
            st = self.state
            flags = [f for f in ("flushing", "later_flush", "closed") if getattr(st, f)]
            return (f"running={st.running} pending={sorted(st.pending)} "
                    f"refused={st.busy_refusals}" + (" " + " ".join(flags) if flags else ""))
        else:
            raise ValueError(f"unknown command {cmd!r}")
        if setup:
            return "ok"
        if self.flush_scheduled:  # (the flush task runs at the end of the batch)
            self.flush_scheduled = self.state.later_flush = False
        chunk = self.state.take_outbound()
        if chunk:
            for frame in FrameDecoder().feed(chunk):
                kind = "answer" if frame.flag & FLAG_RESPONSE else "request"
                self.log.append(f"send {kind} op={frame.opaque} code={frame.code}"
                                + (f" remark={frame.remark}" if frame.remark else ""))
        self._check_invariants()
        return "\n".join(self.log) or "(nothing)"

    def _check_invariants(self) -> None:
        st = self.state
        assert st.running >= 0, f"running went below 0: {st.running}"
        assert st.running <= st.max_in_flight + 1, f"running {st.running} over the limit + 1"
        if st.pending:
            assert st.timer_deadline <= min(s.deadline for s in st.pending.values())
        if st.closed:
            assert not st.pending
        for s in self.slots.values():
            assert s.woken <= 1, f"{s.name} woken {s.woken} times"


def run_scenario(path: Path) -> None:
    """Run ``path``; fail on the first block whose output differs (REWRITE=1: rewrite)."""
    machine = Machine()
    lines = path.read_text().splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            out.append(line)
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1] != "----":
            raise AssertionError(f"{path.name}:{i + 1}: a command needs a ---- line after it")
        expected = []
        j = i + 2
        while j < len(lines) and lines[j].strip():
            expected.append(lines[j])
            j += 1
        got = machine.run(line)
        if os.environ.get("REWRITE"):
            out += [line, "----", got]
        elif got != "\n".join(expected):
            raise AssertionError(
                f"{path.name}:{i + 1}: {line}\n--- expected\n" + "\n".join(expected)
                + "\n--- got\n" + got
            )
        i = j
    if os.environ.get("REWRITE"):
        path.write_text("\n".join(out) + "\n")
