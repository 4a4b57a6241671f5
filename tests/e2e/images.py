"""Real screenshots for the image tests: decodable PNGs made with zlib + struct, and a reader for
the size of the PNG / JPEG / GIF / WebP bytes the proxy forwards. Pure Python, no Pillow."""

from __future__ import annotations

import base64
import random
import struct
import zlib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------------------------
# Screenshots
# ---------------------------------------------------------------------------------------------


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _rgb(rng: random.Random, lo: int, hi: int) -> bytes:
    return bytes(rng.randrange(lo, hi) for _ in range(3))


def screenshot_png(width: int, height: int, seed: int, noise_bits: int = 1) -> bytes:
    """A decodable 8-bit RGB PNG that looks roughly like a desktop app: a title bar, a side
    panel, rows of dark "text" dashes on a light background, and a low-bit sensor-like noise
    (the ``noise_bits`` low bits of every byte below the title bar are random) that keeps it from compressing well.

    Deterministic: the same arguments give the same bytes. About 1.5 MB at 1920x1080 with the
    default noise; a fraction of a second to build.
    """
    rng = random.Random(f"cachekeeper-screenshot-{seed}-{width}x{height}")
    bg = _rgb(rng, 200, 240)
    title = bytes((40, 44, 52))
    panel_px = bytes((235, 235, 240))
    panel = width // 5

    plain = panel_px * panel + bg * (width - panel)
    title_row = title * width
    rows: list[bytes] = []
    y = 0
    text_top = 48
    while y < height:
        if y < min(32, height):
            rows.append(title_row)
            y += 1
            continue
        if y >= text_top and y + 10 < height and (y - text_top) % 18 == 0:
            # One line of "text": dashes of random length and shade, 9 px tall.
            line = bytearray(plain)
            x = panel + 16 + rng.randrange(24)
            while x + 40 < width:
                n = 8 + rng.randrange(48)
                shade = 20 + rng.randrange(60)
                end = min(x + n, width)
                line[3 * x : 3 * end] = bytes((shade, shade, shade + 10)) * (end - x)
                x += n + 6 + rng.randrange(10)
                if rng.randrange(4) == 0:
                    break
            line_b = bytes(line)
            for _ in range(min(9, height - y)):
                rows.append(line_b)
            y += min(9, height - y)
            continue
        rows.append(plain)
        y += 1

    stride = 3 * width
    raw_pixels = b"".join(rows)
    assert len(raw_pixels) == stride * height
    if noise_bits:
        # XOR the low bits of every byte with random bits, all at once through big integers.
        # Everywhere below the title bar.
        mask_byte = (1 << noise_bits) - 1
        n = len(raw_pixels)
        top = min(32, height)
        mask_row = bytes((mask_byte,)) * stride
        mask = bytes(stride * top) + mask_row * (height - top)
        noise = int.from_bytes(rng.randbytes(n), "big") & int.from_bytes(mask, "big")
        raw_pixels = (int.from_bytes(raw_pixels, "big") ^ noise).to_bytes(n, "big")
    # Filter type 0 (None) on every scanline.
    mv = memoryview(raw_pixels)
    raw = b"".join(b"\x00" + mv[i : i + stride] for i in range(0, len(raw_pixels), stride))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (
        PNG_SIGNATURE
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", zlib.compress(raw, 1))
        + _png_chunk(b"IEND", b"")
    )


# ---------------------------------------------------------------------------------------------
# Reading what was forwarded
# ---------------------------------------------------------------------------------------------


def image_format(data: bytes) -> str:
    """``png``, ``jpeg``, ``gif``, ``webp`` or ``unknown``, from the magic bytes."""
    if data.startswith(PNG_SIGNATURE):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return "unknown"


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the first SOFn marker of a JPEG."""
    i = 2
    n = len(data)
    while i < n:
        if data[i] != 0xFF:
            raise ValueError(f"JPEG: expected a marker at offset {i}")
        while i < n and data[i] == 0xFF:  # fill bytes
            i += 1
        marker = data[i]
        i += 1
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # no length
            continue
        if marker == 0xD9:
            break
        (seg_len,) = struct.unpack(">H", data[i : i + 2])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 3 : i + 7])
            return width, height
        if marker == 0xDA:
            break  # start of scan before any SOF: malformed
        i += seg_len
    raise ValueError("JPEG: no SOF marker")


def _png_size(data: bytes) -> tuple[int, int]:
    if data[12:16] != b"IHDR":
        raise ValueError("PNG: first chunk is not IHDR")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def image_size(data: bytes) -> tuple[str, int, int]:
    """(format, width, height) of PNG, JPEG or GIF bytes; anything else raises ValueError."""
    fmt = image_format(data)
    if fmt == "png":
        return (fmt, *_png_size(data))
    if fmt == "jpeg":
        return (fmt, *_jpeg_size(data))
    if fmt == "gif":
        w, h = struct.unpack("<HH", data[6:10])
        return fmt, w, h
    raise ValueError(f"cannot read the size of {fmt} image data ({data[:16]!r})")


def png_decodes(data: bytes) -> bool:
    """The PNG's IDAT stream inflates to exactly the size its IHDR promises (8-bit RGB/RGBA)."""
    w, h = _png_size(data)
    depth, color = data[24], data[25]
    channels = {2: 3, 6: 4, 0: 1, 4: 2}[color]
    assert depth == 8
    i = 8
    idat = bytearray()
    while i < len(data):
        (length,) = struct.unpack(">I", data[i : i + 4])
        kind = data[i + 4 : i + 8]
        body = data[i + 8 : i + 8 + length]
        (crc,) = struct.unpack(">I", data[i + 8 + length : i + 12 + length])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            return False
        if kind == b"IDAT":
            idat += body
        i += 12 + length
    return len(zlib.decompress(bytes(idat))) == h * (1 + w * channels)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def downscale_note(src: tuple[int, int], dst: tuple[int, int]) -> str:
    """Mirror of ``texts::downscale_note`` in src/texts.rs (the fixed note after a downscaled
    image): same sizes, same text."""
    fx = src[0] / max(dst[0], 1)
    fy = src[1] / max(dst[1], 1)
    sx, sy = f"{fx:.4f}", f"{fy:.4f}"
    if sx == sy:
        factor = f"multiply coordinates read from it by {sx}"
    else:
        factor = f"multiply x coordinates read from it by {sx} and y coordinates by {sy}"
    return (
        f"[cachekeeper: image downscaled from {src[0]}x{src[1]} to {dst[0]}x{dst[1]}; {factor} "
        f"to map them back to the original]"
    )
