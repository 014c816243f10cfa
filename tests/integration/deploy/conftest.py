"""The ``rmq_cluster_factory`` fixture, as a user's conftest.py would get it."""

from rmq_cluster.deploy.testing import rmq_cluster_factory

__all__ = ["rmq_cluster_factory"]
