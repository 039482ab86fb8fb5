"""cdkd Admin settings: one module, every deployment knob read from the environment.

The defaults are production's (DEBUG off, so SECRET_KEY is required); `DEBUG=True
manage.py runserver` works on a fresh checkout (SQLite, a development key, a Redis on
localhost). A value that is present but malformed stops start-up with a message that
names the variable and what it should look like.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def envbool(name: str, default: str) -> bool:
    value = os.environ.get(name, default).strip()
    if value not in ("True", "False", "true", "false", "1", "0"):
        raise ImproperlyConfigured(f"{name} must be True or False, not {value!r}")
    return value in ("True", "true", "1")


def envint(name: str, default: str, *, minimum: int = 0) -> int:
    value = os.environ.get(name, default).strip()
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, not {value!r}") from None
    if number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}")
    return number


def envsecret(name: str, default: str = "") -> str:
    """A secret from NAME, or from the file named by NAME_FILE (keeps it out of `env`)."""
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {exc}") from None
    return os.environ.get(name, default)


def envcidrs(name: str) -> list[str]:
    """Comma-separated networks (a bare address is a /32 or /128), each checked here."""
    networks = []
    for item in os.environ.get(name, "").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not a network (write it like 10.0.0.0/8 or 192.168.1.5)"
            ) from None
    return networks


def envjson(name: str) -> dict:
    """A JSON object from NAME ({} when unset)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, not {raw!r}")
    return value


# pytest-django runs the suite with DEBUG off, as production runs. A test run gets fixed
# test-only keys, exported so the worker processes a test starts read the same ones.
TESTING = "pytest" in sys.modules
if TESTING:
    os.environ.setdefault("SECRET_KEY", "test-only-secret-key-never-used-outside-pytest")
    os.environ.setdefault("CDKD_ENCRYPTION_KEYS", "dGVzdC1vbmx5LWZlcm5ldC1rZXktMzItYnl0ZXMhISE=")

# Off unless asked for: a forgotten variable must not serve debug pages to the world.
DEBUG = envbool("DEBUG", "False")

SECRET_KEY = envsecret("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off (DEBUG=True for a development key)"
        )
    SECRET_KEY = "dev-only-insecure-key-do-not-use-in-production"

ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "template_partials",
    "django_htmx",
    "django_rq",
    "axes",
    "cdkd_site.apps.SiteConfig",
    "stacks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # A body over CDKD_REQUEST_MAX_BYTES is refused before any of it is read or stored.
    "cdkd_site.limits.RequestBodyLimit",
    # Static files straight from gunicorn, before sessions and auth touch the request.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "csp.middleware.CSPMiddleware",
    # Control and bidi characters from buckets shown as escapes on every HTML page.
    "stacks.visible.VisibleControlsMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "cdkd_site.sessions.IdleTimeoutMiddleware",
    # A single-sign-on session is re-checked with the provider now and then (stacks.sso).
    "stacks.sso.ProviderRecheck",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "cdkd_site.urls"
WSGI_APPLICATION = "cdkd_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "stacks.views.operations.nav",
            ],
            "builtins": ["template_partials.templatetags.partials"],
        },
    }
]

try:
    DATABASES = {
        "default": dj_database_url.parse(
            os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
            conn_max_age=envint("DATABASE_CONN_MAX_AGE", "0"),
        )
    }
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a database URL Django understands: {exc}") from None
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # Sync writes from worker threads and the web app at once; wait instead of failing.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 20

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# django-axes first: it refuses a locked-out username+address before a password is checked.
AUTHENTICATION_BACKENDS = ["cdkd_site.auth.LoginThrottleBackend", "django.contrib.auth.backends.ModelBackend"]
# Wrong passwords for one username from one address before that pair is locked out.
AXES_FAILURE_LIMIT = envint("CDKD_LOGIN_FAILURE_LIMIT", "5", minimum=1)
# Minutes a locked-out username+address waits (each further try restarts the wait).
AXES_COOLOFF_TIME = timedelta(minutes=envint("CDKD_LOGIN_COOLOFF_MINUTES", "15", minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
# Reverse proxies in front that append to X-Forwarded-For (0: the TCP peer is the client).
CDKD_PROXY_COUNT = envint("CDKD_PROXY_COUNT", "0")
AXES_CLIENT_IP_CALLABLE = "cdkd_site.auth.client_ip"
# No axes banner on every manage.py command; lockouts are still logged as warnings.
AXES_VERBOSE = False
LOGIN_URL = "login"

# --- Single sign-on (OpenID Connect, stacks.sso) --------------------------------------------
# The provider's issuer URL exactly as its tokens spell it; with a client id it turns SSO on.
CDKD_OIDC_ISSUER = os.environ.get("CDKD_OIDC_ISSUER", "").strip()
CDKD_OIDC_CLIENT_ID = os.environ.get("CDKD_OIDC_CLIENT_ID", "").strip()
CDKD_OIDC_ENABLED = bool(CDKD_OIDC_ISSUER or CDKD_OIDC_CLIENT_ID)
if CDKD_OIDC_ENABLED and not (CDKD_OIDC_ISSUER and CDKD_OIDC_CLIENT_ID):
    raise ImproperlyConfigured("Single sign-on needs both CDKD_OIDC_ISSUER and CDKD_OIDC_CLIENT_ID")
if CDKD_OIDC_ISSUER and not CDKD_OIDC_ISSUER.startswith(("https://", "http://")):
    raise ImproperlyConfigured(f"CDKD_OIDC_ISSUER must be an https:// URL, not {CDKD_OIDC_ISSUER!r}")
# The client secret, best from a file (CDKD_OIDC_CLIENT_SECRET_FILE) so it stays out of `env`.
CDKD_OIDC_CLIENT_SECRET = envsecret("CDKD_OIDC_CLIENT_SECRET")
if CDKD_OIDC_ENABLED and not CDKD_OIDC_CLIENT_SECRET:
    raise ImproperlyConfigured("Single sign-on needs CDKD_OIDC_CLIENT_SECRET_FILE (or CDKD_OIDC_CLIENT_SECRET)")
# Endpoints; each one left empty comes from the issuer's .well-known/openid-configuration,
# read on first use (the site starts while the provider is down) and kept per process.
CDKD_OIDC_AUTHORIZATION_ENDPOINT = os.environ.get("CDKD_OIDC_AUTHORIZATION_ENDPOINT", "").strip()
CDKD_OIDC_TOKEN_ENDPOINT = os.environ.get("CDKD_OIDC_TOKEN_ENDPOINT", "").strip()
CDKD_OIDC_USERINFO_ENDPOINT = os.environ.get("CDKD_OIDC_USERINFO_ENDPOINT", "").strip()
CDKD_OIDC_JWKS_ENDPOINT = os.environ.get("CDKD_OIDC_JWKS_ENDPOINT", "").strip()
# The claim that lists a person's groups (what group rules match), and the scopes asked for.
CDKD_OIDC_GROUPS_CLAIM = os.environ.get("CDKD_OIDC_GROUPS_CLAIM", "groups").strip() or "groups"
CDKD_OIDC_SCOPES = os.environ.get("CDKD_OIDC_SCOPES", "openid email profile").strip()
CDKD_OIDC_SIGN_ALGO = os.environ.get("CDKD_OIDC_SIGN_ALGO", "RS256").strip()
# Seconds of clock difference tolerated on a token's exp/iat; and for each call to the provider.
CDKD_OIDC_LEEWAY_SECONDS = envint("CDKD_OIDC_LEEWAY_SECONDS", "30")
CDKD_OIDC_TIMEOUT = envint("CDKD_OIDC_TIMEOUT", "10", minimum=1)
# The login page's button.
CDKD_OIDC_LABEL = os.environ.get("CDKD_OIDC_LABEL", "").strip() or "Log in with single sign-on"
# False hides the password form and refuses password posts (the Django admin's too).
CDKD_LOCAL_LOGIN = envbool("CDKD_LOCAL_LOGIN", "True")
if not CDKD_LOCAL_LOGIN and not CDKD_OIDC_ENABLED:
    raise ImproperlyConfigured("CDKD_LOCAL_LOGIN=False needs single sign-on (CDKD_OIDC_ISSUER and a client)")
if not CDKD_LOCAL_LOGIN:
    AUTHENTICATION_BACKENDS = []
if CDKD_OIDC_ENABLED:
    # Only the session's user lookup goes through the list; stacks.sso calls it directly.
    AUTHENTICATION_BACKENDS = [*AUTHENTICATION_BACKENDS, "stacks.sso.SsoBackend"]
# mozilla-django-oidc's names for the same (endpoints are resolved by stacks.sso).
OIDC_RP_CLIENT_ID = CDKD_OIDC_CLIENT_ID
OIDC_RP_CLIENT_SECRET = CDKD_OIDC_CLIENT_SECRET
OIDC_RP_SIGN_ALGO = CDKD_OIDC_SIGN_ALGO
OIDC_RP_SCOPES = CDKD_OIDC_SCOPES
OIDC_USE_PKCE = True
OIDC_TIMEOUT = CDKD_OIDC_TIMEOUT
# How often a single-sign-on session is re-checked with the provider (silently; groups and
# roles refreshed, a refusal logs out); 0 turns it off. mozilla-django-oidc's name below.
CDKD_OIDC_RECHECK_SECONDS = envint("CDKD_OIDC_RECHECK_SECONDS", "900")
OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = CDKD_OIDC_RECHECK_SECONDS
OIDC_STORE_ACCESS_TOKEN = False
OIDC_STORE_ID_TOKEN = False
LOGIN_REDIRECT_URL = "stacks"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# Where `manage.py collectstatic` puts the files whitenoise serves.
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT") or BASE_DIR / "var" / "static")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # Hashed, compressed names served forever-cacheable by whitenoise after collectstatic;
    # tests render pages without a collectstatic run.
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if TESTING
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Sessions and HTTPS -------------------------------------------------------------------
# Seconds without a request after which a session ends: activity pushes the expiry
# forward (cdkd_site.sessions, at most once a minute).
SESSION_COOKIE_AGE = envint("CDKD_SESSION_IDLE_SECONDS", "28800", minimum=120)
SESSION_COOKIE_HTTPONLY = True
# The site is served over HTTPS (behind a proxy that sets X-Forwarded-Proto): turns on
# every setting `manage.py check --deploy` asks for.
CDKD_HTTPS = envbool("CDKD_HTTPS", "False")
# Seconds browsers remember to use only HTTPS (with CDKD_HTTPS); preload needs a year.
CDKD_HSTS_SECONDS = envint("CDKD_HSTS_SECONDS", "31536000")
SESSION_COOKIE_SECURE = CDKD_HTTPS or envbool("SECURE_COOKIES", "False")
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
if CDKD_HTTPS:
    SECURE_SSL_REDIRECT = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = CDKD_HSTS_SECONDS
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

# Scripts and styles only from our own static files: no inline script, no eval (htmx is
# told not to need either in base.html). Style attributes stay allowed for the widths
# of progress bars and tree indents; <style> elements do not.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# --- Redis and RQ -------------------------------------------------------------------------
# REDIS_URL="fakeredis://" keeps queues in process memory (tests and the zero-setup demo).
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
if not REDIS_URL.startswith(("redis://", "rediss://", "unix://", "fakeredis://")):
    raise ImproperlyConfigured(
        f"REDIS_URL must start with redis://, rediss://, unix:// or fakeredis://, not {REDIS_URL!r}"
    )
RQ_QUEUES = {
    "default": {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 3600},
    "sync": {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 1800},
}
RQ = {"COMMIT_MODE": "on_db_commit"}
RQ_SHOW_ADMIN_LINK = False

# --- cdkd --------------------------------------------------------------------------------
# Seconds between scheduled syncs of every account run by the worker; 0 turns them off.
CDKD_SYNC_INTERVAL = envint("CDKD_SYNC_INTERVAL", "300")
# How many S3 GETs one sync runs at once (per account), and how many accounts at once.
CDKD_SYNC_CONCURRENCY = envint("CDKD_SYNC_CONCURRENCY", "32", minimum=1)
CDKD_SYNC_ACCOUNT_CONCURRENCY = envint("CDKD_SYNC_ACCOUNT_CONCURRENCY", "4", minimum=1)
# Seconds between scheduled drift checks (each account its own job); 0 turns them off. Reads per stack at once.
CDKD_DRIFT_INTERVAL = envint("CDKD_DRIFT_INTERVAL", "0")
CDKD_DRIFT_CONCURRENCY = envint("CDKD_DRIFT_CONCURRENCY", "10", minimum=1)
# Workers load the job code and AWS models once, not in every job's fork (cdkd_site.queues).
RQ["WORKER_CLASS"] = "cdkd_site.queues.PreloadingWorker"
# The region cdkd would use as its CLI region (legacy bucket names carry it).
CDKD_DEFAULT_REGION = os.environ.get("CDKD_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1"
CDKD_PAGE_SIZE = envint("CDKD_PAGE_SIZE", "50", minimum=1)
# The fewest approvers (never the requester) destroy needs on every account; no account policy goes below.
CDKD_MIN_APPROVERS_DESTROY = envint("CDKD_MIN_APPROVERS_DESTROY", "1")
# The same floor for deploy (the next issue's operation kind).
CDKD_MIN_APPROVERS_DEPLOY = envint("CDKD_MIN_APPROVERS_DEPLOY", "1")
# The floor for orphaning a whole record (0: an account's policy may switch approval off).
CDKD_MIN_APPROVERS_ORPHAN = envint("CDKD_MIN_APPROVERS_ORPHAN", "0")
# The floor for orphaning single resources.
CDKD_MIN_APPROVERS_ORPHAN_RESOURCES = envint("CDKD_MIN_APPROVERS_ORPHAN_RESOURCES", "0")
# The floor for restoring an earlier version of a record.
CDKD_MIN_APPROVERS_RESTORE = envint("CDKD_MIN_APPROVERS_RESTORE", "0")
# The floor for scrubbing secrets out of a record.
CDKD_MIN_APPROVERS_SCRUB = envint("CDKD_MIN_APPROVERS_SCRUB", "0")
# The floor for force-unlocking a stack.
CDKD_MIN_APPROVERS_FORCE_UNLOCK = envint("CDKD_MIN_APPROVERS_FORCE_UNLOCK", "0")
# Days the audit log must be able to name a record's versions: a state bucket whose lifecycle
# expires noncurrent versions sooner is a posture problem.
CDKD_AUDIT_RETENTION_DAYS = envint("CDKD_AUDIT_RETENTION_DAYS", "365", minimum=1)
# Seconds between bucket posture checks of each account (run from the sync schedule); 0: off.
CDKD_POSTURE_INTERVAL = envint("CDKD_POSTURE_INTERVAL", "86400")
# The floors for state migrate and for pruning event history.
CDKD_MIN_APPROVERS_STATE_MIGRATE = envint("CDKD_MIN_APPROVERS_STATE_MIGRATE", "0")
CDKD_MIN_APPROVERS_EVENTS_PRUNE = envint("CDKD_MIN_APPROVERS_EVENTS_PRUNE", "0")
# How long a sync trusts the bucket name and region an earlier sync resolved.
CDKD_BUCKET_RECHECK_SECONDS = envint("CDKD_BUCKET_RECHECK_SECONDS", "3600")
# A running operation whose worker wrote no heartbeat for this long is marked abandoned.
CDKD_OPERATION_ABANDON_SECONDS = envint("CDKD_OPERATION_ABANDON_SECONDS", "90", minimum=1)
# The TTL of the cdkd locks operations take (cdkd's own is 30 minutes); renewed every TTL/4.
CDKD_LOCK_TTL_SECONDS = envint("CDKD_LOCK_TTL_SECONDS", "1800", minimum=2)
# The attention board: a live lock taken longer ago than this (seconds) is a row; records
# below this schema version are "old" (v6 and earlier read provisionedBy as a legacy default).
CDKD_ATTENTION_LOCK_AGE = envint("CDKD_ATTENTION_LOCK_AGE", "3600", minimum=1)
CDKD_ATTENTION_MIN_SCHEMA = envint("CDKD_ATTENTION_MIN_SCHEMA", "7", minimum=1)

# --- Health and metrics (stacks.health, stacks.metrics) ---------------------------------------
# An idle worker renews its RQ heartbeat this often (RQ's own idle interval is 405 s, too
# slow for a health check); a busy one renews it every 30 s (RQ's job monitoring).
CDKD_WORKER_HEARTBEAT_SECONDS = envint("CDKD_WORKER_HEARTBEAT_SECONDS", "30", minimum=1)
# /healthz fails when a queue has no worker whose heartbeat is at most this old.
CDKD_HEALTH_WORKER_SECONDS = envint("CDKD_HEALTH_WORKER_SECONDS", "90", minimum=1)
if CDKD_HEALTH_WORKER_SECONDS - max(CDKD_WORKER_HEARTBEAT_SECONDS, 30) <= 0:
    raise ImproperlyConfigured(
        f"CDKD_HEALTH_WORKER_SECONDS ({CDKD_HEALTH_WORKER_SECONDS}) must be more than the worker heartbeat "
        f"interval (CDKD_WORKER_HEARTBEAT_SECONDS={CDKD_WORKER_HEARTBEAT_SECONDS}, and RQ's 30 s during a job)"
    )
# How long /healthz waits for Redis to answer (seconds).
CDKD_HEALTH_TIMEOUT_SECONDS = envint("CDKD_HEALTH_TIMEOUT_SECONDS", "2", minimum=1)
# /metrics is closed unless one of these is set; each one that is set must be satisfied.
# The bearer token Prometheus sends (or CDKD_METRICS_TOKEN_FILE: a file holding it).
CDKD_METRICS_TOKEN = envsecret("CDKD_METRICS_TOKEN").strip()
# Client networks allowed to scrape, comma-separated (10.0.0.0/8,192.168.1.5); the client
# address is the one CDKD_PROXY_COUNT picks.
CDKD_METRICS_ALLOW_CIDRS = envcidrs("CDKD_METRICS_ALLOW_CIDRS")

# How long a destroy waits for a custom resource's Delete handler to answer when its Lambda
# returned nothing (the CDK provider framework's async shape); cdkd's is 1 hour (CDK's
# totalTimeout). SNS tokens and handlers that returned something get cdkd's fixed 30 s.
CDKD_CUSTOM_RESOURCE_TIMEOUT_SECONDS = envint("CDKD_CUSTOM_RESOURCE_TIMEOUT_SECONDS", "3600", minimum=1)
# A destroy's per-resource deadline (cdkd's --resource-timeout, default 30 min): a delete still
# running then FAILS, its record kept; and the warning before it (--resource-warn-after, 5 min).
CDKD_DESTROY_RESOURCE_TIMEOUT_SECONDS = envint("CDKD_DESTROY_RESOURCE_TIMEOUT_SECONDS", "1800", minimum=1)
CDKD_DESTROY_RESOURCE_WARN_AFTER_SECONDS = envint("CDKD_DESTROY_RESOURCE_WARN_AFTER_SECONDS", "300", minimum=1)
# Largest cdk.out zip "Plan a deploy" accepts, and the most its files may expand to (bytes).
CDKD_ASSEMBLY_MAX_BYTES = envint("CDKD_ASSEMBLY_MAX_BYTES", str(64 * 1024 * 1024), minimum=1024)
# The largest request body at all (an assembly upload and its form fields, with room to spare).
CDKD_REQUEST_MAX_BYTES = envint("CDKD_REQUEST_MAX_BYTES", str(CDKD_ASSEMBLY_MAX_BYTES + 1024 * 1024), minimum=65536)
# The storage class keeping uploaded assemblies by content digest (S3: see README, django-storages).
CDKD_ASSEMBLY_STORAGE = os.environ.get("CDKD_ASSEMBLY_STORAGE") or "django.core.files.storage.FileSystemStorage"
# Its options as a JSON object; unset, the filesystem default keeps assemblies under var/assemblies.
CDKD_ASSEMBLY_STORAGE_OPTIONS = envjson("CDKD_ASSEMBLY_STORAGE_OPTIONS") or (
    {"location": str(BASE_DIR / "var" / "assemblies")} if CDKD_ASSEMBLY_STORAGE.endswith(".FileSystemStorage") else {}
)
STORAGES["assemblies"] = {"BACKEND": CDKD_ASSEMBLY_STORAGE, "OPTIONS": CDKD_ASSEMBLY_STORAGE_OPTIONS}
# --- notifications (stacks.notify, stacks.webhooks) ---
# The app's own address, for the links in emails and webhook payloads.
CDKD_BASE_URL = os.environ.get("CDKD_BASE_URL", "http://localhost:8000").strip().rstrip("/")
if not CDKD_BASE_URL.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"CDKD_BASE_URL must start with http:// or https://, not {CDKD_BASE_URL!r}")
# A lock older than this is reported once per lock (lock.stale) by the sync that sees it; 0: never.
CDKD_LOCK_STALE_SECONDS = envint("CDKD_LOCK_STALE_SECONDS", "3600")
# Webhook calls from the worker: timeout per attempt, retries after the first, first backoff (doubling).
CDKD_WEBHOOK_TIMEOUT_SECONDS = envint("CDKD_WEBHOOK_TIMEOUT_SECONDS", "10", minimum=1)
CDKD_WEBHOOK_RETRIES = envint("CDKD_WEBHOOK_RETRIES", "5")
CDKD_WEBHOOK_BACKOFF_SECONDS = envint("CDKD_WEBHOOK_BACKOFF_SECONDS", "10")
RQ_QUEUES["notify"] = {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 300}
# Email through Django's mail backend (SMTP unless EMAIL_BACKEND says otherwise).
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = envint("EMAIL_PORT", "25", minimum=1)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = envsecret("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = envbool("EMAIL_USE_TLS", "False")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "cdkd-admin@localhost")
# Fernet keys for record bodies at rest, comma-separated: the first encrypts, all decrypt.
CDKD_ENCRYPTION_KEYS = [k.strip() for k in envsecret("CDKD_ENCRYPTION_KEYS").split(",") if k.strip()]
if not CDKD_ENCRYPTION_KEYS:
    if not DEBUG and not ("pytest" in sys.modules or sys.argv[1:2] == ["test"]):
        raise ImproperlyConfigured(
            "CDKD_ENCRYPTION_KEYS (or CDKD_ENCRYPTION_KEYS_FILE) must be set when DEBUG is off: "
            "make one with `python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`"
        )
    # Development and tests only: a key derived from SECRET_KEY, so a checkout runs without
    # set-up. It is exactly as secret as SECRET_KEY (the dev fallback is public): never for
    # real data. Changing SECRET_KEY leaves the mirrored bodies unreadable (a sync skips
    # unchanged records): start from an empty database then.
    CDKD_ENCRYPTION_KEYS = [
        base64.urlsafe_b64encode(hashlib.sha256(b"cdkd-body-encryption:" + SECRET_KEY.encode()).digest()).decode()
    ]
for _number, _key in enumerate(CDKD_ENCRYPTION_KEYS, 1):
    try:
        Fernet(_key)
    except (ValueError, TypeError):
        # Never echo the value: it is a key.
        raise ImproperlyConfigured(
            f"CDKD_ENCRYPTION_KEYS: key {_number} of the list is not a Fernet key "
            "(32 url-safe base64-encoded bytes, as Fernet.generate_key() makes)"
        ) from None
del _number, _key

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # No control, bidi or line-break character from a bucket or a request reaches a log raw.
    "filters": {"visible": {"()": "stacks.visible.EscapeControlsFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["visible"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "botocore": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
        "werkzeug": {"level": "ERROR"},
        # Each failed login's failure and lockout warnings, without three INFO lines more.
        "axes": {"level": "WARNING"},
    },
}
