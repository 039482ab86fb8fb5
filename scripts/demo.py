"""Run the cdkd Admin demo: `.venv/bin/python scripts/demo.py [--port 8000]` from the repo root
(or `bash scripts/demo.sh`, which installs first).

1. starts a moto server (S3 + STS) as a child process: the demo's AWS, gone when the demo stops;
2. starts the webhook receiver (demo/receiver.py: the demo webhooks' target, listing what it
   gets) and the loopback OpenID provider (demo/oidc_provider: django-oauth-toolkit, with
   one person in the group `platform-leads`), each a child process;
3. seeds three accounts' state buckets with a realistic cdkd world (demo);
4. migrates the database (DATABASE_URL, else SQLite at var/demo.sqlite3), sets the `admin`
   login to a fresh password, registers the accounts, adds the group rule `platform-leads`
   -> approver on the production account (demo/sso.py), the demo webhooks
   (demo/notifications.py), a read-only API token of olivia, and runs a first sync;
5. collects the static files and starts the worker (`manage.py cdkd worker`) and the web app
   (`gunicorn cdkd_site.wsgi`, DEBUG off: what production runs), prints one URL first, then
   how to try single sign-on, webhooks, the API and the metrics.

The web app and the worker get CDKD_BASE_URL (the demo's own URL, so notification links
point at it), CDKD_OIDC_* (the loopback provider; password login stays on for the other
personas) and CDKD_METRICS_TOKEN (random per run, printed in the curl line).

Secrets: SECRET_KEY and CDKD_ENCRYPTION_KEYS (a Fernet key for the bodies stored in the
database) from the environment if set, else generated once into var/ and reused by later runs.
The passwords, the API token and the metrics token are new on every run and printed on this
console only (never in a log).

Redis: REDIS_URL if set; else a Redis answering on 127.0.0.1:6379 (database 15, the demo's
own: emptied when the demo starts and again when it stops, so it leaves nothing behind);
else a fakeredis TCP server inside this process, which the worker reaches over TCP like a
real Redis. Ctrl-C stops every child.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var"
PY = sys.executable


def say(line: str = "") -> None:
    print(line, flush=True)


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As the servers themselves do: a port in TIME_WAIT from the last run is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def pick_port(preferred: int) -> int:
    return preferred if port_free(preferred) else free_port()


def wait_http(url: str, proc: subprocess.Popen, what: str, log: Path, timeout: float = 60.0) -> None:
    """Wait until `url` answers any HTTP status; fail with the log's tail if the child died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"{what} exited with code {proc.returncode}", log)
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            time.sleep(0.2)
    fail(f"{what} did not answer at {url} within {timeout:.0f} s", log)


def fail(message: str, log: Path | None = None) -> None:
    say(f"error: {message}")
    if log and log.exists():
        tail = log.read_text(errors="replace").splitlines()[-20:]
        say("  last lines of " + str(log.relative_to(ROOT)) + ":")
        for line in tail:
            say("    " + line)
    raise SystemExit(1)


class Children:
    """Child processes in their own sessions (Ctrl-C reaches only us), stopped in reverse."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen, Any]] = []

    def start(self, name: str, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
        out = log.open("ab")
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs.append((name, proc, out))
        return proc

    def stop(self) -> None:
        for _name, proc, _out in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the RQ worker finishes its job on SIGTERM
        deadline = time.monotonic() + 10
        for _name, proc, out in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            out.close()
        self.procs.clear()


def manage(env: dict[str, str], *args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=env, capture_output=capture, text=True)
    if check and result.returncode != 0:
        say(f"error: manage.py {' '.join(args)} exited with code {result.returncode}")
        for line in (result.stderr or result.stdout or "").strip().splitlines()[-15:]:
            say("    " + line)
        raise SystemExit(1)
    return result


def demo_secret(name: str, filename: str, make) -> str:
    """NAME from the environment, else the value kept in var/FILENAME (made on first use), so
    a restarted demo can still read what it encrypted and keeps its sessions."""
    if os.environ.get(name):
        return os.environ[name]
    path = VAR / filename
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(make() + "\n")
    return path.read_text().strip()


def production_env() -> None:
    """Run as production does: DEBUG off, a real secret key and an encryption key."""
    from cryptography.fernet import Fernet

    os.environ["DEBUG"] = "False"
    os.environ["SECRET_KEY"] = demo_secret("SECRET_KEY", "demo-secret-key", lambda: secrets.token_urlsafe(50))
    os.environ["CDKD_ENCRYPTION_KEYS"] = demo_secret(
        "CDKD_ENCRYPTION_KEYS", "demo-encryption-key", lambda: Fernet.generate_key().decode()
    )


DEMO_REDIS_URL = "redis://127.0.0.1:6379/15"  # the demo's own database when a local Redis answers


def choose_redis(force_fake: bool = False) -> tuple[str, str, Any]:
    """(REDIS_URL, what to tell the user, a server object to stop or None)."""
    if os.environ.get("REDIS_URL") and not force_fake:
        return os.environ["REDIS_URL"], f"REDIS_URL={os.environ['REDIS_URL']}", None
    import redis

    try:
        if force_fake:
            raise redis.ConnectionError("fakeredis requested")
        conn = redis.Redis.from_url(DEMO_REDIS_URL, socket_connect_timeout=1)
        conn.ping()
        conn.flushdb()  # the demo's own database: drop jobs left by an earlier run
        conn.close()
        db = DEMO_REDIS_URL.rsplit("/", 1)[1]
        return DEMO_REDIS_URL, f"Redis at 127.0.0.1:6379, database {db} (emptied when the demo stops)", None
    except redis.RedisError:
        pass
    try:
        from fakeredis import TcpFakeServer
    except ImportError:
        return "fakeredis://", "in-process fakeredis (no worker: jobs run inline in the web app)", None
    server = TcpFakeServer(("127.0.0.1", free_port()), server_type="redis")
    server.daemon_threads = True  # client connections must not keep the demo alive
    threading.Thread(target=server.serve_forever, name="fakeredis", daemon=True).start()
    port = server.server_address[1]
    return f"redis://127.0.0.1:{port}/0", f"fakeredis TCP server on 127.0.0.1:{port} (inside this process)", server


def release_redis(url: str) -> bool:
    """On stop: empty the demo's own Redis database (queues, jobs, the sync schedule, the
    cache), so the demo leaves nothing behind. A REDIS_URL the user gave is left alone.
    True when it emptied one."""
    if url != DEMO_REDIS_URL:
        return False
    import redis

    try:
        conn = redis.Redis.from_url(url, socket_connect_timeout=1)
        conn.flushdb()
        conn.close()
    except redis.RedisError as exc:
        say(f"  note: could not empty {url}: {exc}")
        return False
    return True


def shutdown(children: Children, redis_url: str, redis_server: Any) -> None:
    """Stop the children, then empty the demo's Redis database, then the fakeredis server:
    in that order, since the worker may still write as it finishes its job."""
    children.stop()
    if redis_url and release_redis(redis_url):
        say(f"  Redis      emptied {redis_url}")
    if redis_server is not None:
        redis_server.shutdown()
        redis_server.server_close()


def start_receiver(children: Children) -> str:
    """The webhook target: demo/receiver.py on a free port, checking each payload's signature
    with the demo's secret (CDKD_DEMO_WEBHOOK_SECRET, made here unless given)."""
    secret = os.environ.get("CDKD_DEMO_WEBHOOK_SECRET") or "whsec_" + secrets.token_urlsafe(24)
    os.environ["CDKD_DEMO_WEBHOOK_SECRET"] = secret
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    os.environ["CDKD_DEMO_RECEIVER_URL"] = url
    log = VAR / "demo-receiver.log"
    # Only what it needs: it is a stranger's server in the story, not part of the app.
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TZ")}
    env["CDKD_DEMO_WEBHOOK_SECRET"] = secret
    proc = children.start("receiver", [PY, "demo/receiver.py", "--port", str(port)], log, env)
    wait_http(url + "/payloads.json", proc, "the webhook receiver", log)
    return url


SSO_PERSON = "priya"
SSO_GROUP = "platform-leads"


def start_sso(children: Children, web_port: int, preferred_port: int) -> tuple[str, str]:
    """The loopback OpenID provider (demo/oidc_provider) with one person in SSO_GROUP, and the
    app's CDKD_OIDC_* pointing at it. Its database and key live in var/demo-oidc/ and its
    port is kept when free, so the issuer (and so the person's account here) stays the same
    from run to run. Returns (issuer, the person's password)."""
    from demo.oidc_provider.process import CLIENT_ID, OidcProvider

    folder = VAR / "demo-oidc"
    folder.mkdir(exist_ok=True)
    secret_file = folder / "client-secret"
    secret_file.touch(mode=0o600)
    client_secret = secrets.token_urlsafe(32)
    secret_file.write_text(client_secret + "\n")
    provider = OidcProvider(folder, client_secret=client_secret, port=pick_port(preferred_port), fast_hash=False)
    # Both names of the loopback host: the callback is built from the host the browser used.
    provider.setup(*(f"http://{host}:{web_port}/oidc/callback/" for host in ("127.0.0.1", "localhost")))
    password = secrets.token_urlsafe(12)
    provider.user(SSO_PERSON, password, SSO_GROUP)
    log = VAR / "demo-oidc.log"
    try:
        provider.start(log=log)
    except RuntimeError as exc:
        fail(str(exc), log)
    children.procs.append(("oidc", provider.proc, provider.log_file))  # stopped with the others
    os.environ["CDKD_OIDC_ISSUER"] = provider.issuer
    os.environ["CDKD_OIDC_CLIENT_ID"] = CLIENT_ID
    os.environ["CDKD_OIDC_CLIENT_SECRET_FILE"] = str(secret_file)  # a file: the secret stays out of `env`
    os.environ.pop("CDKD_OIDC_CLIENT_SECRET", None)
    os.environ.pop("CDKD_LOCAL_LOGIN", None)  # admin, olivia and arthur log in with passwords
    return provider.issuer, password


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the cdkd Admin demo.")
    parser.add_argument("--port", type=int, default=8000, help="web app port (another is picked if busy)")
    parser.add_argument("--moto-port", type=int, default=5077, help="moto server port (another is picked if busy)")
    parser.add_argument(
        "--oidc-port", type=int, default=5078, help="loopback OpenID provider port (another is picked if busy)"
    )
    parser.add_argument(
        "--fakeredis", action="store_true", help="use the in-process fakeredis server even if a Redis answers"
    )
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    os.chdir(ROOT)
    sys.path.insert(0, str(ROOT))  # first: `import demo` is the package at the root, not this script
    VAR.mkdir(exist_ok=True)

    say("cdkd Admin demo")
    production_env()
    children = Children()
    redis_server = None
    redis_url = ""

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    # A shell that starts us in the background ignores SIGINT; Ctrl-C must still stop us.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # -- AWS: a moto server whose data lives as long as the demo --------------------------
        moto_port = pick_port(args.moto_port)
        endpoint = f"http://127.0.0.1:{moto_port}"
        aws_env = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "demo",
            "AWS_SECRET_ACCESS_KEY": "demo",
            "AWS_DEFAULT_REGION": "us-east-1",
            # Nothing from the user's own AWS set-up may leak into the demo.
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ROLE_ARN"):
            os.environ.pop(name, None)
        os.environ.update(aws_env)
        moto_log = VAR / "demo-moto.log"
        moto = children.start(
            "moto", [PY, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(moto_port)], moto_log, dict(os.environ)
        )
        wait_http(endpoint + "/moto-api/", moto, "the moto server", moto_log)
        say(f"  AWS        moto server at {endpoint} (the demo's data lives only while it runs)")

        # -- Redis and the database -----------------------------------------------------------
        redis_url, redis_note, redis_server = choose_redis(args.fakeredis)
        os.environ["REDIS_URL"] = redis_url
        say(f"  Redis      {redis_note}")
        if not os.environ.get("DATABASE_URL"):
            os.environ["DATABASE_URL"] = f"sqlite:///{VAR / 'demo.sqlite3'}"
            say("  database   SQLite at var/demo.sqlite3")
        else:
            say("  database   DATABASE_URL")

        # -- The demo's URL, the webhook receiver, single sign-on, the metrics token -----------
        web_port = pick_port(args.port)
        base_url = f"http://127.0.0.1:{web_port}"
        os.environ["CDKD_BASE_URL"] = base_url  # the links in emails and webhook payloads
        receiver_url = start_receiver(children)
        say(f"  webhooks   receiver at {receiver_url}/ lists the payloads it gets (log: var/demo-receiver.log)")
        os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
        issuer, sso_password = start_sso(children, web_port, args.oidc_port)
        say(f"  SSO        loopback OpenID provider (django-oauth-toolkit) at {issuer} (log: var/demo-oidc.log)")
        metrics_token = os.environ.get("CDKD_METRICS_TOKEN") or secrets.token_urlsafe(24)
        os.environ["CDKD_METRICS_TOKEN"] = metrics_token
        env = dict(os.environ)
        env.setdefault("CDKD_SYNC_INTERVAL", "120")  # the worker re-syncs every two minutes

        # -- Seed the world -------------------------------------------------------------------
        from demo import (
            DEMO_ACCOUNTS,
            LEAK_ACCOUNT,
            PRODUCTION,
            assumed_role_session,
            build_demo_world,
            plant_leaked_secrets,
        )
        from demo.attention import plant_attention

        world = build_demo_world(assumed_role_session)
        leak = plant_leaked_secrets(assumed_role_session(LEAK_ACCOUNT))
        world.count_planted(leak)  # the summary names what the sync will list
        plant_attention(world, assumed_role_session)  # a row of each attention-board kind, drift
        say(f"  seeded     {world.state_records} stack records ({world.objects} objects) in {world.seconds:.1f} s:")
        for line in world.describe():
            say("               " + line)
        examples = sorted({f"{r.stack} ({r.region})" for r in world.destroyable if r.account_id == LEAK_ACCOUNT})
        say(
            f"  AWS        {world.resources} resources the records describe, created in moto; "
            f"{len(world.destroyable)} stacks destroy cleanly, e.g. " + ", ".join(examples[:3])
        )
        say(
            "             the Analytics and Db stacks keep types only Cloud Control deletes, which moto does not"
            " serve: their destroy pages say so, row by row, before anything is requested"
        )
        say(f"  secrets    {leak.stack} ({leak.account_id}) holds leaked secrets: scan and scrub it at /secrets/")

        # -- Django: schema, login, accounts, first sync --------------------------------------
        manage(env, "migrate", "--noinput", "-v", "0")
        password = secrets.token_urlsafe(12)
        manage(
            {**env, "DEMO_ADMIN_PASSWORD": password},
            "shell",
            "-c",
            "import os\n"
            "from django.contrib.auth import get_user_model\n"
            "user, _ = get_user_model().objects.get_or_create(username='admin')\n"
            "user.is_staff = user.is_superuser = user.is_active = True\n"
            "user.set_password(os.environ['DEMO_ADMIN_PASSWORD'])\n"
            "user.save()\n",
        )
        listed = manage(env, "cdkd", "accounts", "list", "--json")
        known = {row["account"] for row in json.loads(listed.stdout or "[]")}
        for spec in DEMO_ACCOUNTS:
            if spec.account_id in known:
                continue  # registered by an earlier run of the demo
            add = ["cdkd", "accounts", "add", "--account-id", spec.account_id, "--role-arn", spec.role_arn]
            add += ["--name", spec.name, "--prefix", spec.prefix]
            if spec.external_id:
                add += ["--external-id", spec.external_id]
            if spec.explicit_bucket:
                add += ["--bucket", spec.bucket]
            manage(env, *add)
        # Two more people, so a request can be approved by someone other than its requester.
        manage(
            {**env, "DEMO_ADMIN_PASSWORD": password},
            "shell",
            "-c",
            "import os\n"
            "from django.contrib.auth import get_user_model\n"
            "from stacks.models import Account, Membership\n"
            "for name, role in (('olivia', 'operator'), ('arthur', 'approver')):\n"
            "    user, _ = get_user_model().objects.get_or_create(username=name)\n"
            "    user.set_password(os.environ['DEMO_ADMIN_PASSWORD'])\n"
            "    user.save()\n"
            "    for account in Account.objects.all():\n"
            "        Membership.objects.update_or_create(user=user, account=account, defaults={'role': role})\n",
        )
        say(manage(env, "shell", "-v", "0", "-c", "from demo.notifications import seed; seed()").stdout.rstrip())
        say(manage(env, "shell", "-v", "0", "-c", "from demo.sso import seed_rule; seed_rule()").stdout.rstrip())
        # Shown once, on this console (the token page shows a person's own the same way).
        made = manage(env, "shell", "-v", "0", "-c", "from demo.sso import seed_token; seed_token()")
        api_token = made.stdout.strip().splitlines()[-1]
        sync = manage(env, "cdkd", "sync", "--json", check=False)
        try:
            rows = json.loads(sync.stdout)["accounts"]
        except (ValueError, KeyError, TypeError):
            rows = []
            say("  sync       failed: " + ((sync.stderr or sync.stdout).strip().splitlines() or ["no output"])[-1])
        for row in rows:
            errors = f", {len(row['errors'])} errors: {row['errors'][0]}" if row.get("errors") else ""
            say(f"  synced     {row['account']}: {row['listed']} records, {row['fetched']} fetched{errors}")
        # A drift check and a secret scan, stored, so the board and the drift panel show them.
        check = "import demo.attention as a; print(*a.check_attention(), sep='\\n')"
        checked = manage(env, "shell", "-v", "0", "-c", check)
        for line in checked.stdout.splitlines():
            say("  " + line)

        # -- The worker and the web app -------------------------------------------------------
        if redis_url.startswith("fakeredis://"):
            say("  worker     not started: jobs run inline in the web app")
        else:
            command = ["cdkd", "worker"]
            note = "running"
            if redis_server is not None and importlib.util.find_spec("lupa") is None:
                # RQ's scheduler (the periodic sync) runs Lua scripts, which fakeredis can
                # only do with lupa installed: run the plain worker, jobs still run.
                command = ["rqworker", "default", "sync", "notify"]
                note = "running, without the sync schedule (fakeredis has no Lua without lupa)"
            worker = children.start("worker", [PY, "manage.py", *command], VAR / "demo-worker.log", env)
            time.sleep(1.5)
            if worker.poll() is not None:
                fail(f"the worker exited with code {worker.returncode}", VAR / "demo-worker.log")
            say(f"  worker     {note} (log: var/demo-worker.log)")
        manage(env, "collectstatic", "--noinput", "-v", "0")
        web_log = VAR / "demo-web.log"
        # One process when the queues live in this process's fakeredis:// (no worker).
        workers = "1" if redis_url.startswith("fakeredis://") else "2"
        gunicorn = [PY, "-m", "gunicorn", "cdkd_site.wsgi", "--bind", f"127.0.0.1:{web_port}"]
        gunicorn += ["--workers", workers, "--threads", "4", "--access-logfile", "-"]
        web = children.start("web", gunicorn, web_log, env)
        url = f"{base_url}/"
        wait_http(url, web, "the web app", web_log)
        say("  web app    gunicorn, DEBUG off (log: var/demo-web.log)")
        say()
        say(f"  Open {url}  and log in as  admin / {password}")
        say("  (olivia, an operator, and arthur, an approver, on every account: same password)")
        say()
        say(f"  Single sign-on   {base_url}/oidc/authenticate/  (or the login page's button), then at the provider:")
        say(f"                   {SSO_PERSON} / {sso_password}  (in {SSO_GROUP}: approver on Production by a rule)")
        say(f"  Webhooks         {receiver_url}/  lists every payload sent; the delivery log (as admin):")
        say(f"                   {base_url}/accounts/{PRODUCTION.account_id}/settings/webhooks/")
        say("  API              olivia's read-only token, shown only here:")
        say(f'                   curl -H "Authorization: Bearer {api_token}" {base_url}/api/v1/stacks')
        say(f"                   schema: {base_url}/api/schema/   make your own at {base_url}/tokens/")
        say(f'  Metrics          curl -H "Authorization: Bearer {metrics_token}" {base_url}/metrics')
        say(f"  Health           curl {base_url}/healthz")
        say("  Ctrl-C stops the demo.")

        # Stay up while the children do; say so if one of them dies.
        while True:
            for name, proc, _out in children.procs:
                if proc.poll() is not None:
                    fail(f"the {name} process exited with code {proc.returncode}", VAR / f"demo-{name}.log")
            time.sleep(1.0)
    except KeyboardInterrupt:
        say()
        say("Stopping the demo ...")
    finally:
        shutdown(children, redis_url, redis_server)
    say("Stopped.")


if __name__ == "__main__":
    main()
