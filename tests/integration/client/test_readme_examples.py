"""The README's client examples, run as they are: every ```python block marked
``<!-- example: NAME -->`` runs as a script in a subprocess against a real cluster started
here, and must print exactly the ```text block under it (``prints:``) on stdout, with no
traceback on stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq_cluster.deploy.testing import RunningCluster, create_topics, rmq_cluster

README = Path(__file__).resolve().parents[3] / "README.md"
EXAMPLE = re.compile(
    r"<!-- example: ([\w-]+) -->\n```python\n(.*?)\n```\nprints:\n```text\n(.*?)\n```",
    re.S,
)
#: The examples the README promises (a marker lost in an edit fails here, not silently).
EXPECTED = ("trio-producer-push-consumer", "trio-pull-consumer", "trio-transaction", "blocking")
RUN_TIMEOUT_S = 120


def examples() -> dict[str, tuple[str, str]]:
    text = README.read_text(encoding="utf-8")
    found = {m.group(1): (m.group(2) + "\n", m.group(3) + "\n") for m in EXAMPLE.finditer(text)}
    # every marker is followed by a code block and its output (none half-written)
    assert len(found) == text.count("<!-- example: ")
    return found


def test_the_readme_has_every_example() -> None:
    assert tuple(examples()) == EXPECTED


#: The topics the README tells its reader to create first.
TOPICS = ("Orders", "Events", "Payments", "Audit", "Refunds")


def test_the_readme_creates_the_examples_topics() -> None:
    text = README.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith("for t in "))
    assert line.split(";")[0].split()[3:] == list(TOPICS)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RunningCluster]:
    with rmq_cluster("single") as c:
        create_topics(c.namesrv_addr, TOPICS)  # what the README's updateTopic line does
        yield c


@pytest.mark.parametrize("name", EXPECTED)
def test_readme_example(name: str, cluster: RunningCluster, tmp_path: Path) -> None:
    code, expected = examples()[name]
    script = tmp_path / f"{name}.py"
    script.write_text(code, encoding="utf-8")
    env = {**os.environ, "NAMESRV_ADDR": cluster.namesrv_addr}
    env.pop("RMQ_CLUSTER_LOG_LEVEL", None)  # as a user runs it: the library's defaults
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, check=False, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == expected
    assert "Traceback" not in done.stderr


def test_the_readme_pytest_example_passes_as_written(tmp_path: Path) -> None:
    """The "Testing your application with pytest" block, saved as a test file and run by pytest
    in a subprocess (the plugin starts its own session cluster, as for a user)."""
    text = README.read_text(encoding="utf-8")
    m = re.search(r"<!-- pytest-example -->\n```python\n(.*?)\n```", text, re.S)
    assert m is not None, "the README lost its pytest example"
    (tmp_path / "test_readme_pytest.py").write_text(m.group(1) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "test_readme_pytest.py"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
