/**
 * The console's overview in headless Chromium (Debian's chromium through playwright-core): it loads,
 * shows the current leader with its token, TTL countdown, members and jobs, and follows a failover
 * when the leader replica stops.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { launchChromium, type HeadlessChromium } from '../support/chromium.js';
import { type BrowserContext } from 'playwright-core';
import { Cluster, firstLeader, type Node } from './support.js';
import { until } from './console-support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

let db: TestDatabase;
let cluster: Cluster;
let browser: BrowserContext;
let chrome: HeadlessChromium | undefined;

before(async () => {
  db = await createTestDatabase();
  cluster = new Cluster(db.url, db.schema);
  chrome = await launchChromium();
  browser = chrome.browser;
});
after(async () => {
  await chrome?.close();
  await cluster.stopAll();
  await db.drop();
});

it(
  'shows the leader, token, TTL countdown, members and jobs, and follows a failover',
  { timeout: 90_000 },
  async () => {
    const a = await cluster.add('page-a');
    const b = await cluster.add('page-b');
    const first = await firstLeader([a.replica, b.replica]);
    const leader: Node = first === a.replica ? a : b;
    const other: Node = leader === a ? b : a;

    const page = await browser.newPage();
    const errors: string[] = [];
    page.on('pageerror', (err) => errors.push(err.message));
    const res = await page.goto(`${other.url}/`);
    assert.equal(res?.status(), 200);
    assert.equal(await page.title(), 'cronwarden console');

    const text = (id: string) => page.locator(`#${id}`).innerText();
    await page.waitForFunction(
      (id) => document.getElementById('holder')?.textContent === id,
      leader.replica.replicaId,
      { timeout: 15_000 },
    );
    const token = await text('token');
    assert.match(token, /^[1-9][0-9]*$/);
    await page.waitForFunction(() => /^\d+\.\d s$/.test(document.getElementById('ttl')?.textContent ?? ''), null, {
      timeout: 5000,
    });
    const ttl1 = parseFloat(await text('ttl'));
    assert.ok(ttl1 > 0 && ttl1 <= 3, `ttl ${ttl1}`);
    await page.waitForFunction(() => document.querySelectorAll('#members tbody tr').length === 2, null, {
      timeout: 10_000,
    });
    const members = await page.locator('#members tbody').innerText();
    assert.match(members, /page-a/);
    assert.match(members, /page-b/);
    const jobs = await page.locator('#jobs tbody').innerText();
    assert.match(jobs, /tick/);
    assert.match(jobs, /Europe\/Berlin/);
    // The runs view loads once when opened: wait for tick's first run (every 2 s) so there is one.
    await until(async () => (await db.pool.query(`SELECT 1 FROM cw_runs LIMIT 1`)).rowCount === 1, 'a first run');
    await page.click('#nav-runs');
    await page.waitForFunction(() => document.querySelectorAll('#runs tbody tr').length > 0, null, { timeout: 10_000 });
    await page.click('#nav-overview');
    assert.match(await text('self'), new RegExp(`^${other.replica.replicaId} \\(`));

    await leader.stop();
    await page.waitForFunction((id) => document.getElementById('holder')?.textContent === id, other.replica.replicaId, {
      timeout: 15_000,
    });
    assert.ok(BigInt(await text('token')) > BigInt(token), 'a new tenure has a higher token');
    await page.waitForFunction(
      (id) => (document.querySelector('#elections tbody tr')?.textContent ?? '').includes(id),
      other.replica.replicaId,
      { timeout: 10_000 },
    );
    assert.match(await text('self'), /\(leader\)$/);
    assert.deepEqual(errors, []);
    await page.close();
  },
);
