"""GET /watch in a real headless browser: Debian's chromium, driven by selenium through
/usr/bin/chromedriver (no browser or driver download), against the real gateway.

MURGW_SCREENSHOT=PATH saves a screenshot of the page with a finished task (README's picture).
"""

from __future__ import annotations

import base64
import hashlib
import os
import signal

import pytest

from helpers.browser import chromium, require_browser, wait
from helpers.gateway_harness import running_gateway, wait_ready
from helpers.http_client import Http, rpc, user_message
from helpers.jwt_tokens import KeyPair, jwt_table
from helpers.sse_reading import SSEStream, is_terminal_event, item, task_id_of
from selenium.webdriver.common.by import By

pytestmark = pytest.mark.env

HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
TOKEN = "page-secret"


@pytest.fixture(autouse=True)
def browser_installed():
    """Skipped where Debian's chromium or chromium-driver is absent; a failure in CI, which installs them."""
    require_browser()


@pytest.fixture
def browser():
    with chromium() as driver:
        yield driver


def task_block(driver, task_id: str):
    found = driver.find_elements(By.CSS_SELECTOR, f'section.task[data-task-id="{task_id}"]')
    return found[0] if found else None


def task_state(driver, task_id: str) -> str | None:
    block = task_block(driver, task_id)
    return block.get_attribute("data-state") if block is not None else None


def shown_text(block) -> str:
    return "".join(run.get_attribute("textContent") for run in block.find_elements(By.CSS_SELECTOR, ".log .text"))


def open_page(driver, port: int, scheme: str = "http") -> None:
    driver.get(f"{scheme}://127.0.0.1:{port}/watch")
    wait(driver, lambda: driver.find_element(By.ID, "connection").get_attribute("data-state") == "connected")


def streamed_text(port: int, task_id: str, token: str | None = None) -> str:
    """The task's text frames, in order, as a watch stream replays them."""
    with SSEStream(port, "murmur.WatchSession", {}, last_event_id="0", token=token) as stream:
        seen = stream.read_until(lambda e: task_id_of(e) == task_id and is_terminal_event(e))
    frames = [item(e).frame for e in seen if task_id_of(e) == task_id and item(e).frame]
    return "".join(f["text"] for f in frames if f["frame"] == "text")


def send(port: int, text: str, **extra) -> str:
    status, _, body = rpc(port, "SendMessage", user_message(text, **extra))
    assert status == 200, body
    return body["result"]["task"]["id"]


def test_task_appears_streams_in_order_and_completes(browser, tmp_path):
    with running_gateway(workers=1, tmp_path=tmp_path) as gw:
        open_page(browser, gw.port)
        task_id = send(gw.port, "hello")
        wait(browser, lambda: task_state(browser, task_id) == "completed")
        block = task_block(browser, task_id)
        assert shown_text(block) == streamed_text(gw.port, task_id)
        log = [e.tag_name for e in block.find_elements(By.CSS_SELECTOR, ".log > *")]
        assert log == ["pre", "details", "pre"]  # turn 1's text, the tool's artifact, turn 2's text
        artifacts = block.find_elements(By.CSS_SELECTOR, "details.artifact")
        assert artifacts and artifacts[0].get_attribute("open") is None  # collapsed
        assert "[artifact] bash exit 0" in artifacts[0].find_element(By.TAG_NAME, "summary").text
        assert block.find_element(By.CSS_SELECTOR, ".response").is_displayed()
        assert block.find_element(By.CSS_SELECTOR, ".response").text.strip()
        if os.environ.get("MURGW_SCREENSHOT"):
            browser.save_screenshot(os.environ["MURGW_SCREENSHOT"])
        gw.stop()  # a stopped gateway: the page says so and offers to reconnect
        wait(browser, lambda: browser.find_element(By.ID, "banner").is_displayed())
        assert "connection lost after event id" in browser.find_element(By.ID, "banner-text").text
        assert browser.find_element(By.ID, "reconnect").is_displayed()


def test_hostile_text_is_shown_and_never_runs(browser, tmp_path):
    """[claim: watch-page-text]"""
    with running_gateway(workers=1, tmp_path=tmp_path) as gw:
        open_page(browser, gw.port)
        task_id = send(gw.port, "/scenario input prompt=Which?")
        wait(browser, lambda: task_state(browser, task_id) == "input-required")
        send(gw.port, HOSTILE, taskId=task_id)  # the response echoes the reply's text
        wait(browser, lambda: task_state(browser, task_id) == "completed")
        block = task_block(browser, task_id)
        assert HOSTILE in block.find_element(By.CSS_SELECTOR, ".response").get_attribute("textContent")
        assert block.find_elements(By.CSS_SELECTOR, "script, img") == []
        assert browser.execute_script("return window.pwned === undefined") is True


def test_reconnect_resumes_after_the_last_id(browser, tmp_path):
    with running_gateway(workers=1, tmp_path=tmp_path) as gw:
        open_page(browser, gw.port)
        first = send(gw.port, "hello")
        wait(browser, lambda: task_state(browser, first) == "completed")
        os.kill(gw.worker_pids()[0], signal.SIGKILL)  # the stream's worker dies; the supervisor replaces it
        wait(browser, lambda: browser.find_element(By.ID, "banner").is_displayed())
        assert "connection lost after event id" in browser.find_element(By.ID, "banner-text").text
        wait_ready(gw.port)
        browser.find_element(By.ID, "reconnect").click()
        wait(browser, lambda: browser.find_element(By.ID, "connection").get_attribute("data-state") == "connected")
        second = send(gw.port, "again")
        wait(browser, lambda: task_state(browser, second) == "completed")
        for task_id in (first, second):  # resumed after the last id: nothing shown twice
            assert shown_text(task_block(browser, task_id)) == streamed_text(gw.port, task_id)
        assert len(browser.find_elements(By.CSS_SELECTOR, "section.task")) == 2
        rpc(gw.port, "murmur.StopSession")
        wait(browser, lambda: browser.find_element(By.ID, "banner-text").text == "capsule closed")


def test_door_with_authentication_asks_for_a_token_kept_in_memory(browser, tmp_path):
    """[claim: watch-page-token]"""
    config = tmp_path / "door.toml"
    config.write_text('[[network.authentication.tokens]]\nname = "ops"\n'
                      f'sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\nscopes = ["*"]\n')
    with running_gateway("--config", str(config), workers=1, tmp_path=tmp_path) as gw:
        browser.get(f"http://127.0.0.1:{gw.port}/watch")
        wait(browser, lambda: browser.find_element(By.ID, "auth").is_displayed())
        field = browser.find_element(By.ID, "token")
        field.send_keys("wrong")
        browser.find_element(By.CSS_SELECTOR, "#auth button").click()
        wait(browser, lambda: browser.find_element(By.ID, "auth-error").text
             == "refused: the bearer token is not valid for this door")  # the problem's detail
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "#auth button").click()
        wait(browser, lambda: browser.find_element(By.ID, "connection").get_attribute("data-state") == "connected")
        status, _, body = rpc(gw.port, "SendMessage", user_message("hello"), token=TOKEN)
        task_id = body["result"]["task"]["id"]
        wait(browser, lambda: task_state(browser, task_id) == "completed")
        assert browser.find_element(By.ID, "token").get_attribute("value") == ""
        assert browser.execute_script("return localStorage.length + sessionStorage.length") == 0
        assert browser.execute_script("return document.cookie") == ""


def test_an_expired_jwt_is_said_and_a_new_one_resumes_the_stream(browser, tmp_path):
    """The stream of a JWT ends at its `exp`; the page says the token expired and asks for a
    new one (not "connection lost"), which resumes after the last id read; a JWT already
    expired is told the same way at connect."""
    keys = KeyPair()
    (tmp_path / "jwt.pem").write_bytes(keys.public_pem)
    (tmp_path / "door.toml").write_text(jwt_table(tmp_path / "jwt.pem"))
    expired = "the token expired; enter a new one to resume"
    with running_gateway("--config", str(tmp_path / "door.toml"), workers=1, tmp_path=tmp_path) as gw:
        browser.get(f"http://127.0.0.1:{gw.port}/watch")
        wait(browser, lambda: browser.find_element(By.ID, "auth").is_displayed())
        browser.find_element(By.ID, "token").send_keys(keys.mint(expires_in=-120))
        browser.find_element(By.CSS_SELECTOR, "#auth button").click()
        wait(browser, lambda: browser.find_element(By.ID, "auth-error").text == expired)
        browser.find_element(By.ID, "token").send_keys(keys.mint(scope="*", expires_in=8))
        browser.find_element(By.CSS_SELECTOR, "#auth button").click()
        wait(browser, lambda: browser.find_element(By.ID, "connection").get_attribute("data-state") == "connected")
        first = send_with(gw.port, "hello", keys)
        wait(browser, lambda: task_state(browser, first) == "completed")
        wait(browser, lambda: browser.find_element(By.ID, "auth").is_displayed()
             and browser.find_element(By.ID, "auth-error").text == expired)
        assert not browser.find_element(By.ID, "banner").is_displayed()
        second = send_with(gw.port, "again", keys)
        browser.find_element(By.ID, "token").send_keys(keys.mint(scope="*"))
        browser.find_element(By.CSS_SELECTOR, "#auth button").click()
        wait(browser, lambda: task_state(browser, second) == "completed")
        for task_id in (first, second):  # resumed after the last id: nothing lost, nothing twice
            assert shown_text(task_block(browser, task_id)) == streamed_text(gw.port, task_id, keys.mint())


def send_with(port: int, text: str, keys: KeyPair) -> str:
    status, _, body = rpc(port, "SendMessage", user_message(text), token=keys.mint(scope="*"))
    assert status == 200, body
    return body["result"]["task"]["id"]


def test_page_headers_and_watch_page_off(tmp_path):
    """[claim: watch-page-csp]"""
    with running_gateway(workers=1, tmp_path=tmp_path) as gw:
        for path, media in (("/watch", "text/html"), ("/watch/app.js", "text/javascript"),
                            ("/watch/app.css", "text/css")):
            status, headers, body = Http(gw.port).request("GET", path)
            assert status == 200 and headers["content-type"].startswith(media) and body
            csp = headers["content-security-policy"]
            assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
        assert b"<script>" not in Http(gw.port).request("GET", "/watch")[2]  # no inline script
    with running_gateway("--watch-page", "off", workers=1, tmp_path=tmp_path) as gw:
        assert Http(gw.port).request("GET", "/watch")[0] == 404
        assert Http(gw.port).request("GET", "/watch/app.js")[0] == 404


def test_watch_page_option_from_every_source(tmp_path):
    from gateway.config import options as config
    from gateway.config import resolve as config_resolve

    toml = tmp_path / "page.toml"
    toml.write_text("watch-page = false\n")
    assert config_resolve.load([], {}).watch_page is True
    assert config_resolve.load(["--config", str(toml)], {}).watch_page is False
    assert config_resolve.load([], {"MUR_GATEWAY_WATCH_PAGE": "off"}).watch_page is False
    assert config_resolve.load(["--watch-page", "on"], {"MUR_GATEWAY_WATCH_PAGE": "off"}).watch_page is True
    with pytest.raises(config.ConfigError, match="--watch-page: 'maybe' is not on or off"):
        config_resolve.load(["--watch-page", "maybe"], {})


def test_page_over_https_and_http2(tmp_path):
    """Chromium trusts exactly the throwaway certificate's key (an SPKI pin, so it still
    verifies), negotiates h2 for the page, and its streaming fetch (same origin, so the same
    HTTP/2 connection) shows the task to the end."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    from helpers.tls_support import Certificates

    certs = Certificates(tmp_path)
    with open(certs.certfile, "rb") as fh:
        spki = x509.load_pem_x509_certificate(fh.read()).public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    pin = base64.b64encode(hashlib.sha256(spki).digest()).decode()
    with running_gateway(*certs.args, tls=certs.client_context(), workers=1, tmp_path=tmp_path) as gw, \
            chromium(f"--ignore-certificate-errors-spki-list={pin}") as driver:
        open_page(driver, gw.port, "https")
        assert driver.execute_script(
            "return performance.getEntriesByType('navigation')[0].nextHopProtocol") == "h2"
        task_id = send_https(gw.port, certs, "hello")
        wait(driver, lambda: task_state(driver, task_id) == "completed")


def send_https(port: int, certs, text: str) -> str:
    import httpx

    with httpx.Client(verify=certs.client_context()) as client:
        return client.post(f"https://127.0.0.1:{port}/", headers={"A2A-Version": "1.0"}, json={
            "jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": user_message(text)}).json()[
            "result"]["task"]["id"]
