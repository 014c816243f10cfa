"""Compat tests drive our nodes with real third-party RocketMQ 4.x clients.

The Node.js probes use ali-ons (Alibaba's pure-JavaScript 4.x remoting client), installed from
the npm registry on first use into tests/compat/node/node_modules. Without node and npm on the
machine these tests are skipped, saying why.

The C++ probes use Apache's rocketmq-client-cpp 1.0.1 and 2.1.0 as PyPI packages ship them (a
ctypes wrapper plus the prebuilt librocketmq.so, Linux x86-64 only), downloaded from PyPI on
first use into tests/compat/cpp/<version>. Elsewhere, or without the registry, they are skipped,
saying why.
"""

from __future__ import annotations

import hashlib
import io
import platform
import shutil
import subprocess
import tarfile
import urllib.request
import zipfile
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parent / "node"
CPP_DIR = Path(__file__).parent / "cpp"
#: Apache's C++ client (rocketmq-client-cpp) as PyPI packages ship it: a ctypes wrapper
#: (``rocketmq/client.py``) next to a prebuilt ``librocketmq.so`` for Linux x86-64.
#: version -> (archive URL, sha256): the 0.4.4 wheel of ``rocketmq`` bundles 1.0.1; the
#: ``rocketmq-python-cvs`` 2.1.0.3 sdist bundles 2.1.0.
CPP_CLIENTS = {
    "1.0.1": (
        "https://files.pythonhosted.org/packages/e9/ce/"
        "d7449cc585e506c06553082f715bdc082b37e8804a64203eacfabc5a197c/"
        "rocketmq-0.4.4-py2.py3-none-manylinux1_x86_64.whl",
        "19a10219f5074d1050e88cdbdfed3903a374b3f83c0dd2c8773e1e93e33ad02d",
    ),
    "2.1.0": (
        "https://files.pythonhosted.org/packages/c8/19/"
        "5a8d8a5a259f7cbecc34407ed4f6707858438806c9307bc96e7a8db93b13/"
        "rocketmq-python-cvs-2.1.0.3.tar.gz",
        "99e4ce8008554a74193a3ad94b60f939a4666c48ffabbf4c4417a109daf1419d",
    ),
}
DOWNLOAD_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def node_probes() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node and npm are needed for the ali-ons compat probes")
    if not (NODE_DIR / "node_modules" / "ali-ons").is_dir():
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_DIR,
            check=True,
            timeout=600,
            stdin=subprocess.DEVNULL,
        )
    return NODE_DIR


def _fetch_cpp_client(version: str) -> Path:
    """``tests/compat/cpp/<version>`` holding the ``rocketmq`` package, downloaded once."""
    url, sha256 = CPP_CLIENTS[version]
    target = CPP_DIR / version
    if (target / "rocketmq" / "librocketmq.so").is_file():
        return target
    with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as resp:
        data = resp.read()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise OSError(f"{url}: sha256 mismatch")
    staging = target.with_name(f"{version}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "rocketmq").mkdir(parents=True)
    if url.endswith(".whl"):
        with zipfile.ZipFile(io.BytesIO(data)) as wheel:
            wheel.extractall(staging)
    else:
        with tarfile.open(fileobj=io.BytesIO(data)) as sdist:
            for member in sdist.getmembers():
                parts = Path(member.name).parts
                if len(parts) >= 3 and parts[1] == "rocketmq" and member.isfile():
                    src = sdist.extractfile(member)
                    assert src is not None
                    (staging / "rocketmq" / parts[-1]).write_bytes(src.read())
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


@pytest.fixture(scope="session", params=sorted(CPP_CLIENTS))
def cpp_client(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(version, directory holding the C++ client's ``rocketmq`` package)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("the packaged librocketmq.so is built for Linux x86-64 only")
    try:
        return request.param, _fetch_cpp_client(request.param)
    except OSError as exc:
        pytest.skip(f"could not fetch the C++ client {request.param} from PyPI: {exc}")
