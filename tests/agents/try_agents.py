#!/usr/bin/env python3
"""Try real coding agents through cachekeeper, offline, against the mock upstream.

Run BY HAND (not in CI): it installs agents from npm / PyPI when asked and takes a minute or two.

    cargo build
    python3 tests/agents/try_agents.py --install            # every agent
    python3 tests/agents/try_agents.py claude aider          # just these, already installed

What it does:
1. starts the mock provider (tests/e2e/mock_upstream.py) in-process on a free loopback port;
2. writes a proxy.toml with /anthropic, /openai and /gemini routes to it and starts
   `cachekeeper serve --config ... --listen 127.0.0.1:<free port>`;
3. runs each agent once, non-interactively, with only its base URL pointed at cachekeeper and a
   fake key, in a throw-away HOME (your own agent configs are neither read nor touched);
4. passes an agent when it exits 0, prints the mock's reply (unique per agent), and the mock saw
   its generation request arrive through the proxy.

Agents: claude (Claude Code, npm @anthropic-ai/claude-code), codex (Codex CLI, npm @openai/codex,
Responses API), gemini (Gemini CLI, npm @google/gemini-cli), hermes (PyPI hermes-agent, OpenAI
Chat route), hermes-anthropic (the same, Anthropic route), aider (PyPI aider-chat), and through
the clouds: claude-bedrock (Claude Code on Amazon Bedrock with a Bedrock API key),
claude-bedrock-sigv4 (the same with AWS credentials: SigV4, checked and signed again by the
proxy, which holds the same credentials), claude-bedrock-skip-auth (`CLAUDE_CODE_SKIP_BEDROCK_AUTH=1`,
signed by the proxy on a `sign_all` route), claude-vertex (Claude Code on Vertex AI with
`CLAUDE_CODE_SKIP_VERTEX_AUTH=1`: the route's service account gives the token), codex-azure
(Codex CLI with an Azure OpenAI provider).
With --install, npm agents go global (`npm i -g`) and PyPI agents into their own venvs under
~/.cache/cachekeeper-agents/ (they pin many packages; keep them out of the test venv).

With --strict the mock is strict about echoed reasoning carriers (tests/e2e/strict_mock.py,
mode ``auto``: DeepSeek-style Chat, Anthropic thinking, Gemini signatures, Responses reasoning
items, by path): it answers with carriers and a call to one of the agent's read-only tools
(Read, read_file, ls, glob, ...), and with the provider's real 400 when the agent's next request
echoes that turn without them. Each agent then runs twice: straight at the mock (does the agent
drop carriers on its own?) and through cachekeeper (does it pass once they are restored?).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from cloud_mock import (  # noqa: E402
    AWS_ACCESS_KEY_ID,
    AWS_REGION,
    AWS_SECRET_ACCESS_KEY,
    AZURE_API_KEY,
    BEDROCK_API_KEY,
    VERTEX_LOCATION,
    VERTEX_PROJECT,
    CloudMock,
    write_google_service_account,
)
from images import screenshot_png  # noqa: E402
from mock_upstream import MockUpstream, RecordedRequest  # noqa: E402

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cachekeeper-agents"
PROMPT = "Say hello in one short sentence. Do not use any tools."
STRICT_PROMPT = "Read hello.py, then tell me in one short sentence what it prints."
TIMEOUT_S = 240

NPM_PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex", "gemini": "@google/gemini-cli"}
PYPI_PACKAGES = {"hermes": "hermes-agent", "aider": "aider-chat"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Ctx:
    proxy: str  # http://127.0.0.1:PORT
    work: Path  # scratch dir for this run
    reply: str  # what the mock answers to this agent


@dataclass
class Agent:
    name: str
    exe: str  # command name (npm) or venv-relative name (PyPI)
    setup: Callable[[Ctx, Path], tuple[list[str], dict[str, str]]]  # (argv, env) given home dir
    generation_paths: tuple[str, ...]  # a request whose path ends with one of these must reach the mock
    pypi: str | None = None
    npm: str | None = None
    signed: bool = False  # every generation request must reach the mock with a valid SigV4 signature
    image_round: bool = False  # --strict: the tool round reads a screenshot (its result carries an image)
    direct: bool = True  # --strict: also run straight at the mock (False: it cannot authenticate there, or its paths carry a route prefix the mock does not serve)


def venv_bin(pkg_key: str, exe: str) -> Path:
    return CACHE / f"venv-{pkg_key}" / "bin" / exe


# --------------------------------------------------------------------------------------------
# one set-up per agent: exactly what a user would do, nothing more
# --------------------------------------------------------------------------------------------


# Claude Code quiet and offline: no telemetry, error reports or update checks.
CLAUDE_QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


def setup_claude(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
    env = {"ANTHROPIC_BASE_URL": f"{ctx.proxy}/anthropic", "ANTHROPIC_API_KEY": "sk-ant-mock-key", **CLAUDE_QUIET}
    return ["claude", "-p", PROMPT], env


def _codex_home(home: Path, config: str) -> Path:
    """A throw-away ``CODEX_HOME`` holding ``config`` as its ``config.toml``."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(config)
    return codex_home


def setup_codex(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
    codex_home = _codex_home(home,
        textwrap.dedent(
            f"""\
            model = "gpt-5.1-codex"
            model_provider = "cachekeeper"

            [model_providers.cachekeeper]
            name = "cachekeeper"
            base_url = "{ctx.proxy}/openai/v1"
            env_key = "OPENAI_API_KEY"
            wire_api = "responses"
            """
        )
    )
    env = {"CODEX_HOME": str(codex_home), "OPENAI_API_KEY": "sk-mock-key"}
    return ["codex", "exec", "--skip-git-repo-check", PROMPT], env


def setup_claude_bedrock(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
    """Claude Code on Amazon Bedrock with a Bedrock API key (its `AWS_BEARER_TOKEN_BEDROCK`)."""
    env = {
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "ANTHROPIC_BEDROCK_BASE_URL": f"{ctx.proxy}/bedrock",
        "AWS_BEARER_TOKEN_BEDROCK": BEDROCK_API_KEY,
        "AWS_REGION": "us-east-1",
        **CLAUDE_QUIET,
    }
    return ["claude", "-p", PROMPT], env


def setup_claude_bedrock_sigv4(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
    """Claude Code on Amazon Bedrock with AWS credentials: it signs with SigV4 for the proxy's
    host; the proxy holds the same credentials, checks the signature and signs again."""
    env = {
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "ANTHROPIC_BEDROCK_BASE_URL": f"{ctx.proxy}/bedrock-signed",
        "AWS_ACCESS_KEY_ID": AWS_ACCESS_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET_ACCESS_KEY,
        "AWS_REGION": AWS_REGION,
        **CLAUDE_QUIET,
    }
    return ["claude", "-p", PROMPT], env


def setup_claude_bedrock_skip_auth(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
    """Claude Code on Amazon Bedrock told the proxy signs (`CLAUDE_CODE_SKIP_BEDROCK_AUTH=1`): it
    sends no Authorization; the route's `sign_all` signs with the proxy's credentials."""
    env = {
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "CLAUDE_CODE_SKIP_BEDROCK_AUTH": "1",
        "ANTHROPIC_BEDROCK_BASE_URL": f"{ctx.proxy}/bedrock-gateway",
        "AWS_REGION": AWS_REGION,
        **CLAUDE_QUIET,
    }
    return ["claude", "-p", PROMPT], env


def setup_claude_vertex(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
    """Claude Code on Vertex AI told the proxy authenticates (`CLAUDE_CODE_SKIP_VERTEX_AUTH=1`):
    it sends no credential; the route's service account (`[routes.google]`) gives the token."""
    env = {
        "CLAUDE_CODE_USE_VERTEX": "1",
        "CLAUDE_CODE_SKIP_VERTEX_AUTH": "1",
        "ANTHROPIC_VERTEX_BASE_URL": f"{ctx.proxy}/vertex/v1",
        "ANTHROPIC_VERTEX_PROJECT_ID": VERTEX_PROJECT,
        "CLOUD_ML_REGION": VERTEX_LOCATION,
        **CLAUDE_QUIET,
    }
    return ["claude", "-p", PROMPT], env


def setup_codex_azure(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
    """Codex CLI with an Azure OpenAI model provider (Responses API, `api-version` query)."""
    codex_home = _codex_home(home,
        textwrap.dedent(
            f"""\
            model = "gpt-5.1-codex"
            model_provider = "azure"

            [model_providers.azure]
            name = "Azure"
            base_url = "{ctx.proxy}/azure/openai"
            env_key = "AZURE_OPENAI_API_KEY"
            query_params = {{ api-version = "2025-04-01-preview" }}
            wire_api = "responses"
            """
        )
    )
    env = {"CODEX_HOME": str(codex_home), "AZURE_OPENAI_API_KEY": AZURE_API_KEY}
    return ["codex", "exec", "--skip-git-repo-check", PROMPT], env


def setup_gemini(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
    gdir = home / ".gemini"
    gdir.mkdir(parents=True, exist_ok=True)
    (gdir / "settings.json").write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": False},
                "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            }
        )
    )
    env = {
        "GOOGLE_GEMINI_BASE_URL": f"{ctx.proxy}/gemini",
        "GEMINI_API_KEY": "AIza-mock-key",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    return ["gemini", "-p", PROMPT], env


def _hermes(route: str, model: str, key: str) -> Callable[[Ctx, Path], tuple[list[str], dict[str, str]]]:
    def setup(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
        hh = home / ".hermes"
        hh.mkdir(parents=True, exist_ok=True)
        (hh / "config.yaml").write_text(
            textwrap.dedent(
                f"""\
                model:
                  provider: custom
                  base_url: {ctx.proxy}{route}
                  default: {model}
                  api_key: {key}
                """
            )
        )
        return [str(venv_bin("hermes", "hermes")), "-z", PROMPT], {"HERMES_HOME": str(hh)}

    return setup


def setup_aider(ctx: Ctx, home: Path) -> tuple[list[str], dict[str, str]]:
    argv = [
        str(venv_bin("aider", "aider")),
        "--openai-api-base", f"{ctx.proxy}/openai/v1",
        "--model", "openai/gpt-4.1",
        "--no-git", "--yes-always", "--no-check-update", "--no-show-release-notes",
        "--no-analytics", "--no-pretty", "--stream",
        "--message", PROMPT,
    ]  # fmt: skip
    env = {"OPENAI_API_KEY": "sk-mock-key", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return argv, env


AGENTS = {
    a.name: a
    for a in [
        Agent("claude", "claude", setup_claude, ("/v1/messages",), npm=NPM_PACKAGES["claude"]),
        Agent("codex", "codex", setup_codex, ("/v1/responses",), npm=NPM_PACKAGES["codex"]),
        Agent("gemini", "gemini", setup_gemini, (":streamGenerateContent", ":generateContent"), npm=NPM_PACKAGES["gemini"]),
        Agent("hermes", "hermes", _hermes("/openai/v1", "gpt-4.1", "sk-mock-key"), ("/v1/chat/completions",), pypi="hermes"),
        Agent(
            "hermes-anthropic",
            "hermes",
            _hermes("/anthropic", "claude-opus-4-8", "sk-ant-mock-key"),
            ("/v1/messages",),
            pypi="hermes",
        ),
        Agent("aider", "aider", setup_aider, ("/v1/chat/completions",), pypi="aider"),
        Agent(
            "claude-bedrock",
            "claude",
            setup_claude_bedrock,
            ("/invoke-with-response-stream", "/invoke"),
            npm=NPM_PACKAGES["claude"],
            image_round=True,
            direct=False,
        ),
        Agent("codex-azure", "codex", setup_codex_azure, ("/responses",), npm=NPM_PACKAGES["codex"], image_round=True),
        Agent(
            "claude-vertex",
            "claude",
            setup_claude_vertex,
            (":streamRawPredict", ":rawPredict"),
            npm=NPM_PACKAGES["claude"],
            image_round=True,
            direct=False,
        ),
        Agent(
            "claude-bedrock-sigv4",
            "claude",
            setup_claude_bedrock_sigv4,
            ("/invoke-with-response-stream", "/invoke"),
            npm=NPM_PACKAGES["claude"],
            signed=True,
            image_round=True,
            direct=False,
        ),
        Agent(
            "claude-bedrock-skip-auth",
            "claude",
            setup_claude_bedrock_skip_auth,
            ("/invoke-with-response-stream", "/invoke"),
            npm=NPM_PACKAGES["claude"],
            signed=True,
            image_round=True,
            direct=False,
        ),
    ]
}


def is_installed(agent: Agent) -> bool:
    if agent.pypi:
        return venv_bin(agent.pypi, agent.exe).exists()
    return shutil.which(agent.exe) is not None


def install(agent: Agent) -> None:
    if agent.npm:
        print(f"[install] npm i -g {agent.npm}", flush=True)
        subprocess.run(["npm", "i", "-g", agent.npm], check=True)
    elif agent.pypi:
        venv = CACHE / f"venv-{agent.pypi}"
        print(f"[install] {PYPI_PACKAGES[agent.pypi]} into {venv}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", "-q", PYPI_PACKAGES[agent.pypi]],
            check=True,
        )


# --------------------------------------------------------------------------------------------
# proxy
# --------------------------------------------------------------------------------------------


def start_proxy(binary: Path, mock: MockUpstream, work: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    listen = f"127.0.0.1:{port}"
    cfg = work / "proxy.toml"
    # The Vertex route's service account, known to the mock's token endpoint.
    write_google_service_account(work / "service-account.json", "cachekeeper-agents@my-proj.iam.gserviceaccount.com", mock)
    cfg.write_text(
        textwrap.dedent(
            f"""\
            [server]
            listen = "{listen}"

            [state]
            path = "{work / 'cachekeeper.db'}"

            [[routes]]
            name = "anthropic"
            prefix = "/anthropic"
            upstream = "{mock.url}"

            [[routes]]
            name = "openai"
            prefix = "/openai"
            upstream = "{mock.url}"

            [[routes]]
            name = "gemini"
            prefix = "/gemini"
            upstream = "{mock.url}"

            [[routes]]
            name = "bedrock"
            prefix = "/bedrock"
            upstream = "{mock.url}"
            provider = "bedrock"

            [[routes]]
            name = "azure"
            prefix = "/azure"
            upstream = "{mock.url}"
            provider = "azure-openai"

            [[routes]]
            name = "vertex"
            prefix = "/vertex"
            upstream = "{mock.url}"
            provider = "vertex"
            [routes.google]
            service_account = "service-account.json"

            [[routes]]
            name = "bedrock-signed"
            prefix = "/bedrock-signed"
            upstream = "{mock.url}"
            provider = "bedrock"
            [routes.aws]
            region = "{AWS_REGION}"

            [[routes]]
            name = "bedrock-gateway"
            prefix = "/bedrock-gateway"
            upstream = "{mock.url}"
            provider = "bedrock"
            [routes.aws]
            region = "{AWS_REGION}"
            sign_all = true
            """
        )
    )
    log = work / "cachekeeper.log"
    with open(log, "wb") as f:
        # The proxy's own AWS credentials (the mock's key), for the signed Bedrock routes.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({"AWS_ACCESS_KEY_ID": AWS_ACCESS_KEY_ID, "AWS_SECRET_ACCESS_KEY": AWS_SECRET_ACCESS_KEY})
        env["AWS_SHARED_CREDENTIALS_FILE"] = env["AWS_CONFIG_FILE"] = str(work / "no-aws-files")
        proc = subprocess.Popen(
            [str(binary), "serve", "--config", str(cfg), "--listen", listen],
            stdout=f,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    base = f"http://{listen}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"cachekeeper exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2) as r:
                if r.status == 200:
                    return proc, base, log
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit(f"cachekeeper /healthz did not answer within 30 s:\n{log.read_text()}")


# --------------------------------------------------------------------------------------------
# trial
# --------------------------------------------------------------------------------------------


@dataclass
class Result:
    agent: str
    ok: bool
    detail: str
    seconds: float
    requests: list[str] = field(default_factory=list)
    # --strict: echoed tool rounds the mock checked, and its 400 if it refused one
    echoed: int = 0
    refused: str | None = None


def run_agent(agent: Agent, mock: MockUpstream, proxy: str, work: Path, verbose: bool, strict: bool = False) -> Result:
    """One run of ``agent`` with its base URL at ``proxy`` (cachekeeper, or with --strict also
    the mock itself: the mock answers whatever prefix the route adds)."""
    if not is_installed(agent):
        return Result(agent.name, False, "not installed (run with --install)", 0.0)
    label = agent.name if proxy != mock.url else f"{agent.name}-direct"
    home = work / f"home-{label}"
    cwd = work / f"cwd-{label}"
    home.mkdir(parents=True, exist_ok=True)
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / "hello.py").write_text("print('hello')\n")
    reply = f"Hello from the mock upstream, {agent.name}."
    mock.reply_text = reply
    mock.clear()
    mock.strict.read_path = None
    if strict and agent.image_round:
        # The strict mock's tool round reads this screenshot (a decodable PNG: Codex's
        # view_image decodes it): the agent sends it back as an image, through the proxy's
        # image passes.
        shot = cwd / "screenshot.png"
        shot.write_bytes(screenshot_png(1280, 800, seed=7))
        mock.strict.read_path = str(shot)
    argv, extra = agent.setup(Ctx(proxy, work, reply), home)
    if strict:
        argv = [STRICT_PROMPT if a == PROMPT else a for a in argv]
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and "BASE_URL" not in k}
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(var, None)
    env.update({"HOME": str(home), "NO_COLOR": "1", "CI": "1", "TERM": "dumb"}, **extra)
    print(f"\n=== {label}: {shlex.join(argv)}", flush=True)
    for k, v in extra.items():
        print(f"    {k}={v}")
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT_S
        )
        rc, out = p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        rc, out = -1, ((e.stdout or b"") + (e.stderr or b"")).decode("utf-8", "replace") + "\n<timed out>"
    dt = time.monotonic() - t0
    (work / f"{label}.out").write_text(out)
    seen: list[RecordedRequest] = list(mock.requests)
    reqs = [f"{r.method} {r.path}{'?' + r.query if r.query else ''}" for r in seen]
    generations = [r for r in seen if r.method == "POST" and any(r.path.endswith(g) for g in agent.generation_paths)]
    if verbose or rc != 0:
        print(textwrap.indent(out[-3000:], "    | "))
    problems = []
    if rc != 0:
        problems.append(f"exit code {rc}")
    if reply not in out:
        problems.append("the mock's reply is not in the agent's output")
    if not generations:
        problems.append(f"no generation request ({', '.join(agent.generation_paths)}) reached the mock")
    if agent.signed and not all(r.signature_verified for r in generations):
        problems.append("a generation request reached the mock without a valid SigV4 signature")
    streamed = sum(1 for r in generations if _wants_stream(r))
    if strict:
        # the judgement is the mock's: did an echoed tool round come back with its carriers?
        echoed = sum(1 for r in generations if r.carriers)
        refused = next((r.strict_error for r in generations if r.strict_error), None)
        problems = [p for p in problems if not p.startswith("the mock's reply")]
        # An image block in any wire: Anthropic's `image`, the Responses API's `input_image`.
        images = sum(1 for r in generations if re.search(rb'"type":"(input_)?image"', r.body.replace(b" ", b"")))
        if refused:
            problems.append(f"refused: {refused[:160]}")
        elif agent.image_round and not images:
            problems.append("no tool result carried the screenshot as an image")
        elif not echoed:
            problems.append("no tool round was echoed (the agent declared no read-only tool, or stopped)")
        with_image = f", {images} with the screenshot as an image" if agent.image_round else ""
        detail = "; ".join(problems) or f"{echoed} echoed tool round(s) accepted{with_image}; {len(generations)} generation request(s), {streamed} streamed"
        return Result(label, not problems, detail, dt, reqs, echoed, refused)
    detail = "; ".join(problems) or f"turn completed; {len(generations)} generation request(s), {streamed} streamed"
    return Result(label, not problems, detail, dt, reqs)


def _wants_stream(r: RecordedRequest) -> bool:
    if "alt=sse" in r.query or ":streamGenerateContent" in r.path:
        return True
    try:
        return bool(r.json().get("stream"))
    except Exception:  # noqa: BLE001
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("agents", nargs="*", help=f"agents to try (default: all of {', '.join(AGENTS)})")
    ap.add_argument("--install", action="store_true", help="install missing agents from npm / PyPI first")
    ap.add_argument("--bin", default=os.environ.get("CACHEKEEPER_BIN", str(REPO / "target" / "debug" / "cachekeeper")))
    ap.add_argument("--keep", action="store_true", help="keep the scratch dir (agent outputs, proxy log)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each agent's output")
    ap.add_argument(
        "--strict",
        action="store_true",
        help="strict-carrier mock: run each agent straight at the mock, then through cachekeeper",
    )
    args = ap.parse_args()
    names = args.agents or list(AGENTS)
    unknown = [n for n in names if n not in AGENTS]
    if unknown:
        ap.error(f"unknown agent(s) {unknown}; choose from {list(AGENTS)}")
    binary = Path(args.bin)
    if not binary.is_file():
        sys.exit(f"cachekeeper binary not found at {binary}; run `cargo build` or pass --bin")
    if args.install:
        for n in names:
            if not is_installed(AGENTS[n]):
                install(AGENTS[n])

    work = Path(tempfile.mkdtemp(prefix="cachekeeper-agents-"))
    # The cloud mock speaks every wire the plain one does, plus Bedrock's, Vertex AI's and
    # Azure OpenAI's (tests/e2e/cloud_mock.py).
    mock = CloudMock(strict="auto" if args.strict else None).start()
    proc, base, log = start_proxy(binary, mock, work)
    print(f"mock upstream {mock.url}; cachekeeper {base}; scratch {work}")
    results: list[Result] = []
    try:
        for n in names:
            if args.strict and AGENTS[n].direct and is_installed(AGENTS[n]):
                results.append(run_agent(AGENTS[n], mock, mock.url, work, args.verbose, strict=True))
            results.append(run_agent(AGENTS[n], mock, base, work, args.verbose, strict=args.strict))
            if proc.poll() is not None:
                print(f"cachekeeper died during {n}:\n{log.read_text()[-3000:]}")
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        mock.stop()

    print("\n=== summary")
    for r in results:
        print(f"{'PASS' if r.ok else 'FAIL'}  {r.agent:<17} {r.seconds:6.1f}s  {r.detail}")
        for q in r.requests:
            print(f"        {q}")
    if args.strict:
        print("\n=== carriers (straight at the strict mock -> through cachekeeper)")
        by = {r.agent: r for r in results}
        for n in names:
            direct, proxied = by.get(f"{n}-direct"), by.get(n)
            if direct is None or proxied is None:
                print(f"{n:<17} not tried ({proxied.detail if proxied else 'no result'})")
                continue
            own = "drops carriers" if direct.refused else "keeps carriers" if direct.echoed else "not exercised"
            via = "passes" if proxied.ok else f"fails ({proxied.detail})"
            print(f"{n:<17} on its own: {own}; through cachekeeper: {via}")
        # straight at the strict mock an agent that drops carriers is *expected* to be refused
        results = [r for r in results if not r.agent.endswith("-direct")]
    passed = sum(r.ok for r in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    if args.keep or passed != len(results):
        print(f"outputs and cachekeeper.log kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
