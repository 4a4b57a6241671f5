#!/usr/bin/env python3
"""Print the figures of docs/guide/replay.md#what-each-prefix-cache-feature-saves: `cachekeeper replay` over the generated
computer-use sessions (scripts/gen_sessions.py), one route per policy being compared.

    python3 scripts/prefix_figures.py [--bin target/release/cachekeeper] [--keep DIR]

Every figure comes from replay's exact-prefix cache model (docs/replay.md) with Anthropic's
rule (5-minute TTL, 20-block lookback, writes 1.25x, reads 0.1x) or DeepSeek's (automatic).
Nothing is sent anywhere. Takes about a minute with a release build.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = """
# Routes of scripts/prefix_figures.py: one per policy compared (nothing is sent).
[[routes]]
name = "default"
prefix = "/default"
upstream = "https://api.anthropic.com"

[[routes]]
name = "eight-at-a-time"
prefix = "/eight"
upstream = "https://api.anthropic.com"
[routes.images]
evict_low_water = 93

[[routes]]
name = "no-cold-eviction"
prefix = "/nocold"
upstream = "https://api.anthropic.com"
[routes.images]
cold_eviction = false

[[routes]]
name = "auto-breakpoints"
prefix = "/auto"
upstream = "https://api.anthropic.com"
cache_breakpoints = "auto"

[[routes]]
name = "deepseek"
prefix = "/deepseek"
upstream = "https://api.deepseek.com/anthropic"
dialect = "anthropic"

[[routes]]
name = "deepseek-unstabilized"
prefix = "/deepseek-raw"
upstream = "https://api.deepseek.com/anthropic"
dialect = "anthropic"
stabilize = []
"""


def replay(binary, config, route, session):
    try:
        done = subprocess.run(
            [binary, "replay", "--config", config, "--route", route, session, "--json"],
            capture_output=True,
            text=True,
        )
    except OSError as e:
        sys.exit(f"error: cannot run {binary}: {e} (build it: cargo build --release)")
    if done.returncode != 0:
        sys.exit(f"error: {binary} replay --route {route} {session} failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


def row(name, v):
    billed = v["billed_input_equiv"]
    return (
        f"| {name} | {len(v['collapses'])} | {v['cache_write_tokens']:,} | {v['cache_read_tokens']:,} | "
        + (f"{billed / 1e6:.2f}M" if billed is not None else "not priced")
        + f" | {v['mean_images']:.1f} |"
    )


HEAD = "| policy | collapses | cache writes | cache reads | billed input equiv. | images seen (mean) |\n|---|---|---|---|---|---|"


def share(v):
    return v["cache_read_tokens"] / max(1, v["input_tokens"])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target", "release", "cachekeeper"))
    ap.add_argument("--keep", help="generate the sessions into this folder and keep them")
    args = ap.parse_args(argv)
    work = args.keep or tempfile.mkdtemp(prefix="cachekeeper-figures-")
    try:
        figures(args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def figures(args, work):
    gen = os.path.join(ROOT, "scripts", "gen_sessions.py")
    plain, idle, billing = (os.path.join(work, d) for d in ("plain", "idle100", "billing"))
    subprocess.run([sys.executable, gen, plain, "--only", "every150", "every3rd90"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, gen, idle, "--only", "every150", "--idle-at", "100"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, gen, billing, "--only", "every3rd90", "--billing-line"], check=True, stdout=subprocess.DEVNULL)
    config = os.path.join(work, "figures.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(CONFIG)
    b = args.bin

    dense = os.path.join(plain, "every150.jsonl")
    d = replay(b, config, "default", dense)
    e = replay(b, config, "eight-at-a-time", dense)
    print("Dense: 150 turns, a screenshot every turn (100-image ceiling)\n")
    print(HEAD)
    print(row("no eviction (as sent; over the ceiling from turn 101)", d["as_sent"]))
    print(row("keep the newest 3", d["keep_newest_3"]))
    print(row("retire 8 at a time (evict_low_water = 93)", e["cachekeeper"]))
    print(row("cachekeeper default (down to 50 when crossed)", d["cachekeeper"]))
    dc, ec = d["cachekeeper"], e["cachekeeper"]
    print(
        f"\ndefault / 8-at-a-time: writes {dc['cache_write_tokens'] / ec['cache_write_tokens']:.2f}x, "
        f"billed {dc['billed_input_equiv'] / ec['billed_input_equiv']:.2f}x, "
        f"images seen {dc['mean_images'] / ec['mean_images']:.2f}x\n"
    )

    sparse = replay(b, config, "default", os.path.join(plain, "every3rd90.jsonl"))
    s = sparse["cachekeeper"]
    print("Sparse: 90 turns, a screenshot every third turn\n")
    print(HEAD)
    print(row("no eviction (as sent)", sparse["as_sent"]))
    print(row("cachekeeper default", s))
    print(f"\ncache writes / no-eviction lower bound: {s['cache_write_tokens'] / sparse['as_sent']['cache_write_tokens']:.3f}x\n")

    gap = os.path.join(idle, "every150-idle.jsonl")
    cold = replay(b, config, "default", gap)["cachekeeper"]
    warm = replay(b, config, "no-cold-eviction", gap)["cachekeeper"]
    print("Dense with a 10-minute idle gap before turn 100\n")
    print(HEAD)
    print(row("cold-cache eviction off", warm))
    print(row("cachekeeper default (cold-cache eviction)", cold))
    for name, v in (("off", warm), ("on", cold)):
        print(f"\ncollapses with cold-cache eviction {name}: " + ", ".join(f"turn {c['turn']} {c['cause']} ({c['write_tokens']:,} written)" for c in v["collapses"]))
    print()

    nomarks = os.path.join(plain, "every3rd90-nomarks.jsonl")
    off = replay(b, config, "default", nomarks)["cachekeeper"]
    auto = replay(b, config, "auto-breakpoints", nomarks)["cachekeeper"]
    print("A client that sets no cache_control (sparse session), Anthropic\n")
    print(HEAD)
    print(row('cache_breakpoints = "off"', off))
    print(row('cache_breakpoints = "auto"', auto))
    print(f"\ncache-read share of input: off {share(off):.1%}, auto {share(auto):.1%}\n")

    cc = os.path.join(billing, "every3rd90.jsonl")
    raw = replay(b, config, "deepseek-unstabilized", cc)["cachekeeper"]
    stable = replay(b, config, "deepseek", cc)["cachekeeper"]
    print("Claude Code's billing line on a DeepSeek Anthropic-wire route (sparse session)\n")
    print(HEAD)
    print(row("stabilize = []", raw))
    print(row("default (claude_code_billing_line)", stable))
    print(f"\ncache-read share of input: without {share(raw):.1%}, with the stabiliser {share(stable):.1%}")


if __name__ == "__main__":
    main(sys.argv[1:])
