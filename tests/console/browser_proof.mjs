// The last proof of a reload in a real browser (Debian's chromium driven by
// playwright-core): an auditor opens the Policy set page of a gateway that
// refused a widening candidate (`prove = "refuse-widening"`), reads the
// outcome, the widening environment's verdict and the counterexample with
// both sets' decisions, opens the counterexample in what-if (prefilled with
// its principal, action, resource, context and entities, against the
// proof's candidate) and sees the flip: the candidate allows, the active
// set denies. Screenshots go to CG_SHOTS. Driven by tests/console_browser.rs,
// which starts the gateway and makes the refused reload.
import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
const base = env("CG_BASE");
const shots = env("CG_SHOTS");
const candidateHash = env("CG_CANDIDATE_HASH");
const activeHash = env("CG_ACTIVE_HASH");
const widenEnv = env("CG_WIDENING_ENV");
const principal = env("CG_PRINCIPAL");
mkdirSync(shots, { recursive: true });

function check(cond, message) {
  if (!cond) throw new Error(message);
}
const text = async (locator) => ((await locator.textContent()) || "").trim();

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox"],
});
try {
  const page = await (await browser.newContext()).newPage();
  await page.goto(`${base}/console/login`);
  await page.fill("#token", env("CG_AUDITOR_TOKEN"));
  await Promise.all([page.waitForURL(`${base}/console`), page.click("#sign-in")]);

  // The Policy set page: the refusal, the proof's verdicts, the counterexample.
  await page.goto(`${base}/console/policies`);
  check((await text(page.locator("#policy-hash"))) === activeHash, "the active set changed");
  check((await text(page.locator("#proof-outcome"))) === "widens", "the proof's outcome is not `widens`");
  check((await text(page.locator("#proof-candidate"))) === candidateHash, "the proof names another candidate");
  check((await text(page.locator("#last-error"))).includes("refused by the proof"), "the refusal is not shown");
  const row = page.locator(`#proof-envs tr[data-env="${widenEnv}"]`);
  check((await row.count()) === 1, `no verdict row for ${widenEnv}`);
  check((await text(row.locator("td").nth(1))) === "more-permissive", `${widenEnv} is not more permissive`);
  const example = page.locator("details.counterexample").first();
  const summary = await text(example.locator("summary"));
  check(summary.startsWith(`widening in ${widenEnv}`) && summary.includes(principal), `first counterexample: ${summary}`);
  check((await text(example.locator('dd[data-set="live"]'))).startsWith("deny"), "the live set does not deny it");
  check((await text(example.locator('dd[data-set="candidate"]'))).startsWith("allow"), "the candidate does not allow it");
  await page.screenshot({ path: `${shots}/proof-01-policies.png`, fullPage: true });

  // Open it in what-if: the form carries the counterexample.
  await example.locator("a.open-whatif").click();
  await page.waitForSelector("#whatif-counterexample");
  check(page.url().includes("/console/replay?counterexample=0"), `opened ${page.url()}`);
  const form = page.locator("#whatif-form");
  check((await form.locator('input[name="principal"]').inputValue()) === principal, "principal not filled in");
  check((await form.locator('input[name="action"]').inputValue()).includes("write_node"), "action not filled in");
  const entities = JSON.parse(await form.locator('textarea[name="entities"]').inputValue());
  check(Array.isArray(entities) && entities.length > 0, "entities not filled in");
  check(await page.locator("#whatif-proof-candidate").isChecked(), "not asked of the proof's candidate");
  await page.screenshot({ path: `${shots}/proof-02-whatif-form.png`, fullPage: true });

  // Decide: the flip, on one page.
  await Promise.all([page.waitForURL(`${base}/console/whatif`), page.click("#run-whatif")]);
  const decision = await text(page.locator("#whatif-decision"));
  const live = await text(page.locator("#whatif-live-decision"));
  check(decision === "allow", `the candidate decides ${decision}`);
  check(live === "deny", `the active set decides ${live}`);
  check((await page.locator(".policy-id").allTextContents()).some((t) => t.includes("deployers-write-any-graph")), "the widening permit is not the deciding policy");
  await page.screenshot({ path: `${shots}/proof-03-whatif-flip.png`, fullPage: true });
  console.log("console proof browser checks passed");
} finally {
  await browser.close();
}
