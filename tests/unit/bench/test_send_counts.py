"""bench/send_counts.py's readers: perf's and strace's syscall lines by call and by thread,
and functions that share a short name summed (not the last one kept)."""

from __future__ import annotations

from pathlib import Path

from bench.send_counts import _by_function, _count_perf, _count_strace, _every_request


def test_perf_lines_by_call_and_thread(tmp_path: Path) -> None:
    out = tmp_path / "perf.txt"
    out.write_text(
        "# started on Mon Nov 30\n\n"
        "python3-100,40,,syscalls:sys_enter_sendto,1000,100.00,,\n"
        "python3-100,0,,syscalls:sys_enter_read,1000,100.00,,\n"
        "Trio thread 3-102,6,,syscalls:sys_enter_prctl,1000,100.00,,\n"
        "Trio thread 4-103,2,,syscalls:sys_enter_prctl,1000,100.00,,\n"
        "python3-104,1,,syscalls:sys_enter_futex,1000,100.00,,\n"
        "<not counted>,,syscalls:sys_enter_write,0,100.00,,\n"
    )
    names = {"100": "(event loop)", "102": "Trio thread *", "103": "Trio thread *"}
    got = _count_perf(str(out), 100, names)
    assert got["by_call"] == {"sendto": 40, "prctl": 8, "futex": 1}
    assert got["thread:(event loop)"] == {"sendto": 40}
    assert got["thread:Trio thread *"] == {"prctl": 8}
    assert got["thread:(exited thread)"] == {"futex": 1}


def test_strace_counts_calls_not_their_resumptions(tmp_path: Path) -> None:
    out = tmp_path / "strace.txt"
    out.write_text(
        "100 epoll_wait(3,  <unfinished ...>\n"
        "102 prctl(PR_SET_NAME, \"x\") = 0\n"
        "100 <... epoll_wait resumed>[], 5, 10) = 0\n"
        "100 sendto(7, ..., 1024, 0, NULL, 0) = 1024\n"
        "+++ exited with 0 +++\n"
    )
    got = _count_strace(str(out), {"100": "(event loop)", "102": "Trio thread *"})
    assert got["by_call"] == {"epoll_wait": 1, "prctl": 1, "sendto": 1}
    assert got["thread:(event loop)"] == {"epoll_wait": 1, "sendto": 1}


def test_functions_of_one_short_name_are_summed() -> None:
    top = [
        ("/x/rmq_cluster/store/message_store.py:328:MessageStore.append", 30),
        ("/x/rmq_cluster/store/message_store.py:990:MessageStore.append", 10),
        ("/x/rmq_cluster/store/dispatcher.py:12:<lambda>", 4),
        ("/x/rmq_cluster/store/dispatcher.py:40:<lambda>", 6),
    ]
    calls = {top[0][0]: 10, top[1][0]: 10, top[2][0]: 2, top[3][0]: 3}
    got = _by_function(top, calls, 10)
    assert got["store/message_store.py:MessageStore.append"] == {"opcodes": 4.0, "calls": 2.0}
    assert got["store/dispatcher.py:<lambda>"] == {"opcodes": 1.0, "calls": 0.5}


def test_every_request_sums_the_functions_run_once_a_request_or_more() -> None:
    ops = {
        "/x/rmq_cluster/broker/processors/send.py:10:SendProcessor.process": 400,
        "/x/rmq_cluster/store/consume_queue.py:5:ConsumeQueue.put": 190,  # 0.95 a request
        "/x/rmq_cluster/store/flush.py:9:reput_service": 500,  # a round per 20 requests
        "/x/rmq_cluster/cluster/remoting/codec.py:3:_all_str": 60,
    }
    calls = {k: n for k, n in zip(ops, (20, 19, 1, 40), strict=True)}
    got = _every_request(ops, calls, requests=20, messages=20)
    assert got == {"opcodes_per_msg": 32.5, "calls_per_msg": 3.95, "functions": 3}
