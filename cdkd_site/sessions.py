"""The session idle timeout: a logged-in person's activity pushes the session's expiry
forward (SESSION_COOKIE_AGE from then), at most once a minute, so that a page polling every
second does not write the session row every second."""

from __future__ import annotations

import time

from django.contrib.auth import SESSION_KEY

REFRESHED = "cdkd_session_refreshed"
REFRESH_EVERY = 60  # seconds; the idle timeout is therefore exact to within a minute


def stamp_login(sender, request, user, **kwargs) -> None:
    """A login saves the session anyway: note the time so the next request need not."""
    request.session[REFRESHED] = int(time.time())


class IdleTimeoutMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        session = request.session
        if SESSION_KEY in session:
            now = int(time.time())
            if now - session.get(REFRESHED, 0) >= REFRESH_EVERY:
                # Marks the session modified: SessionMiddleware saves it with a new expiry
                # and sends the cookie again. Before the view, so a logout's flush wins.
                session[REFRESHED] = now
        return self.get_response(request)
