from __future__ import annotations

from django.apps import AppConfig


class SiteConfig(AppConfig):
    """The site itself as an app: connects the session idle timeout to logins."""

    name = "cdkd_site"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_in

        from cdkd_site.sessions import stamp_login

        user_logged_in.connect(stamp_login, dispatch_uid="cdkd-session-stamp-login")
