"""The report in a real browser: headless Chromium loads it without console errors and draws its plots."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path

import pytest
from trajectory_data import populated_store

from kernelpro.report.html import render, write_report

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium package is not installed "
                                                          "(apt-get install chromium)")


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("browser")
    store, ids = populated_store(tmp / "runs.db")
    return write_report(store, [ids["bench_a"], ids["bench_b"], ids["optimize"][0]], tmp / "report.html")


def test_loads_without_console_errors(page: Path, tmp_path: Path):
    r = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    # The page's own script ran to the end (it counts the SVGs it finds) and caught no JS error.
    m = re.search(r'data-kp-ready="(\d+)"', dom)
    assert m and int(m.group(1)) >= 6, dom[:500]
    assert re.search(r'<pre id="kp-errors"></pre>', dom)
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert not console, console


def test_screenshot_shows_the_plots(page: Path, tmp_path: Path):
    shot = tmp_path / "shot.png"
    r = chromium(tmp_path, "--hide-scrollbars", "--window-size=1280,1400", f"--screenshot={shot}", page.as_uri())
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    width, height, pixels = read_png(shot.read_bytes())
    assert (width, height) == (1280, 1400)
    counts = Counter(pixels)
    assert len(counts) > 200, len(counts)  # text, lines, bars: not a blank page
    # The plot palette is on screen: fast_p curves and histogram bars in blue and orange.
    near = lambda rgb: sum(n for c, n in counts.items() if max(abs(a - b) for a, b in zip(c, rgb, strict=True)) < 12)  # noqa: E731
    assert near((0x1F, 0x77, 0xB4)) > 300 and near((0xFF, 0x7F, 0x0E)) > 300


def test_error_hook_catches_a_broken_page(tmp_path: Path):
    """Negative control: the same hook reports a script error, so a clean run above means something."""
    bad = tmp_path / "bad.html"
    html = render([], "")
    bad.write_text(html.replace("</body>", "<script>undefinedFunction();</script></body>"))
    r = chromium(tmp_path, "--dump-dom", bad.as_uri())
    assert "undefinedFunction is not defined" in r.stdout
    assert any("undefinedFunction" in ln for ln in r.stderr.splitlines())


def read_png(data: bytes) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) with zlib alone: (width, height, pixels)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n = struct.unpack(">I", data[pos:pos + 4])[0]
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), (depth, ctype)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), width * bpp
    prev, pixels, i = bytearray(stride), [], 0
    for _ in range(height):
        ftype, row = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = row[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if ftype == 1:
                row[x] = (row[x] + a) & 255
            elif ftype == 2:
                row[x] = (row[x] + b) & 255
            elif ftype == 3:
                row[x] = (row[x] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[x] = (row[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        pixels += [tuple(row[x:x + 3]) for x in range(0, stride, bpp)]
        prev = row
    return width, height, pixels
