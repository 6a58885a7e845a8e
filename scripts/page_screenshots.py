"""Screenshots of a run's page (`masrl view`) for the docs: the evaluations and system views, the
training curves, and an episode tree with a group highlighted.

    python scripts/page_screenshots.py runs/router docs/img/view-router

writes <prefix>-evals.png, <prefix>-curves.png and <prefix>-tree.png. Needs Debian's chromium and
playwright (scripts/setup.sh installs both)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from masrl.view import write_page


def main(run: str, prefix: str) -> None:
    page_path = write_page([Path(run)], Path(run) / "view.html")
    out = Path(prefix)
    out.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.resolve().as_uri())
        page.wait_for_load_state("load")

        def between(top: str, bottom: str, name: str) -> None:
            y0 = page.locator(top).bounding_box()["y"]
            y1 = page.locator(bottom).bounding_box()["y"]
            page.screenshot(path=f"{out}-{name}.png", full_page=True,
                            clip={"x": 0, "y": y0 - 10, "width": 1400, "height": min(y1 - y0, 2600)})  # fmt: skip
            print(f"wrote {out}-{name}.png")

        between("h1", "#curves", "evals")
        between("#curves", "#trees", "curves")
        tree = page.locator(".step:not([hidden]) .tree").first
        tree.locator(".grp").first.click()  # highlight the first call's group
        for box in tree.locator("details.io").all()[:1]:
            box.evaluate("e => e.open = true")
        tree.screenshot(path=f"{out}-tree.png")
        print(f"wrote {out}-tree.png")
        browser.close()
    if errors:
        raise SystemExit(f"the page raised: {errors}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
