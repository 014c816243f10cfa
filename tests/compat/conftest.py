"""Compat tests drive our nodes with real third-party RocketMQ 4.x clients.

The Node.js probes use ali-ons (Alibaba's pure-JavaScript 4.x remoting client), installed from
the npm registry on first use into tests/compat/node/node_modules. Without node and npm on the
machine these tests are skipped, saying why.

The C++ probes use Apache's rocketmq-client-cpp (librocketmq 1.0.1) as the ``rocketmq`` 0.4.4
wheel ships it (a ctypes wrapper plus the prebuilt library, Linux x86-64 only), downloaded from
PyPI on first use into tests/compat/cpp/client. Elsewhere, or without the registry, they are
skipped, saying why.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parent / "node"
CPP_DIR = Path(__file__).parent / "cpp" / "client"
#: The PyPI wheel that bundles Apache's C++ client (librocketmq.so) with a ctypes wrapper.
CPP_WHEEL_REQUIREMENT = "rocketmq==0.4.4"


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


@pytest.fixture(scope="session")
def cpp_client() -> Path:
    """Directory holding the ``rocketmq`` package (the C++ client's wrapper + librocketmq.so)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        pytest.skip("the rocketmq wheel bundles librocketmq.so for Linux x86-64 only")
    if not (CPP_DIR / "rocketmq" / "librocketmq.so").is_file():
        with tempfile.TemporaryDirectory(prefix="rmq-cpp-wheel-") as tmp:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--platform", "manylinux1_x86_64", "--python-version", "3", "-d", tmp,
                 CPP_WHEEL_REQUIREMENT],
                capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
            )
            wheels = list(Path(tmp).glob("rocketmq-*.whl"))
            if done.returncode != 0 or not wheels:
                pytest.skip(f"could not download {CPP_WHEEL_REQUIREMENT}: {done.stderr[-300:]}")
            staging = CPP_DIR.with_name("client.partial")
            shutil.rmtree(staging, ignore_errors=True)
            with zipfile.ZipFile(wheels[0]) as wheel:
                wheel.extractall(staging)
            shutil.rmtree(CPP_DIR, ignore_errors=True)
            staging.rename(CPP_DIR)
    return CPP_DIR
