// The dashboard end to end in headless Chromium (Debian's, driven by playwright-core):
// log in, read the queues and their charts, list and filter jobs, open a job and watch its progress bar
// reach 100 % live, cancel another, bulk-retry failed jobs, see dead letters, and see that
// a read-only token gets no buttons. Screenshots of the main pages go to SCREENSHOTS.
// Run by run.sh, which starts the server and passes BASE, ADMIN_TOKEN, READER_TOKEN.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const base = process.env.BASE;
const admin = process.env.ADMIN_TOKEN;
const reader = process.env.READER_TOKEN;
const shots = process.env.SCREENSHOTS;
mkdirSync(shots, { recursive: true });

let browser;
before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    // This machine's network is closed: no background fetches, no sandbox as root.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
      "--disable-component-update", "--disable-sync"],
  });
});
after(async () => browser?.close());

/** Submits a job over the API with the admin token; the job as answered. */
async function submit(body) {
  const response = await fetch(`${base}/jobs`, {
    method: "POST",
    headers: { Authorization: `Bearer ${admin}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  assert.equal(response.status, 201, await response.clone().text());
  return response.json();
}

async function job(id) {
  const response = await fetch(`${base}/jobs/${id}`, { headers: { Authorization: `Bearer ${admin}` } });
  return response.json();
}

/** Polls the API until job `id` has `status` (a deadline, not a sleep). */
async function waitForStatus(id, status) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const current = await job(id);
    if (current.status === status) return current;
    assert.ok(Date.now() < deadline, `job ${id} is ${current.status}, never ${status}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function logIn(page, token) {
  await page.goto(`${base}/ui`);
  assert.match(page.url(), /\/ui\/login\?next=/);
  await page.fill("#token", token);
  await Promise.all([page.waitForURL(`${base}/ui`), page.click("button[type=submit]")]);
}

test("an admin logs in, reads the queues and the jobs, and filters them", async () => {
  const failed = [await submit({ operation: "fail" }), await submit({ operation: "fail" })];
  for (const job of failed) await waitForStatus(job.id, "failed");
  const page = await browser.newPage();
  await page.goto(`${base}/ui/login`);
  await page.screenshot({ path: join(shots, "login.png") });
  await page.fill("#token", "ym_not_a_token");
  await page.click("button[type=submit]");
  await page.getByText("that token is unknown or revoked").waitFor();

  await logIn(page, admin);
  const cookie = (await page.context().cookies()).find((c) => c.name === "ym_session");
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, "Strict");
  assert.equal(await page.evaluate(() => document.cookie), "", "the page's scripts cannot read the session");
  await page.locator('tr[data-queue="default"]').waitFor();
  await page.screenshot({ path: join(shots, "queues.png"), fullPage: true });
  // An admin pauses a queue and resumes it from the page; the API sees each state.
  await Promise.all([page.waitForURL(`${base}/ui`), page.click('tr[data-queue="default"] button:has-text("Pause")')]);
  await page.locator('tr[data-queue="default"][data-state="paused"]').waitFor();
  const queues = await (await fetch(`${base}/admin/queues`, { headers: { authorization: `Bearer ${admin}` } })).json();
  assert.equal(queues.queues.find((q) => q.name === "default").state, "paused");
  await page.screenshot({ path: join(shots, "queue-paused.png"), fullPage: true });
  await Promise.all([page.waitForURL(`${base}/ui`), page.click('tr[data-queue="default"] button:has-text("Resume")')]);
  await page.locator('tr[data-queue="default"][data-state="running"]').waitFor();
  // The queues' last hour, drawn by the server: the page redraws it as it refreshes itself,
  // so the failures submitted above appear without a reload by the test.
  const charts = page.locator('.queue-charts[data-queue="default"]');
  await charts.locator("polyline.failed, circle.failed").first().waitFor({ timeout: 30_000 });
  assert.ok(Number(await charts.getAttribute("data-ended")) >= 2, await charts.getAttribute("data-ended"));
  assert.equal(await charts.locator("figure.chart svg").count(), 3);
  await page.screenshot({ path: join(shots, "queue-charts.png"), fullPage: true });

  await page.click("nav >> text=Jobs");
  await page.locator("table.jobs").waitFor();
  await page.selectOption('select[name="status"]', "failed");
  await Promise.all([page.waitForURL(/status=failed/), page.click("form.filters button[type=submit]")]);
  const statuses = await page.locator("table.jobs tbody .status").allTextContents();
  assert.ok(statuses.length >= 2);
  assert.ok(statuses.every((status) => status === "failed"), statuses.join());
  await page.screenshot({ path: join(shots, "jobs.png"), fullPage: true });
  await page.close();
});

test("a job's page shows its progress live, to 100 %", async () => {
  const page = await browser.newPage();
  await logIn(page, admin);
  // Eight steps a second apart: the page arrives part way (how far depends on the
  // machine's speed, so nothing below assumes where), and must then move on by itself.
  const running = await submit({ operation: "sleep", payload: { seconds: 8, steps: 8 } });
  await page.goto(`${base}/ui/jobs/${running.id}`);
  const first = Number(await page.locator("#progress").getAttribute("data-current"));
  assert.ok(first < 8, `the page came before the job's last step (at ${first})`);
  let loads = 0;
  page.on("framenavigated", (frame) => { if (frame === page.mainFrame()) loads += 1; });
  // No reload: the bar moves from the event stream, and at the end the page swaps in its
  // fresh content (result, buttons) and marks <main data-settled>: the observable end.
  await page.waitForFunction((at) => Number(document.querySelector("#progress").dataset.current) > at, first,
    { timeout: 30_000 });
  await page.screenshot({ path: join(shots, "job-running.png"), fullPage: true });
  await page.locator('#progress[data-current="8"]').waitFor({ timeout: 30_000 });
  assert.equal(await page.locator("#progress .count").textContent(), "8/8 (100%)");
  await page.locator("main[data-settled]").waitFor({ timeout: 30_000 });
  assert.equal(loads, 0, "the progress and the end came without a reload");
  await page.locator("#status .status.succeeded").waitFor({ timeout: 30_000 });
  await page.locator("#result").waitFor({ timeout: 30_000 });
  const events = await page.locator("#timeline li b").allTextContents();
  assert.equal(events.filter((name) => name === "job.progress").length, 8, events.join());
  assert.equal(events.at(-1), "job.succeeded");
  await page.screenshot({ path: join(shots, "job.png"), fullPage: true });
  await page.close();
});

test("cancel one job, then bulk-retry the failed ones", async () => {
  const page = await browser.newPage();
  await logIn(page, admin);
  page.on("dialog", (dialog) => dialog.accept());
  const long = await submit({ operation: "sleep", payload: { seconds: 60, steps: 60 } });
  await waitForStatus(long.id, "running");
  await page.goto(`${base}/ui/jobs/${long.id}`);
  await Promise.all([page.waitForURL(`${base}/ui/jobs/${long.id}`), page.click(".actions button.danger")]);
  await page.locator("#status .status.cancelled").waitFor();
  assert.equal((await job(long.id)).status, "cancelled");

  const failed = [await submit({ operation: "fail" }), await submit({ operation: "fail" })];
  for (const job of failed) await waitForStatus(job.id, "failed");
  const before = await Promise.all(failed.map((f) => job(f.id)));
  await page.goto(`${base}/ui/jobs?status=failed&operation=fail`);
  await page.click("text=Retry all matching…");
  const count = Number(await page.locator(".confirm-count").getAttribute("data-count"));
  assert.ok(count >= 2, `count ${count}`);
  await page.screenshot({ path: join(shots, "bulk-confirm.png"), fullPage: true });
  await Promise.all([page.waitForURL(/done=retry/), page.click("form[action='/ui/bulk'] button[type=submit]")]);
  await page.getByText(`${count} jobs queued again`).waitFor();
  for (const [at, f] of failed.entries()) {
    // Retried: it ran again (and failed again, as `fail` does).
    const deadline = Date.now() + 30_000;
    while ((await job(f.id)).attempts <= before[at].attempts) {
      assert.ok(Date.now() < deadline, `job ${f.id} was not run again`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  await page.goto(`${base}/ui/dead-letters`);
  await page.locator("h1", { hasText: "Dead letters" }).waitFor();
  await page.screenshot({ path: join(shots, "dead-letters.png"), fullPage: true });
  await page.close();
});

test("a read-only token sees everything and no buttons", async () => {
  const parked = await submit({ operation: "sleep", payload: { seconds: 60 } });
  await waitForStatus(parked.id, "running");
  const page = await browser.newPage();
  await logIn(page, reader);
  await page.locator(".who .role", { hasText: "read-only" }).waitFor();
  await page.goto(`${base}/ui/jobs/${parked.id}`);
  await page.locator("#status .status.running").waitFor();
  assert.equal(await page.locator(".actions button").count(), 0);
  await page.goto(`${base}/ui/jobs`);
  await page.locator("table.jobs").waitFor();
  assert.equal(await page.locator("section.bulk").count(), 0);
  assert.equal(await page.locator("text=Dead letters").count(), 0);
  await page.screenshot({ path: join(shots, "read-only.png"), fullPage: true });
  await page.close();
  // Leave nothing running behind.
  await fetch(`${base}/jobs/${parked.id}/cancel`, { method: "POST", headers: { Authorization: `Bearer ${admin}` } });
});
