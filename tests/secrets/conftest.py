"""The operations UI's personas (account A `prod`: vera viewer, olivia operator, arthur
approver, ada admin; otto admin of B only; root superuser) for the secrets pages."""

from tests.operations_ui.conftest import (  # noqa: F401 (fixtures)
    _fast_passwords,
    ada,
    arthur,
    dev,
    olivia,
    otto,
    planned,
    prod,
    root,
    vera,
    web,
)
