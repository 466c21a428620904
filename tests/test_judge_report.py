"""The HTML audit report opened in a real headless Chromium (selenium + Debian's chromium / chromium-driver): it
renders, shows its embedded BEV images, starts with the largest DriveJudge vs EPDMS disagreement, and sorts on click.
Skipped when chromium or chromedriver is not installed (``.ci/run`` installs them)."""
import shutil

import numpy as np
import pytest

from jaxdrive.judge.bev import save_png
from jaxdrive.judge.dataset import Record
from jaxdrive.judge.gates import RULE_LABELS
from jaxdrive.judge.report import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")


def _records(root, n=5):
    rng = np.random.default_rng(0)
    (root / "images").mkdir()
    records, cols = [], {"id": [], "score": [], "epdms": [], "rationale": []}
    cols.update({f"p_{r}": [] for r in RULE_LABELS})
    for i in range(n):
        img = np.zeros((16, 16, 3), np.uint8)
        img[..., i % 3] = 200
        save_png(img, root / "images" / f"r{i}.png")
        records.append(Record(id=f"r{i}", scene="s.json", proposal=i, proposal_name=f"p{i}", label=i % 2,
                              split="test", image=f"images/r{i}.png", justification=f"why {i}",
                              subscores={"nc": 1.0, "lk": 0.0, "ec": None, "epdms": 0.1 * i}))
        cols["id"].append(f"r{i}")
        cols["epdms"].append(0.1 * i)
        cols["score"].append([0.9, 0.2, 0.45, 0.95, 0.4][i])  # |diff| = .9, .1, .25, .65, 0 -> r0, r3, r2, r1, r4
        cols["rationale"].append("Every rule applies.")
        for r in RULE_LABELS:
            cols[f"p_{r}"].append(float(rng.uniform()))
    return records, cols


def test_report_html_static(tmp_path):
    records, cols = _records(tmp_path)
    page = write_report(tmp_path / "r.html", tmp_path, records, cols).read_text()
    assert page.count("data:image/png;base64,") == 5
    assert "http://" not in page and "https://" not in page  # self-contained
    assert [page.index(f'data-id="r{i}"') for i in (0, 3, 2, 1, 4)] == sorted(
        page.index(f'data-id="r{i}"') for i in range(5))


@pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="needs chromium and chromedriver (apt-get install -y chromium "
                    "chromium-driver)")
def test_report_in_headless_chromium(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    records, cols = _records(tmp_path)
    path = write_report(tmp_path / "r.html", tmp_path, records, cols)
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=opts)
    try:
        driver.get(path.resolve().as_uri())
        rows = driver.find_elements(By.CSS_SELECTOR, "#judged tbody tr")
        assert len(rows) == 5
        assert [r.get_attribute("data-id") for r in rows] == ["r0", "r3", "r2", "r1", "r4"]
        images = driver.find_elements(By.CSS_SELECTOR, "img.bev")
        assert len(images) == 5
        for img in images:  # decoded and laid out
            assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) == 16
            assert img.size["width"] > 0
        headers = driver.find_elements(By.CSS_SELECTOR, "#judged thead th")
        score_col = [h.text for h in headers].index("DriveJudge")
        headers[score_col].click()  # descending by DriveJudge score
        order = [r.get_attribute("data-id") for r in driver.find_elements(By.CSS_SELECTOR, "#judged tbody tr")]
        assert order == ["r3", "r0", "r2", "r4", "r1"]
        headers[score_col].click()  # ascending
        order = [r.get_attribute("data-id") for r in driver.find_elements(By.CSS_SELECTOR, "#judged tbody tr")]
        assert order == ["r1", "r4", "r2", "r0", "r3"]
        assert "sorted-asc" in headers[score_col].get_attribute("class")
    finally:
        driver.quit()
