"""RQ queues, with an in-memory Redis when REDIS_URL is fakeredis:// (tests, demo fallback)."""

from __future__ import annotations

import functools

import django_rq
from django.conf import settings
from rq import Queue


@functools.cache
def _fake_connection(url: str):
    import fakeredis

    return fakeredis.FakeStrictRedis(server=fakeredis.FakeServer())


def get_connection(name: str = "default"):
    if settings.REDIS_URL.startswith("fakeredis://"):
        return _fake_connection(settings.REDIS_URL)
    return django_rq.get_connection(name)


def get_queue(name: str = "default") -> Queue:
    """The named queue. Enqueue inside a transaction and the job is sent on commit."""
    if settings.REDIS_URL.startswith("fakeredis://"):
        return django_rq.get_queue(name, connection=get_connection(name))
    return django_rq.get_queue(name)
