"""/healthz against the real database and a real Redis: each check, the status code, and
that the body names no host, port or password."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from tests.support.workers import ROOT, database_url, kill_tree, wait_for

pytestmark = pytest.mark.django_db


def get(client):
    response = client.get("/healthz")
    return response.status_code, json.loads(response.content)


def test_it_answers_200_with_every_check_ok_when_the_services_are_up(client, register_worker):
    register_worker(("default", "sync", "notify"))

    status, body = get(client)

    assert status == 200
    assert body == {
        "status": "ok",
        "checks": {
            "database": {"ok": True},
            "redis": {"ok": True},
            "worker": {"ok": True, "workers": {"default": 1, "sync": 1, "notify": 1}},
        },
    }


def test_it_needs_no_login_and_is_never_cached(client, register_worker):
    register_worker()

    response = client.get("/healthz")

    assert response.status_code == 200  # not a redirect to the login page
    assert "no-cache" in response["Cache-Control"] and "no-store" in response["Cache-Control"]
    assert response["Content-Type"] == "application/json"


def test_it_answers_503_when_redis_does_not_answer_and_names_no_host_or_password(client, settings, closed_port, caplog):
    settings.REDIS_URL = f"redis://:hunter2@127.0.0.1:{closed_port}/0"

    response = client.get("/healthz")
    body = json.loads(response.content)

    assert response.status_code == 503
    assert body["status"] == "failing"
    assert body["checks"]["database"] == {"ok": True}
    assert body["checks"]["redis"] == {"ok": False, "detail": "Redis did not answer"}
    assert body["checks"]["worker"]["ok"] is False
    for leak in ("hunter2", "127.0.0.1", str(closed_port), "redis://"):
        assert leak not in response.content.decode()
    # The reason is logged for the operator, still without the password.
    assert any("redis check failed" in r.getMessage() for r in caplog.records)
    assert "hunter2" not in caplog.text


def test_it_answers_503_when_no_worker_is_registered(client, redis_db):
    status, body = get(client)

    assert status == 503
    assert body["checks"]["redis"] == {"ok": True}
    assert body["checks"]["worker"] == {
        "ok": False,
        "workers": {"default": 0, "sync": 0, "notify": 0},
        "detail": (
            f"no worker with a heartbeat in the last {settings.CDKD_HEALTH_WORKER_SECONDS} s on: default, sync, notify"
        ),
    }


def test_it_answers_503_when_the_only_worker_heartbeat_is_too_old(client, register_worker):
    # A SIGKILLed worker leaves its hash behind until it expires: its heartbeat's age tells.
    register_worker(age_seconds=settings.CDKD_HEALTH_WORKER_SECONDS + 5)

    status, body = get(client)

    assert status == 503
    assert body["checks"]["worker"]["workers"] == {"default": 0, "sync": 0, "notify": 0}


def test_it_answers_503_when_a_queue_has_no_worker(client, register_worker):
    register_worker(("default",))

    status, body = get(client)

    assert status == 503
    assert body["checks"]["worker"]["workers"] == {"default": 1, "sync": 0, "notify": 0}
    assert body["checks"]["worker"]["detail"].endswith("on: sync, notify")


@pytest.mark.django_db(transaction=True)
def test_it_answers_503_when_the_database_does_not_answer(client, register_worker, closed_port):
    """The real PostgreSQL driver, pointed at a port nothing listens on."""
    from django.db import connections

    if connection.vendor != "postgresql":
        pytest.skip("repoints the PostgreSQL connection at a closed port")
    register_worker()
    db = connections["default"]
    saved = db.settings_dict["PORT"], db.settings_dict["HOST"]
    db.close()
    db.settings_dict["HOST"], db.settings_dict["PORT"] = "127.0.0.1", closed_port
    try:
        response = client.get("/healthz")
    finally:
        db.close()
        db.settings_dict["PORT"], db.settings_dict["HOST"] = saved

    assert response.status_code == 503
    body = json.loads(response.content)
    assert body["checks"]["database"] == {"ok": False, "detail": "the database did not answer"}
    assert body["checks"]["redis"] == {"ok": True}
    assert str(closed_port) not in response.content.decode() and "127.0.0.1" not in response.content.decode()


def test_it_answers_405_to_a_post(client, register_worker):
    register_worker()

    assert client.post("/healthz").status_code == 405


@pytest.mark.django_db(transaction=True)
def test_it_sees_a_real_rq_worker_process_and_loses_it_when_it_dies(client, redis_db, settings):
    """A real `manage.py rqworker default sync notify` (the PreloadingWorker): /healthz turns 200
    once it registers; its idle heartbeat renews every CDKD_WORKER_HEARTBEAT_SECONDS (1 s
    here; RQ's own idle interval is 405 s); SIGKILLed, it leaves its registration behind and
    /healthz turns 503 once the heartbeat is older than CDKD_HEALTH_WORKER_SECONDS."""
    from rq import Worker

    if connection.vendor != "postgresql":
        pytest.skip("the worker process shares the test's PostgreSQL database")
    env = {
        **__import__("os").environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "CDKD_SYNC_INTERVAL": "0",
        "CDKD_WORKER_HEARTBEAT_SECONDS": "1",
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "rqworker", "default", "sync", "notify"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: client.get("/healthz").status_code == 200, timeout=60, what="the worker to register")
        assert get(client)[1]["checks"]["worker"]["workers"] == {"default": 1, "sync": 1, "notify": 1}

        (registered,) = Worker.all(connection=redis_db)
        first = registered.last_heartbeat

        def renewed() -> bool:
            registered.refresh()
            return registered.last_heartbeat > first

        wait_for(renewed, timeout=30, what="the idle worker to renew its heartbeat")
    finally:
        kill_tree(worker.pid)
        worker.wait(timeout=10)

    assert Worker.all(connection=redis_db)  # still registered: a killed worker says nothing
    settings.CDKD_HEALTH_WORKER_SECONDS = 2
    wait_for(lambda: client.get("/healthz").status_code == 503, timeout=30, what="the dead worker's heartbeat to age")
    assert get(client)[1]["checks"]["worker"]["workers"] == {"default": 0, "sync": 0, "notify": 0}


def test_it_refuses_a_worker_window_no_longer_than_the_heartbeat_interval():
    env = {**__import__("os").environ, "CDKD_WORKER_HEARTBEAT_SECONDS": "60", "CDKD_HEALTH_WORKER_SECONDS": "60"}
    result = subprocess.run(
        [sys.executable, "-c", "import cdkd_site.settings"], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert result.returncode != 0
    assert "CDKD_HEALTH_WORKER_SECONDS (60) must be more than the worker heartbeat interval" in result.stderr
