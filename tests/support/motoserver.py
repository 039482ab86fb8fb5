"""A moto server in its own process, for integration tests.

A separate process (rather than moto's in-process ThreadedMotoServer) does not share the
test's GIL, which makes it noticeably faster, and a worker subprocess started by a test
can reach it over HTTP just like the test itself.

Run as a script (`python motoserver.py -H host -p port`) it is `python -m moto.server`
with werkzeug's per-request log lines silenced.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the caller retries if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class MotoServer:
    """`start()` launches the server and waits until it answers; `reset()` empties every
    backend (all accounts, all services); `stop()` terminates it."""

    def __init__(self, host: str = "127.0.0.1", startup_timeout: float = 30.0) -> None:
        self.host = host
        self.port = 0
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> MotoServer:
        last_error = ""
        for _attempt in range(3):  # the free port can be taken between probe and bind
            self.port = free_port(self.host)
            self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
            self._proc = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "-H", self.host, "-p", str(self.port)],
                stdout=subprocess.DEVNULL,
                stderr=self._log,
            )
            try:
                self._wait_ready()
                atexit.register(self.stop)  # no orphaned server if the test run is cut short
                return self
            except RuntimeError as exc:
                last_error = str(exc)
                self.stop()
        raise RuntimeError(f"moto server did not start: {last_error}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise RuntimeError(f"exited with {self._proc.returncode}: {self._read_log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/data.json", timeout=1):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        raise RuntimeError(f"not answering on {self.url} after {self.startup_timeout}s: {self._read_log()}")

    def _read_log(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def reset(self) -> None:
        """Forget every bucket, object and assumed role (all accounts)."""
        request = urllib.request.Request(f"{self.url}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 200:
                raise RuntimeError(f"moto reset answered {response.status}")

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


def _main(argv: list[str]) -> None:
    import logging

    # werkzeug logs every request to stderr unless its logger has a level of its own.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.server import main

    main(argv)


if __name__ == "__main__":
    _main(sys.argv[1:])
