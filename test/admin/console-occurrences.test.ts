/**
 * The console's job page in headless Chromium (Debian's chromium through playwright-core), against
 * an in-process replica with a real ledger: the jobs list links each job to its page; the page
 * draws the job's due instants as one strip per hour coloured by outcome, with a legend whose
 * colours are the strips' (defined once), one line per answer, its policies and latest runs; it
 * fits 1,400 and 390 px without scrolling sideways. Screenshots go to test-output/console/.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { launchChromium, type HeadlessChromium } from '../support/chromium.js';
import { type BrowserContext, type Page } from 'playwright-core';
import { Cluster, firstLeader, type Node } from './support.js';
import { until } from './console-support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

const OUTPUT = process.env.CRONWARDEN_TEST_OUTPUT ?? join(process.cwd(), 'test-output', 'console');

let db: TestDatabase;
let cluster: Cluster;
let leader: Node;
let browser: BrowserContext;
let chrome: HeadlessChromium | undefined;
const pageErrors: string[] = [];

before(async () => {
  db = await createTestDatabase();
  await mkdir(OUTPUT, { recursive: true });
  cluster = new Cluster(db.url, db.schema);
  const a = await cluster.add('occ-ui-a');
  await firstLeader([a.replica]);
  leader = a;
  await until(async () => {
    const r = await db.pool.query(`SELECT count(*)::int AS n FROM cw_runs WHERE job = 'tick'`);
    return r.rows[0].n >= 2;
  }, 'tick fires twice');
  chrome = await launchChromium({ width: 1400, height: 900 });
  browser = chrome.browser;
});
after(async () => {
  await chrome?.close();
  await cluster.stopAll();
  await db.drop();
});

async function open(hash: string, width: number): Promise<Page> {
  const page = await browser.newPage();
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await page.setViewportSize({ width, height: 900 });
  const res = await page.goto(`${leader.url}/${hash}`);
  assert.equal(res?.status(), 200);
  return page;
}

for (const width of [1400, 390]) {
  it(`the job page at ${width} px: strips by outcome, a legend in the same colours, the answers, runs and policies`, async () => {
    const overview = await open('#overview', width);
    await overview.waitForSelector('#jobs a[href="#job/tick"]');
    await overview.click('#jobs a[href="#job/tick"]');
    await overview.waitForSelector('#job-occurrences tbody tr');
    const page = overview;
    assert.equal(await page.textContent('#job-title'), 'Job tick');
    // The last hour: one strip per hour it touches, each labelled.
    const strips = await page.$$eval('#job-strips svg.oc-strip', (s) => s.length);
    assert.ok(strips >= 1 && strips <= 2, `${strips} strips for the last hour`);
    const fired = await page.$$eval('#job-strips rect.oc-fired', (r) => r.length);
    assert.ok(fired >= 1, 'the fired instants are drawn');
    // Each outcome's colour is defined once: the legend's key and a strip's segment agree.
    const colours = await page.evaluate(() => {
      const rect = document.querySelector('#job-strips rect.oc-fired')!;
      const key = document.querySelector('#job-legend .oc-key.oc-fired')!;
      return { strip: getComputedStyle(rect).fill, legend: getComputedStyle(key).backgroundColor };
    });
    assert.equal(colours.strip, colours.legend);
    assert.equal(colours.strip, 'rgb(0, 163, 42)');
    const legend = await page.$$eval('#job-legend > span', (s) => s.map((x) => x.textContent));
    assert.deepEqual(legend, ['fired', 'skipped', 'missed', 'not-yet-due', 'not-accounted', 'unanswered']);
    const answers = await page.$$eval('#job-occurrences tbody tr', (rows) => rows.map((r) => r.textContent ?? ''));
    assert.ok(
      answers.some((a) => /fired.*run \d+/.test(a)),
      answers.join('\n'),
    );
    // A fired answer links its run by id (text, never the link's URL).
    const link = await page.$eval('#job-occurrences a[href^="#run/"]', (a) => a.textContent);
    assert.match(link ?? '', /^\d+$/);
    assert.ok(!answers.some((a) => /UNANSWERED/.test(a)), answers.join('\n'));
    const fields = await page.textContent('#job-fields');
    assert.match(fields ?? '', /schedule\*\/2 \* \* \* \* \* \(UTC\)/);
    assert.match(fields ?? '', /misfireall/);
    assert.ok((await page.$$eval('#job-runs tbody tr', (r) => r.length)) >= 2, 'the latest runs are listed');
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `the job page is ${overflow} px wider than the window`);
    await page.screenshot({ path: join(OUTPUT, `job-page-${width}.png`), fullPage: true });
    assert.deepEqual(pageErrors, []);
    await page.close();
  });
}
