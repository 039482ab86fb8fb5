from __future__ import annotations

from django.apps import AppConfig


class StacksConfig(AppConfig):
    name = "stacks"
    verbose_name = "cdkd state"

    def ready(self) -> None:
        from stacks import (
            checks,  # noqa: F401  (registers the system checks)
            deploycli,  # noqa: F401  (registers the assembly loader deploy and scrub read stored assemblies with)
        )
