"""Hypothesis-generated stores: a few groups, each a master and mutated replicas."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from rmq_cluster.spark_jobs.model import Replica, make_replica
from rmq_cluster.spark_jobs.synth import Msg, write_commitlog_store, write_dledger_store

MUTATIONS = ("none", "truncate", "extra", "rebody", "resize", "flip", "drop_file", "cq", "garbage")


@st.composite
def messages(draw: Any, max_n: int = 40) -> list[Msg]:
    n = draw(st.integers(0, max_n))
    return [
        Msg(draw(st.sampled_from(["A", "B"])), draw(st.integers(0, 1)),
            bytes([i % 251]) * draw(st.integers(0, 300)), f"k{i}")
        for i in range(n)
    ]  # fmt: skip


@st.composite
def groups(draw: Any) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(1, 2))):
        msgs = draw(messages())
        reps = []
        for _ in range(draw(st.integers(1, 2))):
            reps.append({
                "mutation": draw(st.sampled_from(MUTATIONS)),
                "k": draw(st.integers(0, 10_000)),
                "extra": draw(messages(max_n=6)),
                "byte": draw(st.integers(0, 255)),
            })  # fmt: skip
        out.append({
            "kind": draw(st.sampled_from(["commitlog", "commitlog", "dledger"])),
            "file_bytes": draw(st.sampled_from([1024, 1536, 4096])),
            "msgs": msgs,
            "replicas": reps,
            "consumer": draw(st.integers(0, 30)),
        })  # fmt: skip
    return out


def _write(kind: str, root: Path, msgs: list[Msg], fb: int, consumer: int | None) -> None:
    if kind == "dledger":
        write_dledger_store(str(root), "n", msgs, fb)
    else:
        offsets = {"A@cg": {0: consumer}} if consumer is not None else None
        write_commitlog_store(str(root), msgs, fb, consumer_offsets=offsets)


def _data_files(root: Path) -> list[Path]:
    for sub in ("commitlog", "dledger-n/data"):
        d = root / sub
        if d.is_dir():
            return sorted(d.iterdir())
    return []


def materialize(spec: list[dict[str, Any]], base: Path) -> list[Replica]:
    replicas: list[Replica] = []
    for gi, g in enumerate(spec):
        name, fb, kind, msgs = f"g{gi}", g["file_bytes"], g["kind"], g["msgs"]
        mroot = base / name / "m"
        _write(kind, mroot, msgs, fb, g["consumer"])
        role = "LEADER" if kind == "dledger" else "MASTER"
        replicas.append(make_replica(name, "m", role, str(mroot)))
        for ri, r in enumerate(g["replicas"]):
            root = base / name / f"r{ri}"
            mut, k = r["mutation"], r["k"]
            rmsgs = list(msgs)
            if mut == "truncate":
                rmsgs = rmsgs[: k % (len(rmsgs) + 1)]
            elif mut == "extra":
                rmsgs = rmsgs + r["extra"]
            elif mut in ("rebody", "resize") and rmsgs:
                i = k % len(rmsgs)
                m = rmsgs[i]
                body = bytes(b ^ 0x5A for b in m.body) or b"x"
                if mut == "resize":
                    body = body + b"yz"
                rmsgs[i] = Msg(m.topic, m.queue_id, body, m.keys)
            _write(kind, root, rmsgs, fb, g["consumer"] + (k % 3))
            files = _data_files(root)
            if mut == "flip" and files:
                f = files[k % len(files)]
                data = bytearray(f.read_bytes())
                data[(k * 7919) % len(data)] ^= r["byte"] or 1
                f.write_bytes(bytes(data))
            elif mut == "garbage" and files:
                f = files[k % len(files)]
                data = bytearray(f.read_bytes())
                p = (k * 104729) % max(1, len(data) - 16)
                data[p : p + 16] = bytes((r["byte"] + j) % 256 for j in range(16))
                f.write_bytes(bytes(data))
            elif mut == "drop_file" and len(files) >= 3:
                os.remove(files[1 + k % (len(files) - 2)])
            elif mut == "cq":
                qdir = root / "consumequeue" / "A" / "0"
                cqs = sorted(qdir.iterdir()) if qdir.is_dir() else []
                if cqs:
                    data = bytearray(cqs[0].read_bytes())
                    data[(k % 3) * 20 + 7] ^= 0x40  # low byte of the phy offset of unit k%3
                    cqs[0].write_bytes(bytes(data))
            role = "FOLLOWER" if kind == "dledger" else "SLAVE"
            replicas.append(make_replica(name, f"r{ri}", role, str(root)))
    return replicas


def cleanup(base: Path) -> None:
    shutil.rmtree(base, ignore_errors=True)
