"""Top-level routes: login/logout (password and single sign-on), the Django admin and the stacks app."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from stacks import api
from stacks.sso import SiteLoginView, SsoCallbackView, SsoStartView
from stacks.views.health import healthz, metrics_view

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="stacks", permanent=False), name="home"),
    path("login/", SiteLoginView.as_view(), name="login"),
    # Single sign-on (OpenID Connect): off unless CDKD_OIDC_ISSUER is set (then a 404 page).
    path("oidc/authenticate/", SsoStartView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", SsoCallbackView.as_view(), name="oidc_authentication_callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", api.urls()),
    path("api/schema/", api.schema, name="api_schema"),
    path("", include("stacks.urls")),
]
