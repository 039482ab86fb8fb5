"""A loopback OpenID provider: django-oauth-toolkit's, in its own Django project and process.
The demo signs its single sign-on persona in through it (scripts/demo.py) and the SSO tests
run against it (tests/sso, tests/browser): a real provider, never a mock of the protocol.
Not for anything but loopback: its people and client live in a local SQLite file."""
