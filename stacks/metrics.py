"""The Prometheus metrics /metrics serves, and who may read them.

Every value is computed when Prometheus scrapes, from the database and Redis, by one
custom Collector registered on a private CollectorRegistry. Nothing is counted in process
memory: gunicorn runs several processes and a scrape lands on any one of them, so in-memory
counters would answer differently per process (and reset at each restart). Reading the
rows every process shares makes every process give the same answer. The queries are
bounded: a fixed number (five, whatever the number of stacks, locks or operations), each
aggregated in the database and returning at most a row per account or per kind and status.

No per-process metrics (Python GC, process CPU) are exported for the same reason; the
default registry, where libraries put those, is not used.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from datetime import UTC

from django.conf import settings
from django.db.models import Count, Q, Sum
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)


class CdkdCollector(Collector):
    """The app's own metrics, read at scrape time (see the module docstring)."""

    def collect(self):
        yield from self.account_metrics()
        yield from self.operation_metrics()
        yield from self.queue_metrics()

    # --- the database --------------------------------------------------------------------

    def account_metrics(self):
        from stacks.models import Account, BucketStatus, DriftCheck, Lock, SecretFinding, Stack, now_ms

        accounts = list(
            Account.objects.order_by("account_id").values_list(
                "pk", "account_id", "name", "bucket_status", "last_sync_started_at", "last_synced_at", "last_sync_error"
            )
        )
        stacks = {
            row["account_id"]: row
            for row in Stack.objects.order_by()
            .values("account_id")
            .annotate(n=Count("id"), resources=Sum("resource_count"), defects=Count("id", filter=Q(has_defects=True)))
        }
        now = now_ms()
        # A lock whose expiresAt is absent or past is expired, as cdkd counts it (Lock.state).
        locks = {
            row["account_id"]: row
            for row in Lock.objects.order_by()
            .values("account_id")
            .annotate(
                live=Count("id", filter=Q(readable=True, expires_at_ms__gt=now)),
                expired=Count(
                    "id", filter=Q(readable=True) & (Q(expires_at_ms__isnull=True) | Q(expires_at_ms__lte=now))
                ),
                unreadable=Count("id", filter=Q(readable=False)),
            )
        }
        findings = {
            row["account_id"]: row
            for row in SecretFinding.objects.order_by()
            .values("account_id")
            .annotate(
                current=Count("id", filter=Q(version_id__isnull=True)),
                noncurrent=Count("id", filter=Q(version_id__isnull=False)),
            )
        }
        # The latest drift check of each stack (DriftCheck.latest): stacks checked, stacks with
        # drift, and the drifted resources in them.
        drift = {
            row["account_id"]: row
            for row in DriftCheck.objects.filter(latest=True)
            .order_by()
            .values("account_id")
            .annotate(
                checked=Count("id"),
                drifted_stacks=Count("id", filter=Q(drifted__gt=0)),
                drifted_resources=Sum("drifted"),
            )
        }

        info = InfoMetricFamily("cdkd_account", "An account the app mirrors, with its label", labels=["account"])
        bucket = GaugeMetricFamily(
            "cdkd_account_bucket_status",
            "1 for the state bucket's status as the last sync found it, 0 for the others",
            labels=["account", "status"],
        )
        started = GaugeMetricFamily(
            "cdkd_account_last_sync_start_timestamp_seconds",
            "When the last sync of the account started",
            labels=["account"],
        )
        succeeded = GaugeMetricFamily(
            "cdkd_account_last_sync_success_timestamp_seconds",
            "When the last sync of the account that reached the end finished",
            labels=["account"],
        )
        duration = GaugeMetricFamily(
            "cdkd_account_last_sync_duration_seconds",
            "How long the account's last sync took (absent while a later one is running or has failed)",
            labels=["account"],
        )
        errors = GaugeMetricFamily(
            "cdkd_account_sync_errors",
            "Errors the account's last sync reported (0: a clean sync)",
            labels=["account"],
        )
        stack_count = GaugeMetricFamily("cdkd_stacks", "State records mirrored", labels=["account"])
        resource_count = GaugeMetricFamily(
            "cdkd_resources", "Resources in the mirrored state records", labels=["account"]
        )
        defect_count = GaugeMetricFamily("cdkd_stacks_with_defects", "State records with defects", labels=["account"])
        lock_count = GaugeMetricFamily(
            "cdkd_locks", "Stack locks by state (live: held now)", labels=["account", "state"]
        )
        finding_count = GaugeMetricFamily(
            "cdkd_secret_findings",
            "Secret findings of the last scans, in current objects or in noncurrent versions",
            labels=["account", "version"],
        )
        drift_stacks = GaugeMetricFamily(
            "cdkd_drift_stacks",
            "Stacks by their latest drift check (checked: with a check; drifted: it found drift)",
            labels=["account", "state"],
        )
        drift_resources = GaugeMetricFamily(
            "cdkd_drift_resources",
            "Resources MODIFIED or DELETED in the stacks' latest drift checks",
            labels=["account"],
        )

        for pk, account_id, name, status, started_at, synced_at, last_error in accounts:
            label = [account_id]
            info.add_metric(label, {"name": name})
            for choice in BucketStatus.values:
                bucket.add_metric([account_id, choice], 1.0 if status == choice else 0.0)
            if started_at is not None:
                started.add_metric(label, started_at.astimezone(UTC).timestamp())
            if synced_at is not None:
                succeeded.add_metric(label, synced_at.astimezone(UTC).timestamp())
                if started_at is not None and synced_at >= started_at:
                    duration.add_metric(label, (synced_at - started_at).total_seconds())
            # The errors are stored one a line (stacks.sync); a bucket failure is one.
            errors.add_metric(label, float(len([line for line in last_error.splitlines() if line.strip()])))
            row = stacks.get(pk, {})
            stack_count.add_metric(label, float(row.get("n", 0)))
            resource_count.add_metric(label, float(row.get("resources") or 0))
            defect_count.add_metric(label, float(row.get("defects", 0)))
            row = locks.get(pk, {})
            for state in ("live", "expired", "unreadable"):
                lock_count.add_metric([account_id, state], float(row.get(state, 0)))
            row = findings.get(pk, {})
            for version in ("current", "noncurrent"):
                finding_count.add_metric([account_id, version], float(row.get(version, 0)))
            row = drift.get(pk, {})
            drift_stacks.add_metric([account_id, "checked"], float(row.get("checked", 0)))
            drift_stacks.add_metric([account_id, "drifted"], float(row.get("drifted_stacks", 0)))
            drift_resources.add_metric(label, float(row.get("drifted_resources") or 0))

        yield info
        yield bucket
        yield started
        yield succeeded
        yield duration
        yield errors
        yield stack_count
        yield resource_count
        yield defect_count
        yield lock_count
        yield finding_count
        yield drift_stacks
        yield drift_resources

    def operation_metrics(self):
        from stacks.models import FINISHED_STATUSES, Operation, OperationKind, OperationStatus

        counts = {
            (row["kind"], row["status"]): row["n"]
            for row in Operation.objects.order_by().values("kind", "status").annotate(n=Count("id"))
        }
        # A finished operation never changes status again (a retry is a new operation), so
        # the finished counts only grow: a counter, which rate() and increase() can use.
        finished = CounterMetricFamily(
            "cdkd_operations_finished", "Operations that finished, by kind and result", labels=["kind", "result"]
        )
        open_ = GaugeMetricFamily(
            "cdkd_operations_open", "Operations not finished yet, by kind and status", labels=["kind", "status"]
        )
        kinds = list(OperationKind.values) + sorted({k for k, _ in counts} - set(OperationKind.values))
        for kind in kinds:
            for status in OperationStatus.values:
                family = finished if status in FINISHED_STATUSES else open_
                family.add_metric([kind, status], float(counts.get((kind, status), 0)))
        yield finished
        yield open_

    # --- Redis ---------------------------------------------------------------------------

    def queue_metrics(self):
        """Queue depth per queue and the workers seen; `cdkd_redis_up` 0 (and no queue
        series) when Redis does not answer, so the database metrics still come through."""
        from rq import Queue
        from rq.registry import DeferredJobRegistry, FailedJobRegistry, ScheduledJobRegistry, StartedJobRegistry

        from stacks.health import live_workers, redis_connection

        up = GaugeMetricFamily("cdkd_redis_up", "1 when Redis answered this scrape")
        jobs = GaugeMetricFamily(
            "cdkd_queue_jobs", "Jobs per RQ queue and state (queued: waiting for a worker)", labels=["queue", "state"]
        )
        workers = GaugeMetricFamily(
            "cdkd_queue_workers",
            "Workers listening on the queue whose heartbeat is at most CDKD_HEALTH_WORKER_SECONDS old",
            labels=["queue"],
        )
        registries = {
            "started": StartedJobRegistry,
            "failed": FailedJobRegistry,
            "scheduled": ScheduledJobRegistry,
            "deferred": DeferredJobRegistry,
        }
        connection = redis_connection()
        try:
            names = list(settings.RQ_QUEUES)
            # Plain LLEN/ZCARD in one round trip: RQ's own .count cleans registries up, and
            # a scrape must not write.
            pipe = connection.pipeline(transaction=False)
            for name in names:
                pipe.llen(Queue(name, connection=connection).key)
                for cls in registries.values():
                    pipe.zcard(cls(name, connection=connection).key)
            replies = iter(pipe.execute())
            for name in names:
                jobs.add_metric([name, "queued"], float(next(replies)))
                for state in registries:
                    jobs.add_metric([name, state], float(next(replies)))
            for name, count in live_workers(connection).items():
                workers.add_metric([name], float(count))
        except Exception as exc:  # Redis down: say so in a metric; the reason to the log only
            logger.warning("metrics: Redis did not answer: %s: %s", type(exc).__name__, exc)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        yield jobs
        yield workers


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(CdkdCollector())


# --- who may scrape ------------------------------------------------------------------------


def refusal(request) -> tuple[int, str] | None:
    """Why this request may not read the metrics (status, message), or None when it may.
    Closed unless CDKD_METRICS_TOKEN or CDKD_METRICS_ALLOW_CIDRS is set (404: nothing
    here); each one that is set must be satisfied."""
    token = settings.CDKD_METRICS_TOKEN
    networks = settings.CDKD_METRICS_ALLOW_CIDRS
    if not token and not networks:
        return 404, "Metrics are off: set CDKD_METRICS_TOKEN or CDKD_METRICS_ALLOW_CIDRS."
    if networks and not address_allowed(client_address(request), networks):
        return 403, "This address may not read the metrics (CDKD_METRICS_ALLOW_CIDRS)."
    if token:
        scheme, _, sent = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(sent.strip().encode(), token.encode()):
            return 401, "A bearer token is needed to read the metrics (Authorization: Bearer <CDKD_METRICS_TOKEN>)."
    return None


def client_address(request) -> str | None:
    from cdkd_site.auth import client_ip

    return client_ip(request)


def address_allowed(address: str | None, networks: list[str]) -> bool:
    try:
        ip = ipaddress.ip_address((address or "").strip())
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:10.1.2.3 from a dual-stack socket is 10.1.2.3
    return any(ip in ipaddress.ip_network(net) for net in networks)
