"""The in-process cluster fixture of the client tests (NameServer + broker, fast client timers)."""

from tests.integration.client.conftest import cluster  # noqa: F401  (a fixture)
