/**
 * The live ledger check's reports as an operator meets them, on an in-process replica with a real
 * ledger: before any round `GET /api/ledger-check` says so and the console shows no banner; after a
 * round that found a fire out of token order (a stale leader's write planted past the fence), the
 * route serves its report, the leader's /metrics its gauge, and the console a banner on every view
 * in headless Chromium at 1,400 and 390 px (no horizontal overflow); a clean round takes it away.
 * Screenshots go to test-output/console/ (CRONWARDEN_TEST_OUTPUT overrides the folder).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { launchChromium, type HeadlessChromium } from '../support/chromium.js';
import { type BrowserContext, type Page } from 'playwright-core';
import { Ledger } from '../../src/ledger/ledger.js';
import { Cluster, firstLeader, json, type Node } from './support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { testLedgerCheck } from '../support/ledger-check-round.js';

const OUTPUT = process.env.CRONWARDEN_TEST_OUTPUT ?? join(process.cwd(), 'test-output', 'console');

let db: TestDatabase;
let cluster: Cluster;
let node: Node;
let ledger: Ledger;
let browser: BrowserContext;
let chrome: HeadlessChromium | undefined;

/** One round of the check, as the leader's chore runs it (its report kept in the ledger). */
const round = () => testLedgerCheck(ledger, { workerLockMs: 3000, claimerLiveWithinMs: () => 3000 }).checkOnce();

before(async () => {
  db = await createTestDatabase();
  await mkdir(OUTPUT, { recursive: true });
  cluster = new Cluster(db.url, db.schema);
  node = await cluster.add('lc-a');
  await firstLeader([node.replica]);
  ledger = new Ledger(db.pool, db.schema);
  chrome = await launchChromium({ width: 1400, height: 900 });
  browser = chrome.browser;
});
after(async () => {
  await chrome?.close();
  await cluster.stopAll();
  await db.drop();
});

it('before the first round: no report, no banner', { timeout: 60_000 }, async () => {
  assert.deepEqual(await json(await fetch(`${node.url}/api/ledger-check`)), { report: null });
  const page = await browser.newPage();
  await page.goto(`${node.url}/#overview`);
  await page.waitForFunction(() => document.getElementById('holder')?.textContent !== '…', null, { timeout: 15_000 });
  assert.equal(await page.locator('#ledger-check').isVisible(), false);
  await page.close();
});

it(
  'a round that finds a token out of order: the route, the gauge and a banner at 1,400 and 390 px',
  { timeout: 90_000 },
  async () => {
    const t = ledger.tables;
    // 'tick' fires every 2 s under the leader's token; a stale leader's fire lands past the fence one below it.
    let top: string | null = null;
    for (const deadline = Date.now() + 15_000; top === null && Date.now() < deadline;) {
      top = (await db.pool.query<{ t: string | null }>(`SELECT max(leader_token)::text AS t FROM ${t.runs}`)).rows[0]!
        .t;
      if (top === null) await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(top !== null, 'a fire of tick committed');
    const stale = BigInt(top) - 1n;
    await db.pool.query(
      `INSERT INTO ${t.runs} (job, scheduled_at, trigger, leader_token, leader_id)
     VALUES ('tick', date_trunc('second', now()) - interval '1 day', 'schedule', $1, 'stale')`,
      [stale.toString()],
    );
    const report = await round();
    assert.equal(report.counts['token-order'], 1);

    const body = await json(await fetch(`${node.url}/api/ledger-check`));
    assert.deepEqual(body.report.counts, report.counts);
    assert.equal(body.report.violations, 1);
    assert.match(
      body.report.examples['token-order'][0],
      new RegExp(`^I3: tick: run \\d+ committed with leader token ${stale} after token ${top}$`),
    );
    assert.ok(Date.parse(body.report.savedAt) > 0);

    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    assert.match(metrics, /^cronwarden_ledger_check_violations\{[^}]*check="token-order"[^}]*\} 1$/m);
    assert.match(metrics, /^cronwarden_ledger_check_violations\{[^}]*check="duplicate-slots"[^}]*\} 0$/m);
    assert.match(metrics, /^cronwarden_ledger_check_last_run_timestamp_seconds\{[^}]*\} \d+/m);

    let last: Page | undefined;
    for (const width of [1400, 390]) {
      await last?.close();
      const page = (last = await browser.newPage());
      await page.setViewportSize({ width, height: 900 });
      for (const view of ['#overview', '#runs', '#history']) {
        await page.goto(`${node.url}/${view}`);
        await page.locator('#ledger-check').waitFor({ state: 'visible', timeout: 15_000 });
        const text = await page.locator('#ledger-check').innerText();
        assert.match(text, /The ledger check found 1 token-order/);
        assert.match(text, new RegExp(`committed with leader token ${stale} after token ${top}`));
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 0, `${view} at ${width} px is ${overflow} px wider than the window`);
        const box = await page.locator('#ledger-check').boundingBox();
        assert.ok(box && box.x >= 0 && box.x + box.width <= width, `${view} at ${width} px: the banner fits`);
        await page.screenshot({ path: join(OUTPUT, `ledger-check-${view.slice(1)}-${width}.png`) });
      }
    }

    // Once a round finds nothing, the banner on the open page goes at its next refresh.
    await db.pool.query(`DELETE FROM ${t.runs} WHERE leader_id = 'stale'`);
    assert.equal((await round()).violations, 0);
    await last!.goto(`${node.url}/#overview`);
    await last!.locator('#ledger-check').waitFor({ state: 'hidden', timeout: 15_000 });
    await last!.close();
  },
);
