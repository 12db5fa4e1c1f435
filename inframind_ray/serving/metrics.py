"""Prometheus metrics of the serving plane, through Ray's metrics export (each node's metrics
agent serves them at ``/metrics``, names prefixed ``ray_``; ``serving.metrics_export_port``
fixes the port of a cluster this package starts). The Grafana dashboard
``deployments/grafana/inframind.json`` plots them; every name it uses is listed in ``NAMES``.
"""

from __future__ import annotations

from ray.util.metrics import Counter, Gauge, Histogram

LATENCY_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)

NAMES = (
    "inframind_queries_total", "inframind_query_latency_s", "inframind_queries_shed_total",
    "inframind_inflight_queries", "inframind_policy_info", "inframind_agent_calls_total",
    "inframind_agent_call_latency_s", "inframind_agent_call_retries_total",
    "inframind_replica_requests_total", "inframind_replica_queue_wait_s",
    "inframind_replica_waiting", "inframind_replica_running", "inframind_replica_kv_usage",
    "inframind_replica_e2e_ewma_s", "inframind_policy_version_info",
    "inframind_canary_queries", "inframind_ingress_inflight_limit",
)
"""Every metric this package exports (without Ray's ``ray_`` prefix)."""


def shed_counter() -> Counter:
    """Queries refused at the ingress, by reason (the orchestrator's and the ingress replica's
    own refusals)."""
    return Counter("inframind_queries_shed_total", "queries refused at the ingress",
                   tag_keys=("reason",))


def ingress_limit_gauge() -> Gauge:
    """The ingress replica's bound on queries in flight (``serving.adaptive_inflight``, else
    ``max_inflight_queries``)."""
    return Gauge("inframind_ingress_inflight_limit", "the ingress's bound on queries in flight")


class OrchestratorMetrics:
    """Queries, agent calls, shedding, retries and the serving policy, from the orchestrator."""

    def __init__(self) -> None:
        self.queries = Counter("inframind_queries_total", "queries answered, by final status",
                               tag_keys=("policy", "task", "status", "within_budget"))
        self.query_latency = Histogram("inframind_query_latency_s", "query latency (s)",
                                       boundaries=list(LATENCY_BUCKETS_S),
                                       tag_keys=("policy", "task"))
        self.shed = shed_counter()
        self.inflight = Gauge("inframind_inflight_queries", "queries in flight")
        self.policy = Gauge("inframind_policy_info", "1 for the serving default policy",
                            tag_keys=("policy", "status"))
        self._version_tags: dict | None = None
        self.version = Gauge("inframind_policy_version_info",
                             "1 for the registry version the learned policy serves",
                             tag_keys=("policy_version", "pinned"))
        self.calls = Counter("inframind_agent_calls_total", "agent calls, by model and status",
                             tag_keys=("model", "strategy", "status"))
        self.call_latency = Histogram("inframind_agent_call_latency_s",
                                      "agent call latency at the orchestrator (s)",
                                      boundaries=list(LATENCY_BUCKETS_S), tag_keys=("model",))
        self.canary = Gauge("inframind_canary_queries",
                            "queries of the running canary, by arm (0 when none runs)",
                            tag_keys=("arm", "candidate"))
        self._canary_tags: list[dict] = []
        self.retries = Counter("inframind_agent_call_retries_total",
                               "agent calls sent again after their replica died",
                               tag_keys=("model",))
        self.degraded = Counter("inframind_agent_calls_degraded_total",
                                "agent calls given up at their reserve point for the fastest "
                                "answer (on_deadline: degrade), by the model given up",
                                tag_keys=("model",))

    def set_policy(self, name: str, status: str) -> None:
        """The default policy now serving (status ``ok`` or the fallback's reason)."""
        self.policy.set(1.0, tags={"policy": name, "status": status[:120]})

    def set_version(self, version: str | None, pinned: bool) -> None:
        """The learned policy's registry version and pinned flag now (the previous pair, if
        different, drops to 0)."""
        tags = (None if version is None
                else {"policy_version": version, "pinned": str(pinned).lower()})
        last = self._version_tags
        if last is not None and last != tags:
            self.version.set(0.0, tags=last)
        if tags is not None:
            self.version.set(1.0, tags=tags)
        self._version_tags = tags

    def set_canary(self, candidate: str | None, routed: dict[str, int]) -> None:
        """Queries routed to each arm of the running canary (a finished one's drop to 0)."""
        for tags in self._canary_tags:
            if tags["candidate"] != candidate:
                self.canary.set(0.0, tags=tags)
        self._canary_tags = []
        if candidate is not None:
            for arm, n in routed.items():
                tags = {"arm": arm, "candidate": candidate}
                self.canary.set(float(n), tags=tags)
                self._canary_tags.append(tags)


class ReplicaMetrics:
    """Per model replica: requests by outcome, queue wait, and the load gauges it pushes."""

    def __init__(self, model: str) -> None:
        tags = {"model": model}
        self.requests = Counter("inframind_replica_requests_total",
                                "requests answered by the replica, by status",
                                tag_keys=("model", "status"))
        self.queue_wait = Histogram("inframind_replica_queue_wait_s",
                                    "wait in the replica's queue before the engine (s)",
                                    boundaries=list(LATENCY_BUCKETS_S), tag_keys=("model",))
        self.gauges = {k: Gauge(f"inframind_replica_{k}", f"replica {k}", tag_keys=("model",))
                       for k in ("waiting", "running", "kv_usage", "e2e_ewma_s")}
        for m in (self.requests, self.queue_wait, *self.gauges.values()):
            m.set_default_tags(tags)
