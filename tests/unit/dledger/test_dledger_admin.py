"""DLedger's admin LEADERSHIP_TRANSFER body (dledger/admin.py): hostile bodies only ever raise
AdminRequestError (answered UNEXPECTED_ARGUMENT), good ones round-trip; the module is pure;
the CLI's own parser of the answer (deploy imports no node package) agrees with ours."""

from __future__ import annotations

import ast
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.deploy.dledger_cli import TransferAnswer as CliAnswer
from rmq_cluster.deploy.dledger_cli import transfer_request_json as cli_request
from rmq_cluster.dledger.admin import (
    MAX_ADMIN_BODY_BYTES,
    AdminRequestError,
    TransferAnswer,
    parse_transfer_request,
    transfer_request_json,
)
from rmq_cluster.dledger.messages import ResponseCode

ROOT = Path(__file__).resolve().parents[3]
LONGS = st.integers(-(2**63), 2**63 - 1)


def test_admin_module_is_pure() -> None:
    tree = ast.parse((ROOT / "dledger" / "admin.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                node.module or ""]
            for name in names:
                assert name.split(".")[0] not in {"trio", "time", "socket", "threading"}, name


def test_request_round_trip_and_cli_body_agree() -> None:
    cmd = parse_transfer_request(transfer_request_json("g", "n2", transfer_id="n0"))
    assert (cmd.group, cmd.transferee_id, cmd.transfer_id) == ("g", "n2", "n0")
    assert parse_transfer_request(cli_request("g", "n2", "n1")).transferee_id == "n2"
    answer = TransferAnswer(ResponseCode.NOT_LEADER, "g", "n1", 7, "n0", "x", "ask n1")
    assert TransferAnswer.from_json(answer.to_json()) == answer
    seen = CliAnswer.parse(answer.to_json(), None)
    assert (seen.code, seen.code_name, seen.leader_id, seen.term) == (404, "NOT_LEADER", "n1", 7)


@pytest.mark.parametrize("body", [
    b"", b"null", b"[]", b"{", b'"x"', b'{"group": 1, "transfereeId": "n1"}',
    b'{"group": "g"}', b'{"group": "g", "transfereeId": ""}',
    b'{"group": "g", "transfereeId": "n1", "term": 1.5}',
    b'{"group": "g", "transfereeId": "n1", "term": true}',
    b'{"group": "g", "transfereeId": "n1", "term": 99999999999999999999999}',
    b'{"group": "g", "transfereeId": "n\\u0000"}',
    b'{"group": "g", "transfereeId": "' + b"n" * 65 + b'"}',
    b" " * (MAX_ADMIN_BODY_BYTES + 1),
])
def test_hostile_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(AdminRequestError):
        parse_transfer_request(body)


@given(st.one_of(
    st.binary(max_size=300),
    st.dictionaries(st.sampled_from(["group", "transfereeId", "transferId", "term", "remoteId",
                                     "takeLeadershipLedgerIndex", "x"]),
                    st.one_of(st.none(), st.booleans(), LONGS, st.floats(),
                              st.text(max_size=80), st.lists(LONGS, max_size=3)),
                    max_size=7).map(lambda d: orjson.dumps(d, option=orjson.OPT_NON_STR_KEYS)),
))
def test_any_body_parses_or_is_refused(body: bytes) -> None:
    try:
        cmd = parse_transfer_request(body)
    except AdminRequestError:
        return
    assert cmd.group and cmd.transferee_id
