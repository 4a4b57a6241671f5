"""End to end (issue 11, keep the prefix cacheable): generated computer-use sessions
(``scripts/gen_sessions.py``) driven through cachekeeper by the official ``anthropic`` SDK against
a mock whose usage comes from an exact-prefix prompt cache (``x-mock-cache: exact-prefix``,
``prefix_cache.py``: Anthropic's documented breakpoint / lookback / TTL rules, an implementation
independent of cachekeeper's own replay model).

- retire deeper, less often: the 150-turn dense session (a ~600-token screenshot every turn,
  100-image ceiling) on the default route (retire down to the low-water mark, half the ceiling)
  against a route set to retire 8 at a time (``evict_low_water = 93``, which is the old policy):
  collapses = eviction batches, cache writes <= 0.3x, billed-input equivalents <= 0.7x, average
  images the model sees >= 0.85x;
- cold-cache eviction: the same session with a 10-minute idle gap before turn 100 (the proxy's
  session record aged by 10 minutes while it is stopped, the mock's cache clock moved on): turn
  100 retires down to the low-water mark at no extra write (the whole prompt is written after the
  expiry anyway), the retired set survives restarts, the turns after it are byte-stable (no paid
  collapse, where the default route pays one at turn 102), and losing the record costs exactly
  one collapse and is logged.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import pytest

from conftest import RequestLog, launch_proxy
from helpers import ANTHROPIC_KEY
from mock_upstream import MockUpstream

ROOT = Path(__file__).resolve().parents[2]
IDLE_MS = 10 * 60 * 1000
# Anthropic's cache prices in input-token equivalents: writes 1.25x, reads 0.1x.
WRITE, READ = 1.25, 0.1


@pytest.fixture(scope="module")
def every150(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("sessions")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_sessions.py"), str(out), "--only", "every150"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with open(out / "every150.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["body"] for line in f]


def _routes(mock: MockUpstream) -> str:
    return f"""
[[routes]]
name = "deep"
prefix = "/deep"
upstream = "{mock.url}"
provider = "anthropic"

[[routes]]
name = "eight"
prefix = "/eight"
upstream = "{mock.url}"
provider = "anthropic"
[routes.images]
evict_low_water = 93
"""


def _client(base_url: str, session: str = "e2e-dense") -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key=ANTHROPIC_KEY,
        base_url=base_url,
        max_retries=0,
        default_headers={"x-mock-cache": "exact-prefix", "x-cachekeeper-session": session},
    )


def _images(body: bytes) -> int:
    """Image blocks in a forwarded Anthropic body."""
    n = 0

    def walk(v: Any) -> None:
        nonlocal n
        if isinstance(v, dict):
            if v.get("type") == "image":
                n += 1
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(json.loads(body))
    return n


class Run:
    """What one route's turns cost at the mock."""

    def __init__(self) -> None:
        self.writes: list[int] = []
        self.reads: list[int] = []
        self.inputs: list[int] = []
        self.images: list[int] = []
        self.bodies: list[bytes] = []

    def add(self, mock: MockUpstream) -> None:
        rec = mock.last("POST", "/v1/messages")
        u = rec.cache_usage
        assert u is not None, "the mock answered without its prefix cache"
        self.writes.append(u.cache_creation_input_tokens)
        self.reads.append(u.cache_read_input_tokens)
        self.inputs.append(u.input_tokens)
        self.bodies.append(rec.body)
        self.images.append(_images(rec.body))

    @property
    def billed(self) -> float:
        return sum(self.inputs) + WRITE * sum(self.writes) + READ * sum(self.reads)

    @property
    def mean_images(self) -> float:
        return sum(self.images) / len(self.images)


def _drive(client: anthropic.Anthropic, mock: MockUpstream, bodies: list[dict[str, Any]], run: Run) -> None:
    for body in bodies:
        client.messages.create(**body)
        run.add(mock)


def _collapses(lines: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(l["turn"], l["collapse_cause"]) for l in lines if l.get("collapse_at") is not None]


def test_retiring_deeper_beats_eight_at_a_time_on_a_dense_session(tmp_path: Path, every150: list[dict[str, Any]]) -> None:
    runs: dict[str, Run] = {}
    lines: dict[str, list[dict[str, Any]]] = {}
    with MockUpstream(sse_delay=0) as mock, launch_proxy(tmp_path, _routes(mock)) as proxy:
        log = RequestLog(proxy.stderr_path)
        for route in ("deep", "eight"):
            mock.prefix_cache.clear()
            log.mark()
            runs[route] = Run()
            _drive(_client(f"{proxy.base_url}/{route}", f"e2e-{route}"), mock, every150, runs[route])
            lines[route] = log.wait("/v1/messages", len(every150))
    deep, eight = runs["deep"], runs["eight"]
    print(
        f"\n[figures] dense 150 turns: writes deep={sum(deep.writes)} eight={sum(eight.writes)}; "
        f"billed deep={deep.billed:.0f} eight={eight.billed:.0f}; "
        f"mean images deep={deep.mean_images:.1f} eight={eight.mean_images:.1f}",
        file=sys.stderr,
    )
    # Turn t carries t - 1 screenshots. One batch, at the 101st screenshot (turn 102), down to
    # the low-water mark (50); 8 at a time: one batch per 8 screenshots past the ceiling.
    assert _collapses(lines["deep"]) == [(102, "eviction")]
    assert deep.images[101] == 50
    assert _collapses(lines["eight"]) == [(t, "eviction") for t in (102, 110, 118, 126, 134, 142, 150)]
    assert sum(deep.writes) <= 0.3 * sum(eight.writes)
    assert deep.billed <= 0.7 * eight.billed
    assert deep.mean_images >= 0.85 * eight.mean_images


def _age_session(db: Path, session: str, by_ms: int) -> None:
    """Make the stored session record look `by_ms` older (the proxy is stopped)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT scope, value FROM records WHERE kind = 'session' AND key = ?", (session,)).fetchall()
        assert len(rows) == 1, rows
        scope, value = rows[0]
        state = json.loads(value)
        state["last_ms"] -= by_ms
        con.execute(
            "UPDATE records SET value = ? WHERE kind = 'session' AND scope = ? AND key = ?",
            (json.dumps(state).encode(), scope, session),
        )
        con.commit()
    finally:
        con.close()


def _drop_session(db: Path, session: str) -> None:
    con = sqlite3.connect(db)
    try:
        n = con.execute("DELETE FROM records WHERE kind = 'session' AND key = ?", (session,)).rowcount
        con.commit()
        assert n == 1
    finally:
        con.close()


def test_cold_cache_eviction_after_an_idle_gap(tmp_path: Path, every150: list[dict[str, Any]]) -> None:
    db = tmp_path / "cachekeeper.db"
    run = Run()
    lines: list[dict[str, Any]] = []
    with MockUpstream(sse_delay=0) as mock:
        with launch_proxy(tmp_path, _routes(mock)) as proxy:
            log = RequestLog(proxy.stderr_path)
            log.mark()
            _drive(_client(f"{proxy.base_url}/deep"), mock, every150[:99], run)
            lines += log.wait("/v1/messages", 99)
        # Ten idle minutes: the session's record ages, the provider's entries expire.
        _age_session(db, "e2e-dense", IDLE_MS)
        mock.prefix_cache.advance(IDLE_MS)
        with launch_proxy(tmp_path, _routes(mock)) as proxy:
            log = RequestLog(proxy.stderr_path)
            log.mark()
            _drive(_client(f"{proxy.base_url}/deep"), mock, every150[99:100], run)
            lines += log.wait("/v1/messages", 1)
        # Another restart: the retired set is read back from the store.
        with launch_proxy(tmp_path, _routes(mock)) as proxy:
            log = RequestLog(proxy.stderr_path)
            log.mark()
            _drive(_client(f"{proxy.base_url}/deep"), mock, every150[100:120], run)
            lines += log.wait("/v1/messages", 20)
        # The record is lost (purged): the step function alone decides, once.
        _drop_session(db, "e2e-dense")
        with launch_proxy(tmp_path, _routes(mock)) as proxy:
            log = RequestLog(proxy.stderr_path)
            log.mark()
            _drive(_client(f"{proxy.base_url}/deep"), mock, every150[120:], run)
            lost = log.wait("/v1/messages", 30)
            logs = proxy.stderr_path.read_text(encoding="utf-8")
    turn100 = lines[99]
    # Turn 100 (99 screenshots), cold cache -> down to the low-water mark (50) now.
    assert run.images[99] == 50, run.images[95:105]
    assert turn100["collapse_cause"] == "provider_expiry", turn100
    assert turn100["images_retired"] == 49
    # The whole prompt is written after an expiry anyway: retiring costs nothing extra (the
    # write is the smaller prompt's).
    assert run.reads[99] == 0
    assert run.writes[99] + run.inputs[99] <= run.writes[98] + run.reads[98] + run.inputs[98]
    # Turns 101..120 (after a restart): byte-stable, no paid collapse; the default route without
    # the gap pays one at turn 102.
    assert [l.get("collapse_at") for l in lines[100:120]] == [None] * 20, lines[100:120]
    assert run.images[100:120] == list(range(51, 71))
    assert max(run.writes[100:120]) < 2000, run.writes[100:120]
    # Turn 121 (120 screenshots): no record; the step function alone retires 51 -> 69 kept, not
    # the cold decision's 49, so one collapse; then stable again.
    assert run.images[120] == 69, run.images[118:123]
    assert "no record of this session" in logs
    later = [(l["turn"], l.get("collapse_at")) for l in lost]
    assert later[0][0] == 1, "a lost record starts the session's numbering again"
    assert all(at is None for _, at in later[1:]), later
    assert run.writes[120] > 10_000, "the lost record costs one rewrite"
    assert max(run.writes[121:]) < 2000, run.writes[121:]


def _session(tmp: Path, name: str, *flags: str) -> list[dict[str, Any]]:
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_sessions.py"), str(tmp), "--only", "every3rd90", *flags],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with open(tmp / name, encoding="utf-8") as f:
        return [json.loads(line)["body"] for line in f]


def _read_share(run: Run) -> float:
    return sum(run.reads) / max(1, sum(run.reads) + sum(run.writes) + sum(run.inputs))


def test_auto_breakpoints_and_the_billing_line_stabiliser_at_the_mock(tmp_path: Path) -> None:
    nomarks = _session(tmp_path / "plain", "every3rd90-nomarks.jsonl")
    billing = _session(tmp_path / "billing", "every3rd90.jsonl", "--billing-line")
    routes = "".join(
        f'\n[[routes]]\nname = "{name}"\nprefix = "/{name}"\nupstream = "MOCK"\n{extra}\n'
        for name, extra in (
            ("off", 'provider = "anthropic"'),
            ("auto", 'provider = "anthropic"\ncache_breakpoints = "auto"'),
            ("kimi", 'provider = "kimi"\ndialect = "anthropic"'),
            ("kimi-raw", 'provider = "kimi"\ndialect = "anthropic"\nstabilize = []'),
        )
    )
    share: dict[str, float] = {}
    with MockUpstream(sse_delay=0) as mock, launch_proxy(tmp_path, routes.replace("MOCK", mock.url)) as proxy:
        for route, bodies in (("off", nomarks), ("auto", nomarks), ("kimi-raw", billing), ("kimi", billing)):
            mock.prefix_cache.clear()
            run = Run()
            _drive(_client(f"{proxy.base_url}/{route}", f"e2e-{route}"), mock, bodies, run)
            share[route] = _read_share(run)
    print(f"\n[figures] cache-read share: {share}", file=sys.stderr)
    # A client that marks nothing reads nothing; with auto breakpoints nearly everything.
    assert share["off"] == 0
    assert share["auto"] > 0.9
    # Claude Code's billing line (a new cch= every request) in system[0] on a third-party
    # route: only the tools before it are ever read; removed, nearly everything.
    assert share["kimi-raw"] < 0.05
    assert share["kimi"] > 0.9
