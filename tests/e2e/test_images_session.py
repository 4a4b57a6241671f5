"""End to end (issue 3, "Tests and measures"): a computer-use agent session of 1920x1080
screenshots (real, decodable PNGs of about 1.5 MB) through cachekeeper with the official SDKs.

For every request the mock upstream received:
- every agent image is within the default budget (base64 length <= ``embed_target_bytes``,
  262144) and decodes to a longest side <= 1568 px (``max_dimension``);
- the fixed downscale note (``texts::downscale_note`` in src/texts.rs) follows each one, naming
  the original 1920x1080 and the new size;
- the raw bytes of every earlier message are identical to what went upstream the turn before (the
  provider's cached prefix survives the rewrite);
- the response says so in ``x-cachekeeper-rewrites: ...; images_downscaled=N; ...``.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pytest

from helpers import SCREENSHOT_TOOL_ANTHROPIC, SCREENSHOT_TOOL_OPENAI, top_level_array_items
from images import b64, downscale_note, image_size, png_decodes, screenshot_png, unb64
from mock_upstream import DEFAULT_REPLY, MockUpstream

if TYPE_CHECKING:
    from conftest import Capture

CLAUDE = "claude-e2e-test-model"
GPT = "gpt-4.1"
REWRITES_HEADER = "x-cachekeeper-rewrites"

SCREEN = (1920, 1080)
TURNS = 20  # Anthropic session
OPENAI_TURNS = 6  # the shorter OpenAI Chat variant
EMBED_TARGET_BYTES = 262_144  # [images] embed_target_bytes default
MAX_DIMENSION = 1568  # [images] max_dimension default
MIME = {"jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif", "webp": "image/webp"}


@pytest.fixture(scope="module")
def screenshots() -> list[str]:
    """TURNS screenshots as base64, one per turn, deterministic from a fixed seed."""
    shots = [screenshot_png(*SCREEN, seed=3000 + t) for t in range(TURNS)]
    assert len(set(shots)) == TURNS, "every turn needs its own screenshot"
    for png in shots:
        assert 1_200_000 <= len(png) <= 2_200_000, f"screenshot of {len(png)} bytes, want about 1.5 MB"
    assert png_decodes(shots[0]), "the generated PNG does not decode"
    return [b64(png) for png in shots]


def _rewrites(headers: Any) -> dict[str, str]:
    value = headers.get(REWRITES_HEADER)
    assert value is not None, f"response lacks {REWRITES_HEADER}: {dict(headers)}"
    out: dict[str, str] = {}
    for part in value.split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def _check_downscaled(where: str, data: bytes, declared_mime: str, note: Any) -> tuple[int, int]:
    """One forwarded agent image (decoded bytes) and the block after it. Returns its size."""
    fmt, w, h = image_size(data)
    assert MIME.get(fmt) == declared_mime, f"{where}: {fmt} bytes declared as {declared_mime}"
    assert max(w, h) <= MAX_DIMENSION, f"{where}: forwarded at {w}x{h}, over {MAX_DIMENSION} px"
    assert (w, h) != SCREEN, f"{where}: not downscaled"
    assert isinstance(note, dict) and note.get("type") == "text", f"{where}: no downscale note after the image: {note!r}"
    text = note["text"]
    assert f"{SCREEN[0]}x{SCREEN[1]}" in text, f"{where}: note does not name the original size: {text!r}"
    assert text == downscale_note(SCREEN, (w, h)), f"{where}: note {text!r} is not the fixed format of src/texts.rs"
    return w, h


def _assert_prefix_stable(turn: int, items: list[bytes], previous: list[bytes] | None) -> None:
    if previous is None:
        return
    assert len(items) > len(previous), f"turn {turn}: fewer messages forwarded than the turn before"
    for i, (now, before) in enumerate(zip(items, previous)):
        assert now == before, (
            f"turn {turn}: forwarded bytes of messages[{i}] changed since the previous turn "
            f"({len(before)} -> {len(now)} bytes)"
        )


# ---------------------------------------------------------------------------------------------
# Anthropic Messages: tool_result blocks carrying the screenshot
# ---------------------------------------------------------------------------------------------


def test_anthropic_twenty_screenshot_turns(
    anthropic_client: anthropic.Anthropic, upstream: MockUpstream, sent: Capture, screenshots: list[str]
) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Open the settings app and turn on dark mode. Take a screenshot after each step."}
    ]
    previous: list[bytes] | None = None
    forwarded_images: dict[int, str] = {}  # screenshot -> its forwarded base64, first seen
    started = time.monotonic()
    for turn in range(TURNS):
        tid = f"toolu_{turn:03d}"
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Step {turn}: taking a screenshot."},
                    {"type": "tool_use", "id": tid, "name": "screenshot", "input": {"step": turn}},
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tid,
                        "content": [
                            {"type": "text", "text": f"Screenshot {turn} taken."},
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": screenshots[turn]},
                            },
                        ],
                    }
                ],
            }
        )
        raw = anthropic_client.messages.with_raw_response.create(
            model=CLAUDE, max_tokens=256, messages=messages, tools=[SCREENSHOT_TOOL_ANTHROPIC]
        )
        reply = raw.parse()
        assert reply.content[0].text == DEFAULT_REPLY
        assert screenshots[turn].encode() in sent.last().body, "the SDK itself should send the full PNG"

        reqs = upstream.matching("POST", "/messages")
        assert len(reqs) == turn + 1, f"turn {turn}: {len(reqs)} upstream requests, want one per turn (no retry)"
        rec = reqs[-1]
        body = rec.decoded_body
        assert len(body) < len(sent.last().body) / 4, "the forwarded body should be much smaller than the SDK's"

        # Byte-stable prefix: messages[0..k] now == messages[0..k] the turn before.
        items = top_level_array_items(body, "messages")
        assert len(items) == len(messages)
        _assert_prefix_stable(turn, items, previous)
        previous = items

        # Every agent image: within the budget, <= 1568 px, followed by the note.
        fwd = json.loads(body)["messages"]
        seen = 0
        for mi, m in enumerate(fwd):
            if m["role"] != "user" or not isinstance(m["content"], list):
                continue
            for block in m["content"]:
                if block.get("type") != "tool_result":
                    continue
                content = block["content"]
                shot = int(block["tool_use_id"].rsplit("_", 1)[1])
                imgs = [i for i, b in enumerate(content) if b.get("type") == "image"]
                assert len(imgs) == 1, f"turn {turn}: messages[{mi}] carries {len(imgs)} images"
                i = imgs[0]
                assert content[0] == {"type": "text", "text": f"Screenshot {shot} taken."}
                src = content[i]["source"]
                assert src["type"] == "base64"
                data = src["data"]
                where = f"turn {turn}, screenshot {shot}"
                assert len(data) <= EMBED_TARGET_BYTES, f"{where}: base64 of {len(data)} bytes, over the budget"
                _check_downscaled(where, unb64(data), src["media_type"], content[i + 1] if i + 1 < len(content) else None)
                assert len(content) == i + 2, f"{where}: one note, nothing else, after the image"
                # The same screenshot is forwarded as the same bytes every turn.
                assert forwarded_images.setdefault(shot, data) == data, f"{where}: forwarded bytes changed"
                seen += 1
        assert seen == turn + 1, f"turn {turn}: {seen} images forwarded, want {turn + 1} (nothing evicted)"

        rw = _rewrites(raw.headers)
        assert int(rw.get("images_downscaled", "0")) > 0, f"turn {turn}: {raw.headers.get(REWRITES_HEADER)}"
        assert int(rw["images_downscaled"]) == turn + 1, f"turn {turn}: {raw.headers.get(REWRITES_HEADER)}"
    print(f"\n[e2e] {TURNS} Anthropic screenshot turns through the proxy in {time.monotonic() - started:.1f}s")


# ---------------------------------------------------------------------------------------------
# OpenAI Chat: tool message, then a user message carrying the screenshot as a data URL
# ---------------------------------------------------------------------------------------------


def test_openai_chat_screenshot_turns(
    openai_client: openai.OpenAI, upstream: MockUpstream, sent: Capture, screenshots: list[str]
) -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful UI tester."},
        {"role": "user", "content": "Open the settings app and turn on dark mode. Take a screenshot after each step."},
    ]
    previous: list[bytes] | None = None
    started = time.monotonic()
    for turn in range(OPENAI_TURNS):
        cid = f"call_{turn:03d}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "screenshot", "arguments": json.dumps({"step": turn})}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": cid, "content": f"Screenshot {turn} taken; attached below."})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"Screenshot {turn}:"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + screenshots[turn]}},
                ],
            }
        )
        raw = openai_client.chat.completions.with_raw_response.create(
            model=GPT, messages=messages, tools=[SCREENSHOT_TOOL_OPENAI]
        )
        reply = raw.parse()
        assert reply.choices[0].message.content == DEFAULT_REPLY

        reqs = upstream.matching("POST", "/chat/completions")
        assert len(reqs) == turn + 1, f"turn {turn}: {len(reqs)} upstream requests, want one per turn"
        body = reqs[-1].decoded_body

        items = top_level_array_items(body, "messages")
        assert len(items) == len(messages)
        _assert_prefix_stable(turn, items, previous)
        previous = items

        fwd = json.loads(body)["messages"]
        seen = 0
        for mi, m in enumerate(fwd):
            if m["role"] != "user" or not isinstance(m["content"], list):
                continue
            assert fwd[mi - 1]["role"] == "tool"
            parts = m["content"]
            shot = int(parts[0]["text"].removeprefix("Screenshot ").rstrip(":"))
            assert parts[1]["type"] == "image_url"
            url = parts[1]["image_url"]["url"]
            where = f"turn {turn}, screenshot {shot}"
            assert len(url) <= EMBED_TARGET_BYTES, f"{where}: data URL of {len(url)} bytes, over the budget"
            header, _, data = url.partition(",")
            assert header.startswith("data:") and header.endswith(";base64"), f"{where}: {header!r}"
            _check_downscaled(where, unb64(data), header[5 : -len(";base64")], parts[2] if len(parts) > 2 else None)
            assert len(parts) == 3, f"{where}: one note, nothing else, after the image"
            seen += 1
        assert seen == turn + 1

        rw = _rewrites(raw.headers)
        assert int(rw.get("images_downscaled", "0")) == turn + 1, f"turn {turn}: {raw.headers.get(REWRITES_HEADER)}"
    print(f"\n[e2e] {OPENAI_TURNS} OpenAI Chat screenshot turns through the proxy in {time.monotonic() - started:.1f}s")
