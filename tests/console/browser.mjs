// The console in a real browser (Debian's chromium driven by
// playwright-core): sign in, filter to a denied call, open it and read the
// deciding policy id, replay a candidate that flips it and see the flip,
// and check that the auditor token can neither reload nor approve.
// Screenshots of each page go to CG_SHOTS. Driven by tests/console_browser.rs,
// which starts the gateway and makes the denied call.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const base = env("CG_BASE");
const shots = env("CG_SHOTS");
const deniedId = env("CG_DENIED_ID");
const policyId = env("CG_POLICY_ID");
const candidate = env("CG_CANDIDATE");
mkdirSync(shots, { recursive: true });

function check(cond, message) {
  if (!cond) throw new Error(message);
}

async function signIn(browser, token) {
  const page = await (await browser.newContext()).newPage();
  await page.goto(`${base}/console`);
  check(page.url().endsWith("/console/login"), `not sent to sign in: ${page.url()}`);
  await page.fill("#token", token);
  await Promise.all([page.waitForURL(`${base}/console`), page.click("#sign-in")]);
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: `${shots}/${name}.png`, fullPage: true });
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox"],
});
try {
  // Sign-in page, then the overview as admin.
  const login = await (await browser.newContext()).newPage();
  await login.goto(`${base}/console/login`);
  await shot(login, "01-sign-in");
  const admin = await signIn(browser, env("CG_ADMIN_TOKEN"));
  await shot(admin, "02-decisions");

  // Filter to the denied call and open it.
  await admin.selectOption("#filter-decision", "deny");
  await Promise.all([admin.waitForURL(/decision=deny/), admin.click("#apply-filters")]);
  const rows = admin.locator("#decisions tbody tr.deny");
  check((await rows.count()) === 1, `expected one denied row, saw ${await rows.count()}`);
  await shot(admin, "03-decisions-denied");
  await Promise.all([admin.waitForURL(/\/console\/decisions\//), rows.first().locator("a.open-decision").click()]);
  check(admin.url().endsWith(deniedId), `opened ${admin.url()}, not ${deniedId}`);
  const ids = await admin.locator(".policy-id").allTextContents();
  check(ids.some((t) => t.trim().startsWith(policyId)), `deciding policy ${policyId} not shown: ${ids}`);
  check((await admin.locator("#chain-link").textContent()).includes("verifies"), "chain link does not verify");
  await shot(admin, "04-decision");

  // Replay a candidate without the forbid: the denial flips.
  await admin.goto(`${base}/console/replay`);
  await shot(admin, "05-replay-form");
  await admin.fill("#policy-text", candidate);
  await Promise.all([admin.waitForURL(/\/console\/replay\/[0-9a-f]+$/), admin.click("#run-replay")]);
  await admin.waitForSelector('#job-state[data-state="done"]', { timeout: 60000 });
  const flips = (await admin.locator("#flip-count").textContent()).trim();
  check(flips === "1", `expected 1 flip, saw ${flips}`);
  await shot(admin, "06-replay-flips");
  await Promise.all([admin.waitForURL(/\/console\/decisions\//), admin.locator("a.flip-link").first().click()]);
  check(admin.url().endsWith(deniedId), `the flip opened ${admin.url()}`);

  // Policy set and remote tools, as admin: the reload button is there.
  await admin.goto(`${base}/console/policies`);
  check((await admin.locator("#reload").count()) === 1, "admin sees no reload button");
  await shot(admin, "07-policies");
  await admin.goto(`${base}/console/peers`);
  await shot(admin, "08-remote-tools");

  // The auditor: no reload, no approve, and posting one anyway is 403.
  const auditor = await signIn(browser, env("CG_AUDITOR_TOKEN"));
  await auditor.goto(`${base}/console/policies`);
  check((await auditor.locator("#reload").count()) === 0, "auditor sees a reload button");
  await shot(auditor, "09-policies-auditor");
  await auditor.goto(`${base}/console/peers`);
  check((await auditor.locator("button.approve").count()) === 0, "auditor sees an approve button");
  const csrf = await auditor.locator('input[name="csrf"]').first().inputValue();
  const statuses = await auditor.evaluate(async (csrf) => {
    const post = (path, extra) =>
      fetch(path, { method: "POST", body: new URLSearchParams({ csrf, ...extra }) }).then((r) => r.status);
    return [await post("/console/policies/reload", {}), await post("/console/peers/acme/mcp/any/approve", { tool: "x" })];
  }, csrf);
  check(statuses.every((s) => s === 403), `auditor posts answered ${statuses}`);
  console.log("console browser checks passed");
} finally {
  await browser.close();
}
