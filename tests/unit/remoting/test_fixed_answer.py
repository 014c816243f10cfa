"""``codec.FixedAnswer``: an answer header filled into a template is byte for byte the frame the
general encoder writes for the same ``request.response(...)``, and it declines what it cannot
say (then the answer is encoded the general way)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.remoting.codec import (
    MAX_FIXED_ANSWER_REMARKS,
    MAX_FRAME_BYTES,
    FixedAnswer,
    FrameDecoder,
    RemotingCommand,
    encode,
)
from rmq_cluster.cluster.remoting.codes import RequestCode
from rmq_cluster.store.message_store import GetMessageStatus

KEYS = ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset")
PULL = FixedAnswer(KEYS)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
STATUSES = [s.value for s in GetMessageStatus]


def _general(opaque: int, code: int, remark: str, values: dict[str, int], body: bytes) -> bytes:
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, {"topic": "T"})
    request = RemotingCommand(request.code, opaque=opaque, ext_fields=request.ext_fields)
    ext = {k: str(v) for k, v in values.items()}
    return encode(request.response(code, remark, ext, body))


@given(
    opaque=INT32, code=INT32, remark=st.sampled_from(STATUSES),
    values=st.tuples(INT64, INT64, INT64, INT64), body=st.binary(max_size=64),
)
def test_the_template_writes_what_the_encoder_writes(
    opaque: int, code: int, remark: str, values: tuple[int, int, int, int], body: bytes
) -> None:
    by_key = dict(zip(sorted(KEYS), values, strict=True))
    head = PULL.frame_head(code, opaque, remark, values, len(body))
    assert head is not None
    assert head + body == _general(opaque, code, remark, by_key, body)
    (answer,) = FrameDecoder().feed(head + body)
    assert answer.ext_fields == {k: str(v) for k, v in by_key.items()}
    assert (answer.opaque, answer.code, answer.remark, bytes(answer.body)) == (
        opaque, code, remark, body)


def test_the_sorted_order_is_the_key_order_of_the_values() -> None:
    head = PULL.frame_head(0, 7, "FOUND", (4, 3, 2, 1), 0)
    assert head is not None
    (answer,) = FrameDecoder().feed(head)
    assert answer.ext_fields == {"maxOffset": "4", "minOffset": "3", "nextBeginOffset": "2",
                                 "suggestWhichBrokerId": "1"}  # fmt: skip


@pytest.mark.parametrize("remark", ['a"quote', "back\\slash", "é", "two words", "", "a\nb"])
def test_a_remark_to_escape_is_declined(remark: str) -> None:
    assert PULL.frame_head(0, 1, remark, (1, 2, 3, 4), 0) is None


def test_out_of_range_code_or_opaque_and_a_wrong_arity_are_declined() -> None:
    assert PULL.frame_head(2**31, 1, "FOUND", (1, 2, 3, 4), 0) is None
    assert PULL.frame_head(0, -(2**31) - 1, "FOUND", (1, 2, 3, 4), 0) is None
    assert PULL.frame_head(0, 1, "FOUND", (1, 2, 3), 0) is None


def test_a_frame_over_the_limit_is_declined() -> None:
    assert PULL.frame_head(0, 1, "FOUND", (1, 2, 3, 4), MAX_FRAME_BYTES) is None
    assert PULL.frame_head(0, 1, "FOUND", (1, 2, 3, 4), MAX_FRAME_BYTES // 2) is not None


def test_the_remark_vocabulary_is_bounded() -> None:
    fixed = FixedAnswer(["k"])
    for i in range(MAX_FIXED_ANSWER_REMARKS):
        assert fixed.frame_head(0, 1, f"R{i}", (i,), 0) is not None
    assert fixed.frame_head(0, 1, "ONE_MORE", (1,), 0) is None
    assert fixed.frame_head(0, 1, "R3", (1,), 0) is not None  # (the known ones still are)


@pytest.mark.parametrize("keys", [(), ("ok", 'b"ad'), ("sp ace",)])
def test_keys_must_be_plain_names(keys: tuple[str, ...]) -> None:
    with pytest.raises(ValueError):
        FixedAnswer(keys)
