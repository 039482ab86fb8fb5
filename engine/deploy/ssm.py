"""The SSM reader a plan uses for SSM-typed parameters and `{{resolve:ssm:...}}`, with the
account's role. A SecureString is never decrypted: cdkd treats it as a secret, so the plan
keeps the reference as written."""

from __future__ import annotations

from collections.abc import Callable

from botocore.exceptions import BotoCoreError, ClientError

from engine.aws import AccountAccess, client, session_for


class SecureStringNotRead(Exception):
    """The parameter is a SecureString: a secret the plan does not fetch."""


def ssm_reader(access: AccountAccess, actor: str, region: str) -> Callable[[str], str | None]:
    """`read(name)`: the parameter's value, None when it does not exist (a `name:version`
    reference selects that version). Other failures raise with the parameter named."""
    ssm = client(session_for(access, actor), "ssm", region)
    cache: dict[str, str | None] = {}

    def read(name: str) -> str | None:
        if name in cache:
            return cache[name]
        try:
            param = ssm.get_parameter(Name=name, WithDecryption=False)["Parameter"]
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("ParameterNotFound", "ParameterVersionNotFound"):
                cache[name] = None
                return None
            raise RuntimeError(f"ssm:GetParameter {name} in {region}: {code}") from None
        except BotoCoreError as exc:
            raise RuntimeError(f"ssm:GetParameter {name} in {region}: {exc}") from None
        if param.get("Type") == "SecureString":
            raise SecureStringNotRead(f"{name} is a SecureString; the plan does not decrypt it")
        cache[name] = param.get("Value")
        return cache[name]

    return read
