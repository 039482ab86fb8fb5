"""The loopback OpenID provider's settings: django-oauth-toolkit's OIDC provider in its own
Django project and process (demo/oidc_provider/server.py). Everything comes from the
environment process.py sets: the SQLite file, the RS256 key made at first start, the issuer
URL, how long an identity token lives, and whether to hash passwords fast (tests only)."""

import os
import secrets
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Only the provider's own sessions and CSRF tokens use it: a new one per process is enough.
SECRET_KEY = os.environ.get("OIDC_PROVIDER_SECRET_KEY") or secrets.token_urlsafe(40)
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "demo.oidc_provider.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [HERE / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["OIDC_PROVIDER_DB"]}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
LOGIN_URL = "/accounts/login/"
# The provider's cookies must not be confused with the app's in a shared browser.
SESSION_COOKIE_NAME = "provider_sessionid"
CSRF_COOKIE_NAME = "provider_csrftoken"
if os.environ.get("OIDC_PROVIDER_FAST_HASH") == "1":  # the tests make many people; the demo keeps Django's default
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": Path(os.environ["OIDC_PROVIDER_KEY"]).read_text(),
    "OIDC_ISS_ENDPOINT": os.environ["OIDC_PROVIDER_ISSUER"],
    "OAUTH2_VALIDATOR_CLASS": "demo.oidc_provider.validators.GroupsValidator",
    "SCOPES": {"openid": "OpenID Connect", "email": "E-mail", "profile": "Profile"},
    "PKCE_REQUIRED": True,
    # Negative for the expired-token test: a token already past its exp when issued.
    "ID_TOKEN_EXPIRE_SECONDS": int(os.environ.get("OIDC_PROVIDER_ID_TOKEN_SECONDS", "600")),
}
# Errors (a 500's traceback) to stderr, which process.py keeps in the provider's log.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"level": "ERROR", "handlers": ["stderr"]},
}
