"""Screenshot a topic-replay HTML page in headless Chromium: ``tools/screenshot_page.py PAGE PNG``.

Opens PAGE (a file written by ``topic-replay report --html`` or the sweep page) from ``file://``
in Debian's chromium (``/usr/bin/chromium``, driven by playwright; playwright's own browser
download is not used), waits until every Plotly figure has rendered and saves the top of the page
(``--width`` × ``--height`` CSS pixels, or ``--full-page``) to PNG. ``--anchor ID`` scrolls to
that element first; ``--hover CSS`` then rests the mouse on the first element matching the CSS
selector (e.g. a Plotly marker) so the shot shows its hover label. Used for ``docs/img/*.png``.

Exit 2 with one sentence when PAGE is missing or chromium is not installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
"""How the tests and this tool launch chromium (no network of its own, no sandbox as root)."""

RENDERED_JS = """() => {
  const plots = document.querySelectorAll('.plotly-graph-div');
  return plots.length > 0 && Array.from(plots).every(p => p.querySelector('.main-svg'));
}"""
"""True once every Plotly div of the page holds its drawn SVG."""


def screenshot(page_path: Path, png: Path, width: int = 1300, height: int = 1600,
               full_page: bool = False, anchor: str | None = None,
               hover: str | None = None) -> None:
    """Save a PNG of ``page_path`` rendered by chromium (viewport ``width`` × ``height`` CSS px,
    device scale 1); ``anchor``: scroll to ``#anchor`` first; ``hover``: a CSS selector whose
    first element the mouse rests on (Plotly draws its hover label). Raises ``TimeoutError``
    (from playwright) when the figures or the hover label do not render within 60 s."""
    # the dev extra's playwright, needed only to take a screenshot
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(page_path.resolve().as_uri())
            page.wait_for_function(RENDERED_JS, timeout=60_000)
            if anchor:
                page.evaluate("a => document.getElementById(a).scrollIntoView()", anchor)
            if hover:
                box = page.locator(hover).first.bounding_box()
                if box is None:
                    raise ValueError(f"--hover {hover}: no visible element matches")
                page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
                page.wait_for_selector(".hoverlayer .hovertext", timeout=60_000)
            png.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(png), full_page=full_page)
        finally:
            browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="the HTML page")
    parser.add_argument("png", type=Path, help="the PNG to write")
    parser.add_argument("--width", type=int, default=1300)
    parser.add_argument("--height", type=int, default=1600)
    parser.add_argument("--full-page", action="store_true")
    parser.add_argument("--anchor", default=None, help="scroll to this element id first")
    parser.add_argument("--hover", default=None, metavar="CSS",
                        help="rest the mouse on the first element matching this selector")
    args = parser.parse_args(argv)
    if not args.page.is_file():
        print(f"screenshot_page: {args.page} is not a file", file=sys.stderr)
        return 2
    if not Path(CHROMIUM).exists():
        print(f"screenshot_page: no {CHROMIUM} (apt-get install chromium)", file=sys.stderr)
        return 2
    screenshot(args.page, args.png, args.width, args.height, args.full_page, args.anchor,
               args.hover)
    print(f"screenshot_page: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
