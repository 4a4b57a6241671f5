#!/usr/bin/env python3
"""Generate the computer-use sessions that the figures of docs/guide/replay.md come from.

    python3 scripts/gen_sessions.py OUTDIR [--seed N] [--route NAME] [--only NAME ...]
                                   [--idle-at TURN] [--billing-line]

Writes one `cachekeeper replay` file per session (one JSON object per line:
`{"ts": <unix ms>, "route": NAME, "body": <Anthropic Messages request>}`):

    upload60       60 turns, a screenshot every turn, and one 2400x1600 upload in the first
                   user turn (wider than 2000 px: the strict 20-image ceiling applies)
    every3rd90     90 turns, a screenshot every third turn
    every150       150 turns, a screenshot every turn (more than the 100-image ceiling)

each in four files: `NAME.jsonl` (turns 20 s apart), `NAME-idle.jsonl` (a 10-minute idle gap,
past Anthropic's 5-minute cache TTL, before the middle turn, or the turn `--idle-at` names), and
both again with `-nomarks` (no `cache_control` markers at all, for comparing automatic
breakpoints). `--billing-line` puts Claude Code's billing line in `system[0]`, its `cch=`
different on every request (for comparing the prefix stabiliser).

The requests are shaped the way a computer-use agent on Claude Code sends them: a system prompt
marked with `cache_control` at its end, a `computer` and a `bash` tool, and the newest user turn
marked at its last block (the marker moves every turn). Each turn's body is the previous body plus
the assistant's `tool_use` and the user's `tool_result` (a ~200-token text, and on screenshot
turns an 800x560 PNG: 800 * 560 / 750 = ~600 tokens), so a client that never edits keeps its
prefix byte for byte. Screenshots are small flat-colour PNGs (zlib + struct, stdlib only), each a
different colour; every byte comes from a fixed seed, so two runs give identical files.
Sizes on disk: every150 is the largest, about 40 MB per file; all twelve together take a few
seconds. Nothing here is committed: tests generate into a temporary directory.
"""

import argparse
import base64
import functools
import json
import os
import random
import struct
import sys
import zlib

START_MS = 1_764_547_200_000  # 2025-12-01T00:00:00Z
STEP_MS = 20_000  # a turn every 20 s
IDLE_MS = 10 * 60 * 1000  # the idle gap: 10 minutes (> the 5-minute TTL)
MODEL = "claude-sonnet-4-5"
SCREEN = (800, 560)  # px: 800 * 560 / 750 = 597.3 tokens
UPLOAD = (2400, 1600)  # px: wider than 2000
WORDS = (
    "the window shows a dialog with buttons for save cancel and apply while the list on the "
    "left holds files folders and recent items the cursor sits over the toolbar near the "
    "search field and a progress bar runs along the bottom edge of the screen"
).split()

SESSIONS = {
    # name: (turns, screenshot every N turns (0 = never), upload)
    "upload60": (60, 1, True),
    "every3rd90": (90, 3, False),
    "every150": (150, 1, False),
}


def png(width, height, rgb):
    """A flat-colour RGB PNG of width x height px (8-bit, no interlace)."""

    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * width  # filter type 0, then the pixels
    raw = row * height
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


@functools.lru_cache(maxsize=None)
def image_data(width, height, rgb):
    return base64.b64encode(png(width, height, rgb)).decode("ascii")


def image_block(width, height, rgb):
    data = image_data(width, height, rgb)
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": data},
    }


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def tool_text(rng):
    """About 200 tokens (~800 bytes) of tool output."""
    return words(rng, 150)


def base_body(rng, marks):
    system = [
        {"type": "text", "text": "You are a computer-use agent. " + words(rng, 1400)},
    ]
    if marks:
        system[-1]["cache_control"] = {"type": "ephemeral"}
    tools = [
        {
            "name": "computer",
            "description": "Use a mouse and keyboard to interact with a computer, and take "
            "screenshots. " + words(rng, 120),
            "input_schema": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["screenshot", "left_click", "type", "key"]},
                    "coordinate": {"type": "array", "items": {"type": "integer"}},
                    "text": {"type": "string"},
                },
                "required": ["action"],
            },
        },
        {
            "name": "bash",
            "description": "Run a shell command. " + words(rng, 60),
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    ]
    return {"model": MODEL, "max_tokens": 4096, "system": system, "tools": tools, "messages": []}


def set_marker(messages, marks):
    """Claude Code's placement: only the newest user turn's last block is marked."""
    for m in messages:
        if m["role"] == "user" and isinstance(m["content"], list):
            for b in m["content"]:
                b.pop("cache_control", None)
    if marks:
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}


def billing_line(rng):
    """Claude Code's per-request billing line (its `cch=` changes on every request)."""
    return {
        "type": "text",
        "text": "x-anthropic-billing-header: cc_version=2.1.197.014; cc_entrypoint=sdk-cli; cch=%05x;"
        % rng.getrandbits(20),
    }


def session(name, seed, idle, marks, route, idle_at=None, billing=False):
    """Yield the replay lines (dicts) of one session."""
    turns, every, upload = SESSIONS[name]
    rng = random.Random(f"{seed}:{name}")
    body = base_body(rng, marks)
    first = [{"type": "text", "text": "Please work through this task: " + words(rng, 60)}]
    if upload:
        first.insert(0, image_block(*UPLOAD, (30, 60, 90)))
    body["messages"].append({"role": "user", "content": first})
    set_marker(body["messages"], marks)
    ts = START_MS
    gap_before = (turns // 2 + 1 if idle_at is None else idle_at) if idle else None
    cch = random.Random(f"{seed}:{name}:billing")
    for turn in range(1, turns + 1):
        if billing:
            if turn > 1:
                body["system"].pop(0)
            body["system"].insert(0, billing_line(cch))
        if turn > 1:
            ts += STEP_MS + rng.randrange(0, 5_000)
            if turn == gap_before:
                ts += IDLE_MS
            k = turn - 1
            tool_id = "toolu_%016x" % rng.getrandbits(64)
            shot = every and k % every == 0
            action = {"action": "screenshot"} if shot else {"action": "left_click", "coordinate": [rng.randrange(800), rng.randrange(560)]}
            body["messages"].append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": words(rng, 20)},
                        {"type": "tool_use", "id": tool_id, "name": "computer", "input": action},
                    ],
                }
            )
            content = [{"type": "text", "text": tool_text(rng)}]
            if shot:
                colour = (k * 37 % 256, k * 91 % 256, k * 53 % 256)
                content.append(image_block(*SCREEN, colour))
            body["messages"].append(
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": tool_id, "content": content}],
                }
            )
            set_marker(body["messages"], marks)
        yield {"ts": ts, "route": route, "body": body}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=10)
    ap.add_argument("--route", default="anthropic", help="the lines' route (default anthropic)")
    ap.add_argument("--only", nargs="*", choices=sorted(SESSIONS), help="only these sessions")
    ap.add_argument("--idle-at", type=int, default=None, metavar="TURN",
                    help="the idle gap comes before this turn (default: the middle turn)")
    ap.add_argument("--billing-line", action="store_true",
                    help="put Claude Code's billing line (a new cch= every request) in system[0]")
    args = ap.parse_args(argv)
    if args.idle_at is not None:
        for name in args.only or SESSIONS:
            turns = SESSIONS[name][0]
            if not 2 <= args.idle_at <= turns:
                ap.error(f"--idle-at {args.idle_at}: {name} has turns 1..{turns}; the gap comes before a turn in 2..{turns}")
    os.makedirs(args.outdir, exist_ok=True)
    for name in args.only or SESSIONS:
        for idle in (False, True):
            for marks in (True, False):
                fname = name + ("-idle" if idle else "") + ("" if marks else "-nomarks") + ".jsonl"
                path = os.path.join(args.outdir, fname)
                with open(path, "w", encoding="utf-8") as f:
                    for line in session(name, args.seed, idle, marks, args.route, args.idle_at, args.billing_line):
                        f.write(json.dumps(line, separators=(",", ":")) + "\n")
                print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
