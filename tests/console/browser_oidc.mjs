// The console's sign-in with an identity provider in a real browser
// (Debian's chromium driven by playwright-core): open the console, click
// "Sign in with …", fill the provider's own sign-in form (a `username`
// field and a "Sign in" button), and land on the console's overview signed
// in as that person with their role. Driven by tests/console_browser.rs,
// which starts the provider (tests/oidc/provider.mjs with `loginPage`) and
// the gateway. Screenshots go to CG_SHOTS.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const base = env("CG_BASE");
const issuer = env("CG_ISSUER");
const shots = env("CG_SHOTS");
const user = env("CG_USER");
const expected = env("CG_EXPECT_PERSON");
const role = env("CG_EXPECT_ROLE");
mkdirSync(shots, { recursive: true });

function check(cond, message) {
  if (!cond) throw new Error(message);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox"],
});
try {
  const page = await (await browser.newContext()).newPage();
  await page.goto(`${base}/console`);
  check(page.url().endsWith("/console/login"), `not sent to sign in: ${page.url()}`);
  const button = page.locator("#sign-in-idp");
  check((await button.textContent()).includes("Sign in with"), "no identity provider button");
  await page.screenshot({ path: `${shots}/oidc-01-sign-in.png`, fullPage: true });

  // The provider's own form.
  await Promise.all([page.waitForURL((url) => url.href.startsWith(issuer)), button.click()]);
  await page.waitForSelector('input[name="username"]');
  await page.screenshot({ path: `${shots}/oidc-02-provider-form.png`, fullPage: true });
  await page.fill('input[name="username"]', user);
  await Promise.all([
    page.waitForURL(`${base}/console`, { timeout: 30000 }),
    page.getByRole("button", { name: "Sign in" }).click(),
  ]);

  // The overview, signed in as that person.
  await page.waitForSelector("#signed-in-person");
  const who = (await page.locator("#signed-in-person").textContent()).trim();
  check(who === expected, `signed in as "${who}", not "${expected}"`);
  const shownRole = await page.locator("span.role").getAttribute("data-role");
  check(shownRole === role, `role ${shownRole}, not ${role}`);
  check((await page.locator("#decisions").count()) === 1, "not the overview");
  await page.screenshot({ path: `${shots}/oidc-03-overview.png`, fullPage: true });
  console.log("console oidc browser checks passed");
} finally {
  await browser.close();
}
