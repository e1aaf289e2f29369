"""The page at ``/`` of ``rcstat serve`` in headless Chromium, driven by Selenium: type the texts,
check with the keyboard (Ctrl+Enter), read back the verdict, the highlighted unsupported spans,
their weakest words, the evidence of each sentence and the attribution heatmap; each must equal
what ``/v1/ground`` and ``/v1/attribute`` answer for the same texts.

Skipped, with the reason, where Selenium, Chromium or chromedriver is missing (Debian's
``chromium`` and ``chromium-driver``; Selenium Manager cannot download here, so the driver is
the one on PATH or /usr/bin/chromedriver).
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._browser import find_chromium
from tests._serve_helpers import CONTEXT, QUESTION, RESPONSE, save_profile, serve_config, wait_ready

httpx = pytest.importorskip("httpx", reason="needs httpx and FastAPI (pip install 'rcstat[serve]')")
pytest.importorskip("fastapi", reason="needs FastAPI (pip install 'rcstat[serve]')")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _driver_path() -> str:
    found = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
    )
    if found is None:
        pytest.skip("no chromedriver (Debian: apt-get install chromium-driver)")
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium on PATH")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(_driver_path()))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def service(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service on the tiny model in a uvicorn thread, at a threshold that flags spans."""
    uvicorn = pytest.importorskip("uvicorn", reason="needs uvicorn (pip install 'rcstat[serve]')")

    from rcstat.serve.app import create_app

    profile = save_profile(tmp_path_factory.mktemp("profile"))
    config = serve_config(model_dir, profile)
    config.options = type(config.options)(profile=profile, top_k=5, threshold=0.99)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    app = create_app(config, log=lambda line: None)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive()
        time.sleep(0.05)
    with httpx.Client(base_url=url) as client:
        wait_ready(client)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(30)


def test_the_page_shows_what_the_api_answers(browser: Any, service: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    body = {"context": CONTEXT, "response": RESPONSE, "question": QUESTION}
    with httpx.Client(base_url=service, timeout=60) as client:
        doc = client.post("/v1/ground", json=body).json()
        att = client.post("/v1/attribute", json=body).json()
    assert doc["spans"], "the test needs unsupported spans"

    browser.get(service + "/")
    browser.find_element(By.ID, "context").send_keys(CONTEXT)
    browser.find_element(By.ID, "question").send_keys(QUESTION)
    response = browser.find_element(By.ID, "response")
    response.send_keys(RESPONSE)
    response.send_keys(Keys.CONTROL, Keys.ENTER)  # the keyboard checks
    WebDriverWait(browser, 60).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "done"
    )
    assert browser.find_element(By.ID, "error").text == ""

    def text(element: Any) -> str:
        return str(element.get_attribute("textContent"))

    verdict = browser.find_element(By.ID, "verdict")
    assert text(verdict) == doc["verdict"] == verdict.get_attribute("data-verdict")
    marks = browser.find_elements(By.CSS_SELECTOR, "#response-view mark.unsupported")
    assert [text(m) for m in marks] == [s["text"] for s in doc["spans"]]
    assert all(m.get_attribute("tabindex") == "0" for m in marks)
    assert text(browser.find_element(By.ID, "response-view")) == RESPONSE
    weakest = [
        s["weakest_word"]["text"]
        for s in doc["sentences"]
        if s["verdict"] != "supported" and s["weakest_word"]
    ]
    shown = browser.find_elements(By.CSS_SELECTOR, "#response-view b.weakest")
    assert "".join(text(b) for b in shown) == "".join(weakest) and weakest
    rows = browser.find_elements(By.CSS_SELECTOR, "#sentences tbody tr")
    assert [r.get_attribute("data-verdict") for r in rows] == [
        s["verdict"] for s in doc["sentences"]
    ]
    for row, sentence in zip(rows, doc["sentences"], strict=True):
        evidence = text(row.find_element(By.CSS_SELECTOR, "td.evidence"))
        if sentence["support"] is not None:
            assert evidence == sentence["support"]["text"]
    assert browser.find_element(By.ID, "attribution").is_displayed()
    heat = browser.find_elements(By.CSS_SELECTOR, "#heatmap tbody tr")
    assert len(heat) == len(att["units"])
    for row, unit in zip(heat, att["units"], strict=True):
        cells = row.find_elements(By.CSS_SELECTOR, "td.cell")
        assert len(cells) == len(att["spans"])
        best = [k for k, c in enumerate(cells) if "best" in str(c.get_attribute("class"))]
        assert best == ([] if unit["attributed"] is None else [unit["attributed"]])


def test_the_page_shows_the_refusal_of_a_bad_input(browser: Any, service: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(service + "/")
    browser.find_element(By.ID, "context").send_keys(CONTEXT)
    browser.find_element(By.ID, "response").send_keys("?!")
    browser.find_element(By.ID, "submit").send_keys(Keys.ENTER)
    WebDriverWait(browser, 60).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "done"
    )
    error = browser.find_element(By.ID, "error").text
    assert error.startswith("error: the response has no word")
    assert browser.find_element(By.ID, "result").is_displayed() is False
