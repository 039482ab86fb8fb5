"""Top-level routes: login/logout, the Django admin and the stacks app."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from stacks import api
from stacks.views.health import healthz, metrics_view

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="stacks", permanent=False), name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", api.urls()),
    path("api/schema/", api.schema, name="api_schema"),
    path("", include("stacks.urls")),
]
