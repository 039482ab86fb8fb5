"""Run the loopback provider: `python server.py setup SECRET REDIRECT_URIS` (tables, the
client with its space-separated redirect URIs, nobody yet),
`python server.py user NAME PASSWORD [GROUP ...]` (create or set a person's groups), and
`python server.py serve PORT` (a threaded WSGI server on 127.0.0.1). The environment names
the database, key and issuer (see settings.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ["DJANGO_SETTINGS_MODULE"] = "demo.oidc_provider.settings"

import django  # noqa: E402

django.setup()

CLIENT_ID = "cdkd-admin"


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


class ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def setup(client_secret: str, redirect_uri: str) -> None:
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    Application.objects.update_or_create(
        client_id=CLIENT_ID,
        defaults={
            "name": "cdkd Admin",
            "client_secret": client_secret,
            "client_type": Application.CLIENT_CONFIDENTIAL,
            "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": redirect_uri,
            "algorithm": Application.RS256_ALGORITHM,
            "skip_authorization": True,
        },
    )


def user(name: str, password: str, *groups: str) -> None:
    from django.contrib.auth.models import Group, User

    person, _ = User.objects.get_or_create(username=name, defaults={"email": f"{name}@example.test"})
    if not person.check_password(password):  # a new hash would end the person's provider session
        person.set_password(password)
        person.save()
    person.groups.set([Group.objects.get_or_create(name=g)[0] for g in groups])


def serve(port: int) -> None:
    from django.core.wsgi import get_wsgi_application

    server = make_server("127.0.0.1", port, get_wsgi_application(), ThreadingServer, QuietHandler)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "setup":
        setup(*args)
    elif command == "user":
        user(*args)
    elif command == "serve":
        serve(int(args[0]))
    else:
        raise SystemExit(f"unknown command {command!r}")
