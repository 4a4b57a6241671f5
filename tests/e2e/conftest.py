"""Fixtures: an in-process mock upstream, the real cachekeeper binary in front of it, SDK clients.

The proxy binary comes from ``$CACHEKEEPER_BIN`` (default ``target/debug/cachekeeper`` under the
repo root; ``bash scripts/test.sh`` builds it first). A missing binary is a test error with a
clear message, never a silent skip.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import ANTHROPIC_KEY, GEMINI_KEY, OPENAI_KEY, REPO_ROOT  # noqa: E402
from mock_upstream import MockUpstream  # noqa: E402

HEALTH_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, max_bytes: int = 8000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "<no log>"
    if len(data) > max_bytes:
        data = b"...\n" + data[-max_bytes:]
    return data.decode("utf-8", "replace")


@dataclass
class Proxy:
    proc: subprocess.Popen[bytes]
    base_url: str  # http://127.0.0.1:PORT
    config_path: Path
    stdout_path: Path
    stderr_path: Path

    @property
    def anthropic_base_url(self) -> str:
        return f"{self.base_url}/anthropic"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/openai/v1"

    @property
    def gemini_base_url(self) -> str:
        return f"{self.base_url}/gemini"

    def logs(self) -> str:
        return (
            f"--- cachekeeper stderr ({self.stderr_path}) ---\n{_tail(self.stderr_path)}\n"
            f"--- cachekeeper stdout ({self.stdout_path}) ---\n{_tail(self.stdout_path)}"
        )

    def assert_alive(self) -> None:
        rc = self.proc.poll()
        if rc is not None:
            pytest.fail(f"cachekeeper exited with code {rc} during the tests\n{self.logs()}", pytrace=False)

    def request_log(self) -> "RequestLog":
        """The proxy's per-request log lines from now on."""
        log = RequestLog(self.stderr_path)
        log.mark()
        return log


REQUEST_TARGET = "cachekeeper::request"


@dataclass
class RequestLog:
    """The proxy's per-request JSON log lines (target ``cachekeeper::request``, fields flattened
    to the top level) of the requests that arrived after :meth:`mark`.

    A request's line is written after its response, on a task of its own, so the line of a
    request made before :meth:`mark` may land just after it: lines whose request arrived
    (``timestamp`` less ``total_ms``) before the mark are left out."""

    path: Path
    offset: int = 0
    since: float = 0.0

    def mark(self) -> None:
        self.since = time.time()
        try:
            self.offset = self.path.stat().st_size
        except OSError:
            self.offset = 0

    def _arrived_after_mark(self, line: dict[str, Any]) -> bool:
        ts, total = line.get("timestamp"), line.get("total_ms")
        if not isinstance(ts, str) or not isinstance(total, (int, float)):
            return True
        try:
            at = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return True
        # The line's timestamp is taken after `total_ms` was measured, so `at - total` is never
        # before the request really arrived; 2 ms of slack covers `total_ms`'s truncation to a
        # whole ms. (A wider slack let the line of the previous test's request, made just
        # before the mark, count as this test's.)
        return at - total / 1000.0 >= self.since - 0.002

    def lines(self) -> list[dict[str, Any]]:
        data = self.path.read_bytes()[self.offset :]
        data = data[: data.rfind(b"\n") + 1]  # complete lines only
        out = []
        for raw in data.splitlines():
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("target") == REQUEST_TARGET and self._arrived_after_mark(obj):
                out.append(obj)
        return out

    def wait(self, path_suffix: str | None = None, count: int = 1, timeout: float = 10.0) -> list[dict[str, Any]]:
        """The request lines whose ``path`` ends with ``path_suffix``, once there are at least
        ``count`` (the line is written when the response body has ended, which may be just after
        the client has read the last byte)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [l for l in self.lines() if path_suffix is None or str(l.get("path", "")).endswith(path_suffix)]
            if len(found) >= count or time.monotonic() >= deadline:
                return found
            time.sleep(0.02)

    def one(self, path_suffix: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
        """The one request line for ``path_suffix`` since :meth:`mark` (fails on none or more)."""
        found = self.wait(path_suffix, 1, timeout)
        time.sleep(0.05)
        found = [l for l in self.lines() if path_suffix is None or str(l.get("path", "")).endswith(path_suffix)]
        assert len(found) == 1, f"want one request log line for {path_suffix!r}, got {len(found)}: {found}"
        return found[0]


def _binary() -> Path:
    env = os.environ.get("CACHEKEEPER_BIN")
    path = Path(env) if env else REPO_ROOT / "target" / "debug" / "cachekeeper"
    if not path.is_absolute():
        path = REPO_ROOT / path
    if not path.is_file() or not os.access(path, os.X_OK):
        pytest.fail(
            f"cachekeeper binary not found at {path}. Build it first (`cargo build`, or run "
            f"`bash scripts/test.sh`), or point CACHEKEEPER_BIN at it.",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def mock_upstream() -> Iterator[MockUpstream]:
    mock = MockUpstream().start()
    yield mock
    mock.stop()


@pytest.fixture(scope="session")
def proxy(mock_upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    tmp = tmp_path_factory.mktemp("cachekeeper")
    routes = "\n".join(
        f'[[routes]]\nname = "{name}"\nprefix = "/{name}"\nupstream = "{mock_upstream.url}"\n'
        for name in ("anthropic", "openai", "gemini")
    )
    with launch_proxy(tmp, routes) as p:
        yield p
    # keep the logs where a developer can find them after a failed run
    print(f"\n[e2e] cachekeeper logs kept in {tmp}", file=sys.stderr)


def _wait_healthy(p: Proxy) -> None:
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    last_err = "no attempt"
    while time.monotonic() < deadline:
        rc = p.proc.poll()
        if rc is not None:
            pytest.fail(
                f"cachekeeper exited with code {rc} before /healthz answered\n"
                f"config:\n{p.config_path.read_text()}\n{p.logs()}",
                pytrace=False,
            )
        try:
            with urllib.request.urlopen(f"{p.base_url}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
                last_err = f"status {r.status}"
        except urllib.error.HTTPError as e:
            last_err = f"status {e.code}"
        except OSError as e:
            last_err = repr(e)
        time.sleep(0.1)
    pytest.fail(
        f"cachekeeper /healthz did not answer 200 within {HEALTH_TIMEOUT_S:.0f}s (last: {last_err})\n{p.logs()}",
        pytrace=False,
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def launch_proxy(
    tmp: Path,
    routes_toml: str,
    server_toml: str = "",
    state_toml: str | None = None,
    env_extra: dict[str, str] | None = None,
) -> Iterator[Proxy]:
    """Run another cachekeeper with the given ``[[routes]]`` TOML (for route options the
    session proxy does not set) and extra ``[server]`` keys; its logs stay in ``tmp``.
    ``state_toml``: the ``[state]`` keys (default: a SQLite file in ``tmp``). The proxy sees
    no AWS credentials of the machine (``AWS_*`` variables dropped, the shared files pointed at
    nothing) unless ``env_extra`` gives some."""
    binary = _binary()
    listen = f"127.0.0.1:{_free_port()}"
    config = tmp / "proxy.toml"
    config.write_text(
        f"""# written by tests/e2e/conftest.py (launch_proxy)
[server]
listen = "{listen}"
{server_toml}

[state]
{state_toml if state_toml is not None else f'path = "{tmp / "cachekeeper.db"}"'}

{routes_toml}
""",
        encoding="utf-8",
    )
    stdout_path, stderr_path = tmp / "stdout.log", tmp / "stderr.log"
    env = dict(os.environ)
    env.setdefault("RUST_LOG", "info")
    env.setdefault("RUST_BACKTRACE", "1")
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(var, None)
    for var in [v for v in env if v.startswith("AWS_")]:
        env.pop(var)
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp / "no-aws-credentials")
    env["AWS_CONFIG_FILE"] = str(tmp / "no-aws-config")
    env.update(env_extra or {})
    with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [str(binary), "serve", "--config", str(config), "--listen", listen],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=tmp,
            env=env,
        )
    p = Proxy(proc, f"http://{listen}", config, stdout_path, stderr_path)
    try:
        _wait_healthy(p)
        yield p
    finally:
        _stop(proc)


@pytest.fixture
def upstream(proxy: Proxy, mock_upstream: MockUpstream) -> Iterator[MockUpstream]:
    """The mock upstream, emptied for this test, behind a live proxy."""
    proxy.assert_alive()
    mock_upstream.clear()
    yield mock_upstream
    proxy.assert_alive()


# ---------------------------------------------------------------------------------------------
# SDK clients that remember exactly what they sent
# ---------------------------------------------------------------------------------------------


@dataclass
class SentRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Capture:
    requests: list[SentRequest] = field(default_factory=list)

    def hook(self, request: Any) -> None:
        body = request.read()
        self.requests.append(SentRequest(request.method, str(request.url), dict(request.headers), bytes(body)))

    def last(self) -> SentRequest:
        assert self.requests, "the SDK sent nothing"
        return self.requests[-1]


@pytest.fixture
def sent() -> Capture:
    return Capture()


@pytest.fixture
def anthropic_client(proxy: Proxy, sent: Capture) -> Iterator[Any]:
    import anthropic

    http = anthropic.DefaultHttpxClient(event_hooks={"request": [sent.hook]})
    # This SDK sends the key as `Authorization: Bearer`; Claude Code and older SDKs send
    # `x-api-key`. Send both so the tests check that each reaches the upstream untouched.
    client = anthropic.Anthropic(
        base_url=proxy.anthropic_base_url,
        api_key=ANTHROPIC_KEY,
        default_headers={"x-api-key": ANTHROPIC_KEY},
        max_retries=0,
        timeout=30.0,
        http_client=http,
    )
    yield client
    client.close()


@pytest.fixture
def openai_client(proxy: Proxy, sent: Capture) -> Iterator[Any]:
    import openai

    http = openai.DefaultHttpxClient(event_hooks={"request": [sent.hook]})
    client = openai.OpenAI(
        base_url=proxy.openai_base_url, api_key=OPENAI_KEY, max_retries=0, timeout=30.0, http_client=http
    )
    yield client
    client.close()


@pytest.fixture
def genai_client(proxy: Proxy, sent: Capture) -> Iterator[Any]:
    """The google-genai SDK (Gemini API, v1beta) pointed at the proxy's /gemini route."""
    import httpx2
    from google import genai
    from google.genai import types

    http = httpx2.Client(event_hooks={"request": [sent.hook]}, timeout=30.0)
    client = genai.Client(
        api_key=GEMINI_KEY,
        http_options=types.HttpOptions(base_url=proxy.gemini_base_url, api_version="v1beta", httpx_client=http),
    )
    yield client
    http.close()


@pytest.fixture
def request_log(proxy: Proxy) -> "RequestLog":
    """The session proxy's per-request log lines written during this test."""
    return proxy.request_log()


# ---------------------------------------------------------------------------------------------
# Failure reports carry the proxy's logs
# ---------------------------------------------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        p = getattr(item, "funcargs", {}).get("proxy")
        if isinstance(p, Proxy):
            report.sections.append(("cachekeeper logs", p.logs()))
