"""An exact-prefix prompt cache for the mock upstream (``x-mock-cache: exact-prefix``).

An independent re-implementation, in the tests, of what Anthropic documents for prompt caching
(https://docs.claude.com/en/docs/build-with-claude/prompt-caching), so end-to-end tests can
measure what cachekeeper's rewrites cost against a cache that behaves like the provider's, not
against cachekeeper's own model of it (``src/accounting/cache_model.rs``, which ``replay``
uses):

- A request is cut into blocks in cache order: each tool, each system block (a string system is
  one block), each content block of each message (a string content is one block; the message's
  role counts with its first block). Each block's identity is its canonical JSON without
  ``cache_control`` (markers do not take part in matching), chained so block ``i`` stands for
  the whole prefix ``0..=i``.
- Entries are written only at breakpoints: blocks with ``cache_control``, and the last block
  for a top-level ``cache_control``. A read looks back from each breakpoint over at most 20
  blocks (the breakpoint counted) for a live entry; the longest hit is read.
- An entry lives 5 minutes (1 hour for a ``"ttl": "1h"`` marker) after it was written or last
  read. Time is the mock's clock (:meth:`PrefixCache.advance` moves it, so tests need not wait).
- Prefixes under ``min_tokens`` (1,024) are neither written nor read.

Token estimates: text and JSON 4 bytes per token; an image ``width * height / 750`` from its
PNG header (1,600 when unreadable) — the same published rules of thumb the replay model uses.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

LOOKBACK_BLOCKS = 20
MIN_TOKENS = 1024
TTL_MS = 5 * 60 * 1000
LONG_TTL_MS = 60 * 60 * 1000
TEXT_BYTES_PER_TOKEN = 4
IMAGE_PX_PER_TOKEN = 750
UNKNOWN_IMAGE_TOKENS = 1600


def _strip_markers(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _strip_markers(x) for k, x in v.items() if k != "cache_control"}
    if isinstance(v, list):
        return [_strip_markers(x) for x in v]
    return v


def _canonical(v: Any) -> bytes:
    return json.dumps(_strip_markers(v), sort_keys=True, separators=(",", ":")).encode()


def _png_tokens(data: str) -> int:
    try:
        head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4))
    except Exception:  # noqa: BLE001 - any undecodable header: unknown size
        return UNKNOWN_IMAGE_TOKENS
    if head[:8] != b"\x89PNG\r\n\x1a\n" or len(head) < 24:
        return UNKNOWN_IMAGE_TOKENS
    w, h = struct.unpack(">II", head[16:24])
    return max(1, math.ceil(w * h / IMAGE_PX_PER_TOKEN))


def _tokens(block: Any) -> int:
    """Token estimate of one block: its images by their pixels, the rest by its bytes."""
    images = 0
    img_bytes = 0

    def walk(v: Any) -> None:
        nonlocal images, img_bytes
        if isinstance(v, dict):
            src = v.get("source")
            if v.get("type") == "image" and isinstance(src, dict) and isinstance(src.get("data"), str):
                images += _png_tokens(src["data"])
                img_bytes += len(src["data"])
                return
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(block)
    text = max(0, len(_canonical(block)) - img_bytes)
    return images + math.ceil(text / TEXT_BYTES_PER_TOKEN)


@dataclass
class Block:
    digest: bytes
    tokens: int
    breakpoint: bool
    long_ttl: bool


def blocks_of(req: dict[str, Any]) -> list[Block]:
    """The request's blocks in cache order, with chained digests."""
    raw: list[tuple[Any, Any]] = []  # (identity, marker)
    for t in req.get("tools") or []:
        raw.append((t, t.get("cache_control") if isinstance(t, dict) else None))
    system = req.get("system")
    if isinstance(system, str):
        raw.append(({"type": "text", "text": system}, None))
    elif isinstance(system, list):
        for b in system:
            raw.append((b, b.get("cache_control") if isinstance(b, dict) else None))
    for m in req.get("messages") or []:
        content = m.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        for i, b in enumerate(parts):
            ident = {"role": m.get("role"), "block": b} if i == 0 else b
            raw.append((ident, b.get("cache_control") if isinstance(b, dict) else None))
    out: list[Block] = []
    h = hashlib.sha256()
    for ident, marker in raw:
        h.update(_canonical(ident))
        out.append(
            Block(
                digest=h.copy().digest(),
                tokens=_tokens(ident),
                breakpoint=isinstance(marker, dict),
                long_ttl=isinstance(marker, dict) and marker.get("ttl") == "1h",
            )
        )
    top = req.get("cache_control")
    if isinstance(top, dict) and out:
        out[-1].breakpoint = True
        out[-1].long_ttl = out[-1].long_ttl or top.get("ttl") == "1h"
    return out


@dataclass
class Usage:
    input_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    cache_creation_1h: int


class PrefixCache:
    """One provider-side cache (shared by every request the mock answers)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[bytes, tuple[float, int]] = {}  # digest -> (expires_ms, ttl_ms)
        self.offset_ms = 0

    def now_ms(self) -> float:
        return time.time() * 1000 + self.offset_ms

    def advance(self, ms: int) -> None:
        """Move the cache's clock forward (an idle gap without waiting)."""
        with self._lock:
            self.offset_ms += ms

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def usage(self, req: dict[str, Any]) -> Usage:
        blocks = blocks_of(req)
        cum = [0]
        for b in blocks:
            cum.append(cum[-1] + b.tokens)
        with self._lock:
            now = self.now_ms()
            live = {d: e for d, e in self._entries.items() if e[0] >= now}
            self._entries = live
            read = -1
            for i, b in enumerate(blocks):
                if not b.breakpoint:
                    continue
                for j in range(i, max(-1, i - LOOKBACK_BLOCKS), -1):
                    if blocks[j].digest in live and cum[j + 1] >= MIN_TOKENS:
                        read = max(read, j)
                        break
            if read >= 0:
                _, ttl = live[blocks[read].digest]
                live[blocks[read].digest] = (now + ttl, ttl)
            written = 0
            written_1h = 0
            last_bp = -1
            for i, b in enumerate(blocks):
                if not b.breakpoint:
                    continue
                last_bp = i
                if i <= read or cum[i + 1] < MIN_TOKENS:
                    continue
                ttl = LONG_TTL_MS if b.long_ttl else TTL_MS
                live[b.digest] = (now + ttl, ttl)
            if last_bp > read:
                # Everything after the read up to the last breakpoint is written once.
                start = read + 1
                for i in range(start, last_bp + 1):
                    written += blocks[i].tokens
                    if blocks[last_bp].long_ttl:
                        written_1h += blocks[i].tokens
                if cum[last_bp + 1] < MIN_TOKENS:
                    written = 0
                    written_1h = 0
        total = cum[-1]
        read_tokens = cum[read + 1] if read >= 0 else 0
        return Usage(
            input_tokens=total - read_tokens - written,
            cache_read_input_tokens=read_tokens,
            cache_creation_input_tokens=written,
            cache_creation_1h=written_1h,
        )
