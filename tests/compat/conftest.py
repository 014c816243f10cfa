"""Compat tests drive our nodes with real third-party RocketMQ 4.x clients.

The Node.js probes use ali-ons (Alibaba's pure-JavaScript 4.x remoting client), installed from
the npm registry on first use into tests/compat/node/node_modules. Without node and npm on the
machine these tests are skipped, saying why.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).parent / "node"


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
