"""Single sign-on: OpenID Connect login through mozilla-django-oidc, set up from the
CDKD_OIDC_* settings.

The provider's endpoints come from explicit settings or from the issuer's
`.well-known/openid-configuration`, fetched on first use (so the site starts while the
provider is down) and kept for the process. Beyond what the library checks (signature,
nonce, PKCE), the identity token must name the configured issuer and our client id as its
audience and be unexpired. People are matched by (issuer, subject), never by an e-mail
address the provider may let them change; the groups claim is stored and the group rules
(`stacks.grouproles`) re-evaluated at every login, and at every silent re-check of the
session with the provider (`ProviderRecheck`, every CDKD_OIDC_RECHECK_SECONDS)."""

from __future__ import annotations

import logging
import re
import threading

import jwt
import requests
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.decorators import method_decorator
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.middleware import SessionRefresh
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from stacks.grouproles import refresh_user
from stacks.models import SsoIdentity

logger = logging.getLogger(__name__)

MAX_GROUPS = 1000
MAX_GROUP_LENGTH = 255
DISCOVERY_MAX_BYTES = 256 * 1024

# mozilla-django-oidc's endpoint settings, and the discovery document's names for them.
ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": ("CDKD_OIDC_AUTHORIZATION_ENDPOINT", "authorization_endpoint"),
    "OIDC_OP_TOKEN_ENDPOINT": ("CDKD_OIDC_TOKEN_ENDPOINT", "token_endpoint"),
    "OIDC_OP_USER_ENDPOINT": ("CDKD_OIDC_USERINFO_ENDPOINT", "userinfo_endpoint"),
    "OIDC_OP_JWKS_ENDPOINT": ("CDKD_OIDC_JWKS_ENDPOINT", "jwks_uri"),
}


class SsoError(Exception):
    """Why a single sign-on login was refused, worded for the person trying it."""


_discovered: dict[str, dict] = {}
_discovery_lock = threading.Lock()


def enabled() -> bool:
    return bool(getattr(settings, "CDKD_OIDC_ENABLED", False))


def discovery(issuer: str) -> dict:
    """The issuer's discovery document, fetched once per process. It must name the same
    issuer (OpenID Connect Discovery 1.0, section 4.3), or a look-alike could hand out its
    own endpoints and keys."""
    with _discovery_lock:
        if issuer in _discovered:
            return _discovered[issuer]
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            response = requests.get(url, timeout=settings.CDKD_OIDC_TIMEOUT, allow_redirects=False)
            response.raise_for_status()
            if len(response.content) > DISCOVERY_MAX_BYTES:
                raise ValueError(f"larger than {DISCOVERY_MAX_BYTES} bytes")
            document = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise SsoError(f"the identity provider's discovery document {url} could not be read ({exc})") from None
        if not isinstance(document, dict) or document.get("issuer") != issuer:
            named = document.get("issuer") if isinstance(document, dict) else None
            raise SsoError(f"the discovery document at {url} names the issuer {named!r}, not {issuer!r}")
        _discovered[issuer] = document
        return document


def forget_discovery() -> None:
    """Tests start providers on new ports; a real deployment never needs this."""
    with _discovery_lock:
        _discovered.clear()


def get_setting(attr: str, *default):
    """mozilla-django-oidc's settings lookup, with the endpoints resolved on first use."""
    if attr in ENDPOINTS:
        explicit, name = ENDPOINTS[attr]
        value = getattr(settings, explicit, "") or discovery(settings.CDKD_OIDC_ISSUER).get(name)
        if not isinstance(value, str) or not value:
            raise SsoError(f"the identity provider publishes no {name}; set {explicit}")
        return value
    return import_from_settings(attr, *default)


# --- the backend -----------------------------------------------------------------------------


class SsoBackend(OIDCAuthenticationBackend):
    """Called only by our callback view (`sso_callback=True`): a password login's
    authenticate() passes by it, and never makes it fetch the provider's endpoints."""

    get_settings = staticmethod(get_setting)
    OIDC_RP_IDP_SIGN_KEY = None

    def __init__(self, *args, **kwargs) -> None:
        self.UserModel = get_user_model()

    OIDC_OP_TOKEN_ENDPOINT = property(lambda self: get_setting("OIDC_OP_TOKEN_ENDPOINT"))
    OIDC_OP_USER_ENDPOINT = property(lambda self: get_setting("OIDC_OP_USER_ENDPOINT"))
    OIDC_OP_JWKS_ENDPOINT = property(lambda self: get_setting("OIDC_OP_JWKS_ENDPOINT"))
    OIDC_RP_CLIENT_ID = property(lambda self: settings.OIDC_RP_CLIENT_ID)
    OIDC_RP_CLIENT_SECRET = property(lambda self: settings.OIDC_RP_CLIENT_SECRET)
    OIDC_RP_SIGN_ALGO = property(lambda self: settings.OIDC_RP_SIGN_ALGO)

    def authenticate(self, request, sso_callback: bool = False, **kwargs):
        if not sso_callback or request is None or not enabled():
            return None
        try:
            return super().authenticate(request, **kwargs)
        except requests.HTTPError as exc:
            # Never the response body: a provider may echo what we sent.
            status = exc.response.status_code if exc.response is not None else "?"
            raise SsoError(f"the identity provider refused the request (HTTP {status})") from None
        except requests.RequestException as exc:
            raise SsoError(f"the identity provider could not be reached ({type(exc).__name__})") from None
        except SuspiciousOperation as exc:
            raise SsoError(str(exc)) from None

    def _verify_jws(self, payload, key):
        try:
            header = jwt.get_unverified_header(payload)
        except jwt.PyJWTError:
            raise SsoError("the identity token is not a signed token") from None
        algorithm = self.OIDC_RP_SIGN_ALGO
        if header.get("alg") != algorithm:
            raise SsoError(f"the identity token is signed with {header.get('alg')!r}, not {algorithm}")
        issuer = settings.CDKD_OIDC_ISSUER
        try:
            return jwt.decode(
                payload,
                key,
                algorithms=[algorithm],
                audience=self.OIDC_RP_CLIENT_ID,
                issuer=issuer,
                leeway=settings.CDKD_OIDC_LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise SsoError("the identity token has expired (check the clocks, or sign in again)") from None
        except jwt.InvalidIssuerError:
            named = jwt.decode(payload, options={"verify_signature": False}).get("iss")
            raise SsoError(f"the identity token was issued by {named!r}, not by {issuer!r}") from None
        except jwt.InvalidAudienceError:
            raise SsoError("the identity token was issued to another client") from None
        except jwt.PyJWTError as exc:
            raise SsoError(f"the identity token was refused ({exc})") from None

    def retrieve_matching_jwk(self, token):
        try:
            return super().retrieve_matching_jwk(token)
        except (KeyError, TypeError, ValueError, jwt.PyJWTError):
            raise SsoError("the identity provider's signing keys (JWKS) hold no key for this token") from None

    def get_or_create_user(self, access_token, id_token, payload):
        info = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(info, dict) or info.get("sub") != payload.get("sub"):
            # OpenID Connect Core 5.3.2: a userinfo of another subject must not be used.
            raise SsoError("the provider's userinfo names a different person than the identity token")
        claims = {**info, **payload}  # the signed token wins where both name a claim
        groups = groups_claim(claims)
        issuer, subject = settings.CDKD_OIDC_ISSUER, str(payload["sub"])
        with transaction.atomic():
            identity = SsoIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
            if identity is None:
                user = self.create_user(claims)
                identity = SsoIdentity(user=user, issuer=issuer, subject=subject)
            user = identity.user
            if not user.is_active:
                raise SsoError(f"{user.get_username()} is switched off here; ask an admin")
            identity.groups = groups
            identity.last_login_at = timezone.now()
            identity.save()
            self.update_user(user, claims)
        changes = refresh_user(user, reason="login")
        logger.info("Single sign-on login of %s (%d groups, %d role changes)", user, len(groups), len(changes))
        return user

    def create_user(self, claims):
        user = self.UserModel(username=free_username(claims), email=_text(claims.get("email"), 254))
        user.set_unusable_password()  # a password login is never a way into an SSO account
        user.first_name = _text(claims.get("given_name"), 150)
        user.last_name = _text(claims.get("family_name"), 150)
        user.save()
        return user

    def update_user(self, user, claims):
        email = _text(claims.get("email"), 254)
        if email and email != user.email:
            user.email = email
            user.save(update_fields=["email"])
        return user


def groups_claim(claims: dict) -> list[str]:
    """The groups claim (named by CDKD_OIDC_GROUPS_CLAIM) as a list of names; bounded."""
    name = settings.CDKD_OIDC_GROUPS_CLAIM
    value = claims.get(name, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(g, str) for g in value):
        raise SsoError(f"the {name!r} claim is not a list of group names")
    if len(value) > MAX_GROUPS or any(len(g) > MAX_GROUP_LENGTH for g in value):
        raise SsoError(f"the {name!r} claim holds more than {MAX_GROUPS} groups or a name over {MAX_GROUP_LENGTH}")
    return sorted(set(value))


def _text(value, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""


def free_username(claims: dict) -> str:
    """preferred_username (or the e-mail's local part, or the subject) in Django's username
    characters, made unique with a number. Only a new person's; nobody is matched by it."""
    base = ""
    for candidate in (claims.get("preferred_username"), str(claims.get("email") or "").split("@")[0], claims["sub"]):
        base = re.sub(r"[^\w.@+-]", "-", _text(candidate, 140)).strip("-") if isinstance(candidate, str) else ""
        if base:
            break
    base = base or "sso-user"
    users = get_user_model().objects
    name, number = base, 1
    while users.filter(username=name).exists():
        number += 1
        name = f"{base}-{number}"
    return name


# --- the views ---------------------------------------------------------------------------------


def login_page(request: HttpRequest, *, error: str = "", status: int = 200) -> HttpResponse:
    """The login page with a message instead of the form's own errors."""
    context = {"form": AuthenticationForm(request), "next": request.GET.get("next", ""), "sso_error": error}
    return render(request, "registration/login.html", {**context, **login_context()}, status=status)


def login_context() -> dict:
    return {
        "local_login": settings.CDKD_LOCAL_LOGIN,
        "sso_enabled": enabled(),
        "sso_label": settings.CDKD_OIDC_LABEL,
    }


class SiteLoginView(LoginView):
    """The password form, unless CDKD_LOCAL_LOGIN is off: then it is hidden and a password
    post is refused before any user is looked up (django-axes still guards it when on)."""

    def post(self, request, *args, **kwargs):
        if not settings.CDKD_LOCAL_LOGIN:
            return login_page(request, error="Password login is switched off here: use single sign-on.", status=403)
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), **login_context()}


@method_decorator(login_not_required, name="dispatch")
class SsoStartView(OIDCAuthenticationRequestView):
    """Sends the browser to the provider (state, nonce and PKCE in the session)."""

    get_settings = staticmethod(get_setting)

    def __init__(self, *args, **kwargs) -> None:
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request):
        if not enabled():
            return login_page(request, error="Single sign-on is not set up here.", status=404)
        try:
            self.OIDC_OP_AUTH_ENDPOINT = get_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except SsoError as exc:
            logger.warning("Single sign-on unavailable: %s", exc)
            return login_page(request, error=f"Single sign-on is unavailable: {exc}.", status=503)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


@method_decorator(login_not_required, name="dispatch")
class SsoCallbackView(OIDCAuthenticationCallbackView):
    """The provider's redirect back. The library's flow (state checked once, then dropped),
    but a refusal is the login page naming why, not a bare redirect; and the backend is
    called directly, so a provider's refusal is no failed password for django-axes."""

    get_settings = staticmethod(get_setting)

    def get(self, request):
        if not enabled():
            return login_page(request, error="Single sign-on is not set up here.", status=404)
        if request.GET.get("error"):
            self._drop_state(request.GET.get("state"))
            if request.user.is_authenticated:
                auth.logout(request)
            return self._refused(request, f"the identity provider answered {request.GET['error'][:100]!r}")
        state, code = request.GET.get("state"), request.GET.get("code")
        pending = request.session.get("oidc_states") or {}
        if not state or not code or state not in pending:
            return self._refused(request, "this sign-in was not started here or was already used; start again")
        entry = pending.pop(state)
        request.session["oidc_states"] = pending
        request.session.save()
        try:
            user = SsoBackend().authenticate(
                request, sso_callback=True, nonce=entry.get("nonce"), code_verifier=entry.get("code_verifier")
            )
        except SsoError as exc:
            return self._refused(request, str(exc))
        if user is None or not user.is_active:
            return self._refused(request, "the identity provider's answer did not name a person")
        user.backend = "stacks.sso.SsoBackend"
        self.user = user
        return self.login_success()

    def _drop_state(self, state: str | None) -> None:
        states = self.request.session.get("oidc_states") or {}
        if state in states:
            del states[state]
            self.request.session["oidc_states"] = states

    def _refused(self, request: HttpRequest, reason: str) -> HttpResponse:
        logger.warning("Single sign-on refused: %s", reason)
        return login_page(request, error=f"Single sign-on failed: {reason}.", status=403)


# --- the silent re-check --------------------------------------------------------------------


class ProviderRecheck(SessionRefresh):
    """Asks the provider again, silently (`prompt=none`), once a single-sign-on session is
    older than CDKD_OIDC_RECHECK_SECONDS: the callback stores the person's groups anew and
    applies the rules, so someone taken out of a group loses its role within that time, not
    at their next login; the provider's refusal (their session there has ended, or they are
    gone) logs them out here too. mozilla-django-oidc's SessionRefresh, with the endpoint
    resolved only when a re-check is due (the site starts while the provider is down).
    Left alone: password sessions, anything but a page GET (htmx fragments, which cannot
    follow a redirect to the provider, and the API, which a token authorises)."""

    get_settings = staticmethod(get_setting)
    OIDC_OP_AUTHORIZATION_ENDPOINT = property(lambda self: get_setting("OIDC_OP_AUTHORIZATION_ENDPOINT"))

    def __init__(self, get_response) -> None:
        super(SessionRefresh, self).__init__(get_response)  # MiddlewareMixin: no settings read yet
        self.OIDC_EXEMPT_URLS = []
        self.OIDC_RP_CLIENT_ID = ""
        self.OIDC_STATE_SIZE = 32
        self.OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_authentication_callback"
        self.OIDC_RP_SCOPES = ""
        self.OIDC_USE_NONCE = True
        self.OIDC_NONCE_SIZE = 32

    @property
    def exempt_urls(self) -> set[str]:
        from django.urls import reverse

        return {reverse(name) for name in ("oidc_authentication_init", "oidc_authentication_callback", "login")}

    def process_request(self, request):
        if not enabled() or settings.CDKD_OIDC_RECHECK_SECONDS <= 0:
            return None
        if request.headers.get("HX-Request") or request.path.startswith("/api/"):
            return None
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_SCOPES = settings.OIDC_RP_SCOPES
        try:
            return super().process_request(request)
        except SsoError as exc:
            # The provider cannot be asked now: the session goes on (it still ends when idle).
            logger.warning("Single sign-on re-check skipped: %s", exc)
            return None
