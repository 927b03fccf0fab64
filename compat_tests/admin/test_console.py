"""The web console in a real browser: Debian's chromium, headless, driven through chromium-driver
with selenium. Logs in, creates a tenant and a namespace, watches a message produced over Kafka
appear in the message browser, sees the connection and the rates, and grants a permission. Screenshots of every step
go to the test's tmp_path."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
DEADLINE_S = 30.0

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (make test installs them)")


@pytest.fixture
def browser(tmp_path: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER, log_output=str(tmp_path / "chromedriver.log")),
                              options=options)
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


class Steps:
    """Screenshots named in order, and waits that poll with a deadline."""

    def __init__(self, driver, directory: Path) -> None:
        self.driver = driver
        self.directory = directory
        self.count = 0

    def shot(self, name: str) -> None:
        self.count += 1
        self.driver.save_screenshot(str(self.directory / f"console-{self.count:02d}-{name}.png"))

    def wait_for(self, condition, what: str):
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                result = condition()
            except Exception:   # the element is not there yet, or was just re-rendered
                result = None
            if result:
                return result
            time.sleep(0.1)
        self.shot("timeout")
        raise AssertionError(f"timed out waiting for {what}")

    def text_of(self, css: str) -> str:
        from selenium.webdriver.common.by import By
        return self.driver.find_element(By.CSS_SELECTOR, css).text


def test_log_in_create_a_namespace_and_watch_a_message_arrive(admin_gateway, api, browser, tmp_path):
    from kafka import KafkaProducer
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    steps = Steps(browser, tmp_path)
    find = browser.find_element
    browser.get(admin_gateway.admin_url + "/")
    steps.wait_for(lambda: find(By.ID, "login").is_displayed(), "the login form")
    steps.shot("login")

    find(By.ID, "login-user").send_keys("root")
    find(By.ID, "login-password").send_keys("wrong")
    find(By.ID, "login-submit").click()
    steps.wait_for(lambda: "refused" in steps.text_of("#login-error"), "the refusal")
    find(By.ID, "login-password").clear()
    find(By.ID, "login-password").send_keys("root-secret")
    find(By.ID, "login-submit").click()
    steps.wait_for(lambda: find(By.ID, "overview").is_displayed(), "the overview")
    steps.wait_for(lambda: int(steps.text_of("#card-tenants .value")) >= 1, "the tenant count")
    assert steps.text_of("#who") == "root"
    steps.shot("overview")

    tenant, namespace = f"web-{uuid.uuid4().hex[:6]}", "shop"
    find(By.LINK_TEXT, "Tenants").click()
    steps.wait_for(lambda: find(By.ID, "tenant-form"), "the tenants page")
    find(By.ID, "tenant-name").send_keys(tenant)
    find(By.ID, "tenant-create").click()
    steps.wait_for(lambda: tenant in steps.text_of("#tenants"), "the new tenant in the list")
    Select(find(By.ID, "ns-tenant")).select_by_value(tenant)
    find(By.ID, "ns-name").send_keys(namespace)
    steps.shot("create-namespace")
    find(By.ID, "ns-create").click()
    steps.wait_for(lambda: steps.text_of("#namespace-title") == f"Namespace {tenant}/{namespace}", "the namespace page")
    assert api.get(f"/tenants/{tenant}/namespaces").json() == [namespace]
    steps.shot("namespace")

    api.put("/users/writer", json={"password": "w", "tenant": tenant, "namespace": namespace}).raise_for_status()
    producer = KafkaProducer(bootstrap_servers="%s:%d" % admin_gateway.kafka, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="writer", sasl_plain_password="w",
                             client_id="web-shop")
    producer.send("orders", key=b"o-1", value=b"first order").get(timeout=20)
    # The namespace page refreshes itself: the topic shows up without a reload.
    link = steps.wait_for(lambda: find(By.LINK_TEXT, "orders"), "the topic on the namespace page")
    steps.shot("topic-appeared")
    link.click()
    steps.wait_for(lambda: "first order" in steps.text_of("#messages"), "the first message")
    steps.shot("first-message")
    producer.send("orders", key=b"o-2", value=b"second order").get(timeout=20)
    steps.wait_for(lambda: "second order" in steps.text_of("#messages"), "the second message, without a reload")
    assert "o-2" in steps.text_of("#messages") and "kafka" in steps.text_of("#messages")
    steps.shot("second-message")

    find(By.LINK_TEXT, "Connections").click()
    steps.wait_for(lambda: "web-shop" in steps.text_of("#connections"), "the producer's connection")
    steps.shot("connections")
    find(By.LINK_TEXT, "Overview").click()
    steps.wait_for(lambda: f"{tenant}/{namespace}" in steps.text_of("#rates"), "the namespace's rates")
    steps.shot("rates")

    find(By.LINK_TEXT, "Users").click()
    form = steps.wait_for(lambda: find(By.ID, "grant-form"), "the grant form")
    for name, value in (("user", "writer"), ("tenant", tenant), ("namespace", namespace)):
        form.find_element(By.NAME, name).send_keys(value)
    form.find_element(By.NAME, "write").clear()
    form.find_element(By.NAME, "write").send_keys("^$")
    form.find_element(By.TAG_NAME, "button").click()
    steps.wait_for(lambda: f"{tenant}/{namespace}" in steps.text_of("#permissions"), "the grant in the list")
    steps.shot("grant")
    assert {"user": "writer", "tenant": tenant, "namespace": namespace, "configure": ".*", "write": "^$",
            "read": ".*"} in api.get("/permissions").json()

    producer.close()
    api.delete("/users/writer").raise_for_status()
    assert len(list(tmp_path.glob("console-*.png"))) >= 8
