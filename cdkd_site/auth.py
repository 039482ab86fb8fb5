"""Login throttling (django-axes) as this site runs it: who the client is, and which
authentications count as login attempts."""

from __future__ import annotations

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.http import HttpRequest


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' lockout check for every web login (the login page and the admin's both pass
    the request). An authenticate() without a request (the test client's login(), a shell)
    is no web attempt and has no address to count against, so it is left to ModelBackend
    instead of failing."""

    def authenticate(self, request: HttpRequest | None, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def client_ip(request: HttpRequest) -> str | None:
    """The client's address: the TCP peer, or with CDKD_PROXY_COUNT=N the address the
    outermost of our N proxies saw. Entries left of that are the client's own words and
    could be anything, so a forged X-Forwarded-For cannot dodge the lockout."""
    count = settings.CDKD_PROXY_COUNT
    if count:
        hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
        if len(hops) >= count:
            return hops[-count]
    return request.META.get("REMOTE_ADDR")
