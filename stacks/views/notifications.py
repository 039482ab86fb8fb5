"""Notification pages: an account's webhooks (list, add, edit, delete, the delivery log and
redeliver: account admins only, others with a role get 403, outsiders 404; every change is
audited by `stacks.webhooks`) and a person's email subscriptions."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from stacks import notify, webhooks
from stacks.access import accounts_for, get_account_or_404, has_role
from stacks.audit import client_ip
from stacks.models import Account, EventKind, Role, Subscription, Webhook, WebhookDelivery
from stacks.notifyforms import SubscriptionForm, WebhookForm
from stacks.views.common import AuthedRequest
from stacks.views.operations import refusal

DELIVERIES_PER_PAGE = 50


def _admin_account(request: AuthedRequest, account_id: str) -> Account | HttpResponse:
    account = get_account_or_404(request.user, account_id)
    if not has_role(request.user, account, Role.ADMIN):
        return refusal(request, f"Only an admin of {account} can see and change its webhooks.", 403)
    return account


def _webhook(account: Account, webhook_id: int) -> Webhook:
    return get_object_or_404(Webhook, pk=webhook_id, account=account)


@never_cache
@require_http_methods(["GET"])
def webhook_list(request: AuthedRequest, account_id: str) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    rows = []
    for hook in Webhook.objects.filter(account=account).defer("secret"):
        rows.append({"hook": hook, "last": hook.deliveries.order_by("-created_at", "-id").first()})
    return render(request, "stacks/webhooks.html", {"account": account, "rows": rows, "kinds": EventKind})


@never_cache
@require_http_methods(["GET", "POST"])
def webhook_new(request: AuthedRequest, account_id: str) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    form = WebhookForm(request.POST or None, creating=True)
    if request.method == "POST":
        if not form.is_valid():
            return render(request, "stacks/webhook_form.html", {"account": account, "form": form}, status=400)
        generated = not form.cleaned_data.get("secret")
        hook = webhooks.save_webhook(request.user, account, form.cleaned_data, client_address=client_ip(request))
        messages.success(request, f"Added webhook {hook.name}.")
        if generated:
            # The only time the generated secret is shown: rendered, never redirected with it.
            return _detail(request, account, hook, new_secret=hook.secret, status=201)
        return redirect("webhook", account_id=account.account_id, webhook_id=hook.pk)
    return render(request, "stacks/webhook_form.html", {"account": account, "form": form})


@never_cache
@require_http_methods(["GET", "POST"])
def webhook_edit(request: AuthedRequest, account_id: str, webhook_id: int) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    hook = _webhook(account, webhook_id)
    initial = {"name": hook.name, "events": hook.events, "format": hook.format, "active": hook.active}
    form = WebhookForm(request.POST or None, initial=initial, creating=False)
    context = {"account": account, "form": form, "hook": hook}
    if request.method == "POST":
        if not form.is_valid():
            return render(request, "stacks/webhook_form.html", context, status=400)
        webhooks.save_webhook(request.user, account, form.cleaned_data, webhook=hook, client_address=client_ip(request))
        messages.success(request, f"Saved webhook {hook.name}.")
        return redirect("webhook", account_id=account.account_id, webhook_id=hook.pk)
    return render(request, "stacks/webhook_form.html", context)


@require_POST
def webhook_delete(request: AuthedRequest, account_id: str, webhook_id: int) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    hook = _webhook(account, webhook_id)
    name = hook.name
    webhooks.delete_webhook(request.user, hook, client_address=client_ip(request))
    messages.success(request, f"Deleted webhook {name} and its delivery log.")
    return redirect("webhooks", account_id=account.account_id)


def _detail(
    request: AuthedRequest, account: Account, hook: Webhook, *, new_secret: str = "", status: int = 200
) -> HttpResponse:
    deliveries = hook.deliveries.select_related("event").order_by("-created_at", "-id")
    page = Paginator(deliveries, DELIVERIES_PER_PAGE).get_page(request.GET.get("page"))
    context = {"account": account, "hook": hook, "page": page, "new_secret": new_secret}
    response = render(request, "stacks/webhook.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


@never_cache
@require_http_methods(["GET"])
def webhook_detail(request: AuthedRequest, account_id: str, webhook_id: int) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    return _detail(request, account, _webhook(account, webhook_id))


@require_POST
def webhook_redeliver(request: AuthedRequest, account_id: str, webhook_id: int, delivery_id: int) -> HttpResponse:
    account = _admin_account(request, account_id)
    if isinstance(account, HttpResponse):
        return account
    hook = _webhook(account, webhook_id)
    delivery = get_object_or_404(
        WebhookDelivery.objects.select_related("webhook", "event"), pk=delivery_id, webhook=hook
    )
    try:
        webhooks.redeliver(request.user, delivery, client_address=client_ip(request))
    except PermissionDenied as exc:
        return refusal(request, str(exc), 403)
    except ValidationError as exc:
        return refusal(request, " ".join(exc.messages), 409)
    messages.success(request, f"Queued {delivery.payload_id} for redelivery to {hook.name}.")
    return redirect("webhook", account_id=account.account_id, webhook_id=hook.pk)


# --- a person's email subscriptions ---------------------------------------------------------


def _allowed(user, account: Account) -> list[str]:
    """The kinds the person could be emailed on this account (approval requests: approvers)."""
    approver = has_role(user, account, Role.APPROVER)
    return [k.value for k in EventKind if notify.AUDIENCE[k] != notify.APPROVERS or approver]


@never_cache
@require_http_methods(["GET", "POST"])
def notification_settings(request: AuthedRequest) -> HttpResponse:
    user = request.user
    accounts = list(accounts_for(user).order_by("name", "account_id"))
    rows = []
    for account in accounts:
        allowed = _allowed(user, account)
        current = [k for k in notify.subscribed_events(user, account) if k in allowed]
        data = request.POST if request.method == "POST" else None
        form = SubscriptionForm(data, prefix=f"a{account.account_id}", allowed=allowed, initial={"events": current})
        rows.append(
            {
                "account": account,
                "form": form,
                "custom": Subscription.objects.filter(user=user, account=account).exists(),
            }
        )
    if request.method == "POST":
        if not all(r["form"].is_valid() for r in rows):
            messages.error(request, "Nothing was saved: choose among the events offered.")
            return render(request, "stacks/notification_settings.html", {"rows": rows}, status=400)
        chosen = [(r["account"], list(r["form"].cleaned_data["events"])) for r in rows]
        notify.save_subscriptions(user, chosen, client_address=client_ip(request))
        messages.success(request, "Saved your email notifications.")
        return redirect("notification_settings")
    return render(request, "stacks/notification_settings.html", {"rows": rows, "defaults": notify.DEFAULT_EMAIL_EVENTS})
