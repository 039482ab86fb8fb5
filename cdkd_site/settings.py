"""cdkd Admin settings: one module, every deployment knob read from the environment.

The defaults make `manage.py runserver` work on a fresh checkout (SQLite, DEBUG on, a
Redis on localhost). A value that is present but malformed stops start-up with a message
that names the variable and what it should look like.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
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


DEBUG = envbool("DEBUG", "True")

SECRET_KEY = envsecret("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) must be set when DEBUG is off")
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
    "stacks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
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
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "stacks"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES", "False")
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"

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
# Workers load the job code and AWS models once, not in every job's fork (cdkd_site.queues).
RQ["WORKER_CLASS"] = "cdkd_site.queues.PreloadingWorker"
# The region cdkd would use as its CLI region (legacy bucket names carry it).
CDKD_DEFAULT_REGION = os.environ.get("CDKD_DEFAULT_REGION") or os.environ.get("AWS_REGION") or "us-east-1"
CDKD_PAGE_SIZE = envint("CDKD_PAGE_SIZE", "50", minimum=1)
# How long a sync trusts the bucket name and region an earlier sync resolved.
CDKD_BUCKET_RECHECK_SECONDS = envint("CDKD_BUCKET_RECHECK_SECONDS", "3600")
# A running operation whose worker wrote no heartbeat for this long is marked abandoned.
CDKD_OPERATION_ABANDON_SECONDS = envint("CDKD_OPERATION_ABANDON_SECONDS", "90", minimum=1)
# The TTL of the cdkd locks operations take (cdkd's own is 30 minutes); renewed every TTL/4.
CDKD_LOCK_TTL_SECONDS = envint("CDKD_LOCK_TTL_SECONDS", "1800", minimum=2)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "botocore": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
        "werkzeug": {"level": "ERROR"},
    },
}
