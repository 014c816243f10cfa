"""``cluster/protocol/crc.py``: the one CRC32 of the project is zlib-ng's, gives zlib's values
for any bytes and any start value (DLedger chains it), fails loudly without zlib-ng when
installed, falls back on the standard library only inside the Spark job archive, and no other
product module computes a CRC32 by itself."""

from __future__ import annotations

import ast
import subprocess
import sys
import zlib
from pathlib import Path

import zlib_ng.zlib_ng
from hypothesis import given
from hypothesis import strategies as st

from rmq_cluster.cluster.protocol import crc
from rmq_cluster.cluster.protocol.message import body_crc
from tests.unit.test_architecture import ROOT, _product_files

U32 = st.integers(min_value=0, max_value=2**32 - 1)
#: past zlib-ng's folding thresholds (64, 256, 1 KiB blocks) on both sides
DATA = st.binary(max_size=5000)


def test_it_is_zlib_ngs_c_function() -> None:
    assert crc.crc32 is zlib_ng.zlib_ng.crc32


@given(DATA, U32)
def test_equals_zlib_for_any_bytes_and_start(data: bytes, value: int) -> None:
    assert crc.crc32(data, value) == zlib.crc32(data, value)
    assert crc.crc32(data) == zlib.crc32(data)


@given(DATA, DATA, st.integers(min_value=0, max_value=63))
def test_chained_and_over_unaligned_views(a: bytes, b: bytes, skew: int) -> None:
    """A CRC continued over a second buffer is the CRC of both (DLedger's chain CRC); a
    memoryview at any offset of a bytearray (a record's body in the mapping) reads the same."""
    assert crc.crc32(b, crc.crc32(a)) == zlib.crc32(a + b)
    buf = bytearray(skew) + bytearray(a)
    assert crc.crc32(memoryview(buf)[skew:]) == zlib.crc32(a)
    assert body_crc(memoryview(buf)[skew:]) == zlib.crc32(a) & 0x7FFFFFFF


def test_start_values_are_taken_modulo_2_32_as_zlib_does() -> None:
    for value in (-1, 2**32, 2**32 + 5, 2**64 - 1):
        assert crc.crc32(b"rocketmq", value) == zlib.crc32(b"rocketmq", value)


def _run(code: str, *args: str, isolated: bool = False) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, *(["-S"] if isolated else []), "-c", code, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


def test_installed_without_zlib_ng_is_an_import_error() -> None:
    done = _run("import sys; sys.modules['zlib_ng'] = None\n"
                "import rmq_cluster.cluster.protocol.crc")  # fmt: skip
    assert done.returncode != 0
    assert "ModuleNotFoundError: No module named 'zlib_ng" in done.stderr, done.stderr[-2000:]


def test_the_job_archive_alone_uses_the_standard_library(tmp_path: Path) -> None:
    """The Spark job archive, without site-packages (so without zlib-ng): the CRC is zlib's
    own function, and a record it checks gives the same value."""
    from rmq_cluster.spark_jobs.package import build_package

    archive = tmp_path / "job.zip"
    build_package(str(archive))
    code = ("import sys, zlib; sys.path.insert(0, sys.argv[1])\n"
            "from rmq_cluster.cluster.protocol import crc, message\n"
            "assert 'zlib_ng' not in sys.modules and crc.crc32 is zlib.crc32\n"
            "assert message.body_crc(b'x' * 1024) == zlib.crc32(b'x' * 1024) & 0x7FFFFFFF\n"
            "print(crc.__file__)")  # fmt: skip
    done = _run(code, str(archive), isolated=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().startswith(str(archive))


#: (module, name) of the CRC32 functions a product module might call past crc.py
_OTHER_CRC32 = {("zlib", "crc32"), ("binascii", "crc32")}


def _module_named(node: ast.expr) -> str | None:
    """``zlib`` for ``zlib`` and for ``__import__("zlib")``."""
    if isinstance(node, ast.Name):
        return node.id
    if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__"
            and node.args and isinstance(node.args[0], ast.Constant)):  # fmt: skip
        return str(node.args[0].value)
    return None


def _own_crc32_calls(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute):
            hit = (_module_named(node.value), node.attr) in _OTHER_CRC32
        elif isinstance(node, ast.ImportFrom):
            hit = any((node.module, a.name) in _OTHER_CRC32 for a in node.names)
        else:
            continue
        if hit:
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def test_no_product_module_computes_crc32_but_through_crc_py() -> None:
    own = ROOT / "cluster" / "protocol" / "crc.py"
    found = [hit for p in _product_files(ROOT) if p != own for hit in _own_crc32_calls(p)]
    assert not found, "CRC32 computed past cluster/protocol/crc.py:\n" + "\n".join(found)
