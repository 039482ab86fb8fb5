"""Start-up checks for settings whose mistakes would otherwise surface only later."""

from __future__ import annotations

import re

from django.conf import settings
from django.core.checks import Error, Warning, register

REGION_RE = re.compile(r"^(?:[a-z]{2}|eusc)(-[a-z]+)+-\d+$")


@register()
def settings_check(app_configs, **kwargs):  # noqa: ARG001
    problems = []
    if not REGION_RE.match(settings.CDKD_DEFAULT_REGION):
        problems.append(
            Error(
                f"CDKD_DEFAULT_REGION {settings.CDKD_DEFAULT_REGION!r} is not an AWS region name",
                hint="Set CDKD_DEFAULT_REGION (or AWS_REGION) to a region such as us-east-1.",
                id="stacks.E001",
            )
        )
    if not settings.DEBUG and settings.SECRET_KEY.startswith("dev-only"):
        problems.append(Error("SECRET_KEY is the development key while DEBUG is off", id="stacks.E002"))
    if settings.REDIS_URL.startswith("fakeredis://") and not settings.DEBUG:
        problems.append(
            Warning("REDIS_URL is fakeredis:// with DEBUG off: jobs run only inside this process", id="stacks.W001")
        )
    return problems
