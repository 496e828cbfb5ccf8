"""Open pages in a real headless Chromium (Debian's `chromium`, driven by Playwright) and check what a reader sees:
every image decoded (naturalWidth > 0) and every local link resolving (files exist and open, #anchors exist).

Playwright drives the system browser through `executable_path`; no browser is downloaded.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

BROWSERS = ("chromium", "chromium-browser")
LAUNCH_TIMEOUT_MS = 60_000
PAGE_TIMEOUT_MS = 30_000


def chromium_path() -> str | None:
    for name in BROWSERS:
        if found := shutil.which(name):
            return found
    return None


@dataclass
class PageCheck:
    """What one page showed: its images that did not load and its local links that do not resolve."""

    url: str
    images: int = 0
    links: int = 0
    broken_images: list[str] = field(default_factory=list)
    broken_links: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.broken_images and not self.broken_links


IMAGES_JS = """() => Array.from(document.images).map(i => [i.getAttribute('src').slice(0, 80), i.complete,
                                                        i.naturalWidth])"""
LINKS_JS = "() => Array.from(document.querySelectorAll('a[href]')).map(a => [a.getAttribute('href'), a.href])"


def check_pages(paths: list[Path]) -> list[PageCheck]:
    """Load each HTML file, wait for its images, then open every local link it has (files once each)."""
    from playwright.sync_api import Error, sync_playwright

    executable = chromium_path()
    if executable is None:
        raise RuntimeError("chromium is not installed (apt-get install chromium)")
    results = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, timeout=LAUNCH_TIMEOUT_MS,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            page, probe = browser.new_page(), browser.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            probe.set_default_timeout(PAGE_TIMEOUT_MS)
            opened: dict[str, str | None] = {}
            for path in paths:
                check = PageCheck(path.resolve().as_uri())
                page.goto(check.url, wait_until="load")
                images = page.evaluate(IMAGES_JS)
                check.images = len(images)
                check.broken_images = [src for src, complete, width in images if not complete or width <= 0]
                ids = set(page.evaluate("() => Array.from(document.querySelectorAll('[id]')).map(e => e.id)"))
                links = page.evaluate(LINKS_JS)
                check.links = len(links)
                for raw, absolute in links:
                    target = urlsplit(absolute)
                    if target.scheme != "file":
                        check.broken_links.append(f"{raw} (not a relative link)")
                        continue
                    if raw.startswith("#"):
                        if unquote(raw[1:]) not in ids:
                            check.broken_links.append(f"{raw} (no such id)")
                        continue
                    file_url = absolute.split("#", 1)[0]
                    if file_url not in opened:
                        opened[file_url] = _open(probe, file_url, Error)
                    if opened[file_url]:
                        check.broken_links.append(f"{raw}: {opened[file_url]}")
                results.append(check)
        finally:
            browser.close()
    return results


def _open(page, url: str, error: type[Exception]) -> str | None:
    """None when the browser opens the link (a folder opens as its listing), else why not."""
    if not Path(unquote(urlsplit(url).path)).exists():
        return "no such file"
    try:
        page.goto(url, wait_until="commit")
    except error as exc:
        if "Download is starting" in str(exc) or "net::ERR_ABORTED" in str(exc):
            return None  # a file the browser saves rather than shows (.csv, .parquet): it resolved
        return str(exc).splitlines()[0]
    return None
