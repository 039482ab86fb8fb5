"""`{% stack_actions as actions %}`: the stack page's repair buttons from stacks.actions,
so the page offers exactly what the request view accepts."""

from __future__ import annotations

from django import template

from stacks.actions import stack_actions as compute

register = template.Library()


@register.simple_tag(takes_context=True)
def stack_actions(context) -> dict:
    known = "lock" in context  # the page's LockView (or None); else the tag reads the row
    lock = context.get("lock")
    user, stack = context["request"].user, context["stack"]
    return compute(user, stack, lock=getattr(lock, "lock", lock), lock_known=known)
