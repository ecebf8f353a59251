"""The web console (`/ui` of `ctxkeeper serve`) in a real browser: the distribution's headless
Chromium driven by Selenium. A tool-calling agent loop compacts through the gateway in front
of the mock upstream; the test then signs in, finds the session, checks the chart has one point
per request, opens a compaction and an archived tool output (byte for byte the original),
searches for a string that lives only in an archived output, sees a hostile tool output
rendered as text, watches a live update arrive, and checks another tenant's token sees none
of it. Screenshots of every page go to $CTXKEEPER_SCREENSHOTS (default
<target>/screenshots).

Chromium and chromedriver come from scripts/browser (apt-get, only when missing), which
scripts/test runs; without them the test skips loudly (fails under CI=true)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import openai
import pytest

from conftest import LISTENING, REPO, start_mock_upstream, start_process, target_dir
from gateway_support import TOOLS, WORDS, gateway_binary, start_gateway, write_config

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ALPHA_TOKEN = "tok-alpha-console-0001"
BETA_TOKEN = "tok-beta-console-0002"
SESSION = "console-demo"
STEPS = 56
# Lives only in the first tool output, which compaction archives.
MARKER = "quartzmarmot7731"
HOSTILE = '<script>window.__pwned = 1</script><img src="x" onerror="window.__pwned = 2">'


def screenshots_dir() -> Path:
    configured = os.environ.get("CTXKEEPER_SCREENSHOTS")
    path = Path(configured) if configured else target_dir() / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def browser_binaries() -> tuple[str, str]:
    """Chromium and chromedriver: from the environment scripts/test exports, else from
    scripts/browser (which installs them when missing)."""
    chromium = os.environ.get("CTXKEEPER_CHROMIUM")
    driver = os.environ.get("CTXKEEPER_CHROMEDRIVER")
    if chromium and driver:
        return chromium, driver
    found = subprocess.run(
        [str(REPO / "scripts" / "browser")], capture_output=True, text=True, check=False
    )
    values = dict(
        line.split("=", 1) for line in found.stdout.splitlines() if "=" in line
    )
    if found.returncode != 0 or not {"CTXKEEPER_CHROMIUM", "CTXKEEPER_CHROMEDRIVER"} <= set(values):
        message = f"headless Chromium unavailable (scripts/browser): {found.stderr.strip()[-400:]}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return values["CTXKEEPER_CHROMIUM"], values["CTXKEEPER_CHROMEDRIVER"]


@pytest.fixture
def browser(tmp_path):
    chromium, driver_path = browser_binaries()
    options = Options()
    options.binary_location = chromium
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1280,1100",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def tool_output(step: int) -> str:
    """~1 KB of deterministic text per step; the first carries the marker, the second a
    hostile payload."""
    words, i = [], step
    while sum(len(w) + 1 for w in words) < 900 + step * 7:
        words.append(WORDS[i % len(WORDS)])
        i = i * 31 + 7
    text = f"step {step}: " + " ".join(words)
    if step == 0:
        text += f"\n  indented line with the marker {MARKER}\n\ttab and trailing space \n"
    if step == 1:
        text += "\n" + HOSTILE + "\n"
    return text


class Agent:
    """A tool-calling loop against the gateway, as tenant alpha, remembering every tool
    output by call id."""

    def __init__(self, gateway_url: str):
        self.client = openai.OpenAI(
            base_url=f"{gateway_url}/v1",
            api_key="sk-console-agent",
            max_retries=0,
            default_headers={"x-ctxkeeper-tenant-token": ALPHA_TOKEN, "x-ctxkeeper-session": SESSION},
        )
        self.messages = [
            {"role": "system", "content": "You are a coding agent. Use read_file to inspect files."},
            {"role": "user", "content": "Find where invoice totals are rounded and fix it."},
        ]
        self.outputs: dict[str, str] = {}
        self.steps = 0

    def step(self) -> None:
        reply = self.client.chat.completions.create(
            model="mock-8k", messages=self.messages, tools=TOOLS, max_tokens=256
        )
        message = reply.choices[0].message
        assert message.tool_calls, "the mock always calls a tool"
        self.messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            output = tool_output(self.steps)
            self.outputs[call.id] = output
            self.messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        self.steps += 1


def sign_in(driver, url: str, token: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{url}/ui/")
    box = driver.find_element(By.ID, "token")
    box.send_keys(token)
    box.submit()
    WebDriverWait(driver, 10).until(lambda d: "/sessions" in d.current_url)


def text_of(element) -> str:
    """The element's exact text (textContent: no whitespace normalisation)."""
    return element.get_attribute("textContent")


def test_console_in_a_real_browser(tmp_path, browser):
    shots = screenshots_dir()
    mock = start_mock_upstream(window=8192)
    config = write_config(
        tmp_path / "ctxkeeper.toml",
        '[models."mock-8k"]\ncontext_window = 8192\nmax_output = 1024\ntokenizer = "o200k_base"\n',
    )
    gateway = start_gateway(
        mock.url,
        tmp_path,
        "--config",
        str(config),
        "--tenant-token",
        f"alpha={ALPHA_TOKEN}",
        "--tenant-token",
        f"beta={BETA_TOKEN}",
    )
    try:
        agent = Agent(gateway.url)
        for _ in range(STEPS):
            agent.step()
        url = gateway.url

        # Every answer carries the strict policy; nothing is served without credentials.
        answer = httpx.get(f"{url}/ui/t/alpha/sessions", timeout=10)
        assert answer.status_code == 401
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert answer.headers["x-content-type-options"] == "nosniff"

        # The login page, then the sessions of tenant alpha.
        browser.get(f"{url}/ui/")
        browser.save_screenshot(str(shots / "console-login.png"))
        sign_in(browser, url, ALPHA_TOKEN)
        assert browser.current_url.endswith("/ui/t/alpha/sessions")
        link = browser.find_element(By.LINK_TEXT, SESSION)
        row = link.find_element(By.XPATH, "./ancestor::tr")
        assert "mock-8k" in row.text
        browser.save_screenshot(str(shots / "console-sessions.png"))
        assert ALPHA_TOKEN not in browser.page_source, "no token is ever rendered"

        # The session page: one chart point per request, compaction markers.
        link.click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "chart"))
        points = browser.find_elements(By.CSS_SELECTOR, "#chart circle.point")
        assert len(points) == STEPS, f"one point per request, got {len(points)}"
        assert browser.find_element(By.ID, "chart").get_attribute("data-points") == str(STEPS)
        compactions = browser.find_elements(By.CSS_SELECTOR, "details.compaction")
        assert compactions, "the loop compacted"
        assert browser.find_elements(By.CSS_SELECTOR, "#chart line.compaction")
        WebDriverWait(browser, 10).until(
            lambda d: d.find_element(By.ID, "live-status").text == "live"
        )
        browser.save_screenshot(str(shots / "console-session.png"))

        # Live: one more request shows up on the open page without a reload.
        agent.step()
        WebDriverWait(browser, 10).until(
            lambda d: any("budget_used" in li.text for li in d.find_elements(By.CSS_SELECTOR, "#live li"))
        )

        # Open compactions until one lists an archived tool output the agent sent.
        target = None
        for details in compactions:
            details.find_element(By.TAG_NAME, "summary").click()
            for anchor in details.find_elements(By.CSS_SELECTOR, "a.archive-link"):
                name = anchor.text
                for call_id, output in agent.outputs.items():
                    if name.endswith(f"/tool_result-{call_id}.txt"):
                        target = (anchor, output)
                        break
                if target:
                    break
            if target:
                break
        assert target, "a compaction archived a tool output and links it"
        browser.execute_script("arguments[0].scrollIntoView()", details)
        browser.save_screenshot(str(shots / "console-compaction.png"))
        anchor, original = target
        anchor.click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "archived"))
        assert text_of(browser.find_element(By.ID, "archived")) == original, "byte for byte"
        browser.save_screenshot(str(shots / "console-archived.png"))

        # Search: the marker lives only in the first tool output, long archived.
        browser.back()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "q"))
        box = browser.find_element(By.ID, "q")
        box.send_keys(MARKER)
        box.submit()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "archive-hits"))
        hits = browser.find_elements(By.CSS_SELECTOR, "#archive-hits li.hit")
        assert hits and any(MARKER in hit.text for hit in hits)
        browser.save_screenshot(str(shots / "console-search.png"))
        hits[0].find_element(By.CSS_SELECTOR, "a.archive-link").click()
        WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "archived"))
        assert MARKER in text_of(browser.find_element(By.ID, "archived"))

        # A hostile tool output renders as text, inert, wherever it shows.
        for query in ("__pwned",):
            browser.get(f"{url}/ui/t/alpha/sessions/{SESSION}/search?q={query}")
            hits = browser.find_elements(By.CSS_SELECTOR, "#archive-hits li.hit, #log-hits li.hit")
            assert any("<script>window.__pwned = 1</script>" in hit.text for hit in hits)
            hostile = next(
                a for a in browser.find_elements(By.CSS_SELECTOR, "#archive-hits a.archive-link")
            )
            hostile.click()
            WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "archived"))
            assert HOSTILE in text_of(browser.find_element(By.ID, "archived"))
            assert not browser.find_elements(By.CSS_SELECTOR, "main script, main img")
            assert browser.execute_script("return window.__pwned === undefined")

        # Totals: the tenant's figures.
        browser.get(f"{url}/ui/t/alpha/totals")
        tenant_totals = browser.find_element(By.ID, "tenant-totals").text
        assert "Billed input saved" in tenant_totals and "Compactions" in tenant_totals
        assert not browser.find_elements(By.ID, "process-totals"), "a tenant sees only its own"
        browser.save_screenshot(str(shots / "console-totals.png"))

        # Another tenant's token sees none of it.
        sign_in(browser, url, BETA_TOKEN)
        assert browser.current_url.endswith("/ui/t/beta/sessions")
        assert not browser.find_elements(By.LINK_TEXT, SESSION)
        assert "0 sessions" in browser.find_element(By.CSS_SELECTOR, "p.count").text
        for path in (
            f"/ui/t/alpha/sessions",
            f"/ui/t/alpha/sessions/{SESSION}",
            f"/ui/t/alpha/sessions/{SESSION}/search?q={MARKER}",
            f"/ui/t/alpha/totals",
        ):
            browser.get(f"{url}{path}")
            assert "403" in browser.find_element(By.TAG_NAME, "h1").text, path
            assert MARKER not in browser.page_source and SESSION not in browser.page_source.split("<main>")[-1]
        # The same tenant's session id in beta's own space is simply not there.
        browser.get(f"{url}/ui/t/beta/sessions/{SESSION}")
        assert "404" in browser.find_element(By.TAG_NAME, "h1").text
    finally:
        assert gateway.stop() == 0, gateway.logs()
        mock.process.stop()
    assert ALPHA_TOKEN not in gateway.logs() and BETA_TOKEN not in gateway.logs()

    # `ctxkeeper ui` serves the same pages over the store and archive the gateway left.
    console = start_process(
        [
            gateway_binary(),
            "ui",
            "--store",
            f"sqlite://{tmp_path / 'sessions.db'}",
            "--workspace",
            str(tmp_path / "workspace"),
            "--listen",
            "127.0.0.1:0",
            "--tenant-token",
            f"alpha={ALPHA_TOKEN}",
            "--tenant-token",
            f"beta={BETA_TOKEN}",
        ],
        LISTENING,
    )
    try:
        page = httpx.get(
            f"{console.url}/ui/t/alpha/sessions/{SESSION}",
            headers={"authorization": f"Bearer {ALPHA_TOKEN}"},
            timeout=10,
        )
        assert page.status_code == 200
        assert page.text.count('<circle class="point"') == STEPS + 1
        assert "tool_result-" in page.text
        other = httpx.get(
            f"{console.url}/ui/t/alpha/sessions/{SESSION}",
            headers={"authorization": f"Bearer {BETA_TOKEN}"},
            timeout=10,
        )
        assert other.status_code == 403 and MARKER not in other.text
    finally:
        assert console.stop() == 0, console.logs()
    # One screenshot for the README, when asked to refresh it.
    if os.environ.get("CTXKEEPER_UPDATE_DOCS_SCREENSHOT"):
        shutil.copy(shots / "console-session.png", REPO / "docs" / "console-session.png")
