"""The NameServer's metric families (``metricsPort`` >= 0): what a NameServer can tell.

Brokers alive and clusters, topics with routes, open connections (gauges read at scrape time
from the route tables and the server); requests answered by request code, broker
registrations and ACL denials (counters). Request codes are labelled only for the codes a
NameServer serves: any other code a peer sends is counted under ``code="other"``, so a peer
cannot grow the number of series. Pure: no I/O, no trio.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final

from ..cluster.metrics import Registry
from ..cluster.remoting.codes import RequestCode, ResponseCode
from .processor import NAMESRV_REQUEST_CODES
from .route_info import RouteInfoManager

#: The label of every request code a NameServer does not serve.
OTHER_CODE: Final = "other"

Rows = Iterable[tuple[Mapping[str, object] | None, float]]


def _code_label(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


class NamesrvMetrics:
    """Counters the NameServer feeds per request, and the families of its /metrics."""

    def __init__(
        self,
        node: str,
        routes: Callable[[], RouteInfoManager],
        connections: Callable[[], int],
        acl_denials: Callable[[], int],
    ) -> None:
        self._routes = routes
        #: request code -> requests answered (codes a NameServer serves; the rest: OTHER_CODE)
        self.requests: dict[int | str, int] = {}
        #: REGISTER_BROKER answered SUCCESS, and those that made a broker live
        self.registrations = 0
        self.new_brokers = 0
        reg = self.registry = Registry({"node": node})
        gauge, counter = "gauge", "counter"
        reg.collect("rmq_namesrv_live_brokers", gauge, "Brokers registered and alive",
                    lambda: [(None, len(routes().live_brokers))])
        reg.collect("rmq_namesrv_clusters", gauge, "Clusters with a live broker",
                    lambda: [(None, len(routes().cluster_addr_table))])
        reg.collect("rmq_namesrv_topics", gauge, "Topics with routes",
                    lambda: [(None, len(routes().topic_queue_table))])
        reg.collect("rmq_namesrv_connections", gauge, "Open remoting connections",
                    lambda: [(None, connections())])
        reg.collect("rmq_namesrv_requests", counter, "Requests answered, by request code",
                    self._request_rows)
        reg.collect("rmq_namesrv_broker_registrations", counter,
                    "REGISTER_BROKER requests answered SUCCESS",
                    lambda: [(None, self.registrations)])
        reg.collect("rmq_namesrv_new_brokers", counter,
                    "Registrations of a broker that was not live",
                    lambda: [(None, self.new_brokers)])
        reg.collect("rmq_acl_denials", counter, "Requests refused by the ACL",
                    lambda: [(None, acl_denials())])

    def request(self, code: int) -> None:
        """One request answered (its code as the peer sent it)."""
        key: int | str = code if code in NAMESRV_REQUEST_CODES else OTHER_CODE
        self.requests[key] = self.requests.get(key, 0) + 1

    def registered(self, response_code: int, *, new: bool) -> None:
        """A REGISTER_BROKER answered ``response_code``; ``new``: it made the broker live."""
        if response_code == ResponseCode.SUCCESS:
            self.registrations += 1
            self.new_brokers += int(new)

    def render(self) -> str:
        return self.registry.render()

    def _request_rows(self) -> Rows:
        return [
            ({"code": str(code),
              "request": _code_label(code) if isinstance(code, int) else code},
             n)
            for code, n in sorted(self.requests.items(), key=lambda kv: str(kv[0]))
        ]
