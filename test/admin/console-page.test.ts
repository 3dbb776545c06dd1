/**
 * The operator console in headless Chromium (Debian's chromium through playwright-core), against
 * in-process replicas with a real ledger, Redis and BullMQ: the overview after a failover, paging
 * a job's 1,000 runs, a failed run's stack, entering the token and retrying a failed run until it
 * completes with one effect row, runtime schedules and paused fires on the overview, a superseded
 * run, every view at 1,400 and 390 px (no horizontal overflow, charts with axes), and a hostile job
 * name shown as text. Screenshots for a person to look at go to test-output/console/
 * (CRONWARDEN_TEST_OUTPUT overrides the folder).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { launchChromium, type HeadlessChromium } from '../support/chromium.js';
import { type BrowserContext, type Page } from 'playwright-core';
import { ADMIN_TOKEN, Cluster, firstLeader, json, type Node } from './support.js';
import { consoleJobs, createUserTables, effectRows, insertHistory, setFailing, until } from './console-support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

const OUTPUT = process.env.CRONWARDEN_TEST_OUTPUT ?? join(process.cwd(), 'test-output', 'console');
const HOSTILE = '<img src=x onerror="window.__pwned=1">';

let db: TestDatabase;
let cluster: Cluster;
let browser: BrowserContext;
let chrome: HeadlessChromium | undefined;
let leader: Node;
const pageErrors: string[] = [];

before(async () => {
  db = await createTestDatabase();
  await createUserTables(db);
  await mkdir(OUTPUT, { recursive: true });
  cluster = new Cluster(db.url, db.schema, undefined, consoleJobs);
  chrome = await launchChromium({ width: 1500, height: 1000 });
  browser = chrome.browser;
});
after(async () => {
  await chrome?.close();
  await cluster.stopAll();
  await db.drop();
});

async function open(node: Node, hash = ''): Promise<Page> {
  const page = await browser.newPage();
  page.on('pageerror', (err) => pageErrors.push(err.message));
  const res = await page.goto(`${node.url}/${hash}`);
  assert.equal(res?.status(), 200);
  return page;
}

const textOf = (page: Page, selector: string) => page.locator(selector).innerText();

it(
  'the overview after a failover: the new leader, its higher token, and the handover',
  { timeout: 90_000 },
  async () => {
    const a = await cluster.add('ui-a');
    const b = await cluster.add('ui-b');
    const first = await firstLeader([a.replica, b.replica]);
    const old = first === a.replica ? a : b;
    leader = old === a ? b : a;
    const page = await open(leader);
    assert.equal(await page.title(), 'cronwarden console');
    await page.waitForFunction((id) => document.getElementById('holder')?.textContent === id, old.replica.replicaId, {
      timeout: 15_000,
    });
    const token = BigInt(await textOf(page, '#token'));
    await old.stop();
    await page.waitForFunction(
      (id) => document.getElementById('holder')?.textContent === id,
      leader.replica.replicaId,
      {
        timeout: 15_000,
      },
    );
    assert.ok(BigInt(await textOf(page, '#token')) > token, 'a new tenure has a higher token');
    await page.waitForFunction(
      (id) => (document.querySelector('#elections tbody tr')?.textContent ?? '').includes(id),
      leader.replica.replicaId,
      { timeout: 15_000 },
    );
    const row = await textOf(page, '#elections tbody tr:first-child');
    assert.match(row, /previous leader released/);
    assert.match(row, new RegExp(old.replica.replicaId));
    const jobs = await textOf(page, '#jobs tbody');
    assert.match(jobs, /at 00:00 every year on January 1/);
    assert.match(jobs, /\d{4}-01-01 00:00:00 \+01:00/, 'next fires in the job zone with its offset');
    assert.match(jobs, /every 2 seconds/);
    await page.screenshot({ path: join(OUTPUT, 'overview-after-failover.png'), fullPage: true });
    await page.close();
  },
);

it('pages through a job with 1,000 runs, newest first, each run once', { timeout: 90_000 }, async () => {
  await insertHistory(db, 'bulk', 1000, new Date(Date.UTC(2026, 0, 15, 12, 0)));
  const page = await open(leader, '#runs?job=bulk');
  const firstIds = async () => {
    await page.waitForFunction(() => document.querySelectorAll('#runs tbody tr').length > 0, null, { timeout: 10_000 });
    return page.$$eval('#runs tbody tr td:first-child', (cells) => cells.map((c) => c.textContent ?? ''));
  };
  const seen: string[] = [];
  for (let p = 1; p <= 20; p++) {
    await page.waitForFunction((n) => document.getElementById('page-info')?.textContent?.startsWith(`page ${n} `), p, {
      timeout: 10_000,
    });
    const ids = await firstIds();
    assert.equal(ids.length, 50, `page ${p}`);
    seen.push(...ids);
    if (p === 1) {
      assert.match(await textOf(page, '#runs tbody tr:first-child'), /2026-01-15 12:00:00/);
      await page.screenshot({ path: join(OUTPUT, 'runs.png'), fullPage: false });
    }
    if (p < 20) await page.click('#older');
  }
  assert.equal(await page.isDisabled('#older'), true, 'the last page has no older one');
  assert.equal(new Set(seen).size, 1000, 'each of the 1,000 runs once');
  await page.click('#newer');
  await page.waitForFunction(() => document.getElementById('page-info')?.textContent?.startsWith('page 19 '));
  await page.close();
});

it(
  'shows a failed run with its stack; with the token entered, retrying completes it with one effect',
  {
    timeout: 90_000,
  },
  async () => {
    await setFailing(db, true);
    const trig = await fetch(`${leader.url}/api/jobs/flaky/trigger`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    const runId = (await json(trig)).runId as string;
    await until(async () => {
      const r = await db.pool.query<{ state: string }>('SELECT state FROM cw_runs WHERE id = $1', [runId]);
      return r.rows[0]?.state === 'failed';
    }, 'the run fails');

    const page = await open(leader, `#run/${runId}`);
    await page.waitForSelector('#attempts pre.stack', { timeout: 10_000 });
    assert.match(await textOf(page, '#attempts pre.stack'), /reportServiceRefused/);
    assert.match(await textOf(page, '#attempts tbody'), /report service refused the upload/);
    assert.match(await textOf(page, '#run-title'), /failed/);
    await page.screenshot({ path: join(OUTPUT, 'failed-run.png'), fullPage: true });

    await setFailing(db, false);
    await page.click('#retry');
    assert.match(await textOf(page, '#notice'), /admin token/, 'without a token the page asks for it');
    await page.fill('#token-input', ADMIN_TOKEN);
    await page.click('#token-set');
    assert.equal(await textOf(page, '#token-state'), 'admin token set (this tab)');
    await page.click('#retry');
    await page.waitForFunction(() => /completed/.test(document.getElementById('run-title')?.textContent ?? ''), null, {
      timeout: 20_000,
    });
    await page.waitForFunction(() => document.querySelectorAll('#attempts tbody tr').length === 2, null, {
      timeout: 10_000,
    });
    assert.equal(await effectRows(db, runId), 1, 'exactly one effect row');
    assert.ok(!page.url().includes(ADMIN_TOKEN), 'the token is never in the URL');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('cronwarden.adminToken')), ADMIN_TOKEN);
    await page.screenshot({ path: join(OUTPUT, 'retried-run.png'), fullPage: true });
    await page.goto(`${leader.url}/#overview`);
    await page.waitForFunction(() => document.querySelectorAll('#jobs tbody tr').length > 0, null, { timeout: 10_000 });
    await page.screenshot({ path: join(OUTPUT, 'overview.png'), fullPage: false });
    await page.goto(`${leader.url}/#history`);
    await page.waitForFunction(() => document.querySelectorAll('#charts .uplot').length >= 3, null, {
      timeout: 10_000,
    });
    assert.match(await textOf(page, '#charts'), /flaky[\s\S]*\d+ fires, \d+ failures/);
    await page.screenshot({ path: join(OUTPUT, 'history.png'), fullPage: false });
    await page.close();
  },
);

it(
  "the overview shows runtime schedules, marks a paused job's next fires, and writes every date as +hh:mm",
  { timeout: 60_000 },
  async () => {
    const auth = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
    const created = await fetch(`${leader.url}/api/schedules`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ id: 'acme', handler: 'beat', schedule: '0 7 * * *', timezone: 'Europe/Berlin' }),
    });
    assert.equal(created.status, 201);
    const paused = await fetch(`${leader.url}/api/jobs/flaky/pause`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({ reason: 'maintenance window' }),
    });
    assert.equal(paused.status, 200);
    try {
      const page = await open(leader);
      await page.waitForFunction(
        () => (document.querySelector('#schedules tbody')?.textContent ?? '').includes('acme'),
        null,
        {
          timeout: 15_000,
        },
      );
      assert.match(
        await textOf(page, '#schedules tbody tr:first-child'),
        /acme[\s\S]*beat\/acme[\s\S]*0 7 \* \* \*[\s\S]*Europe\/Berlin/,
      );
      await page.waitForFunction(() => document.querySelectorAll('#jobs .paused-fire').length > 0, null, {
        timeout: 15_000,
      });
      const flaky = page.locator('#jobs tbody tr', { hasText: 'flaky' });
      assert.equal(await flaky.locator('td:nth-child(4) .paused-fire').count(), 3, 'each of its next fires is marked');
      assert.equal(await page.locator('#jobs tbody tr', { hasText: 'beat' }).locator('.paused-fire').count(), 0);
      const text = await page.locator('main').innerText();
      assert.doesNotMatch(text, /GMT/, 'no "GMT+1" beside "+01:00"');
      assert.match(text, /\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d\d:\d\d/);
      await page.close();
    } finally {
      await fetch(`${leader.url}/api/jobs/flaky/resume`, {
        method: 'POST',
        headers: { authorization: auth.authorization },
      });
    }
  },
);

it('a run waiting for a concurrency slot says why in the runs list', { timeout: 60_000 }, async () => {
  await leader.replica.trigger('gated');
  await until(async () => {
    const r = await db.pool.query("SELECT 1 FROM cw_runs WHERE job = 'gated' AND state = 'running'");
    return r.rowCount === 1;
  }, 'the first run holds the slot');
  await leader.replica.trigger('gated');
  await until(async () => {
    const r = await db.pool.query(
      "SELECT 1 FROM cw_runs WHERE job = 'gated' AND state = 'pending' AND error IS NOT NULL",
    );
    return r.rowCount === 1;
  }, 'the second run waits');
  const page = await open(leader, '#runs?job=gated');
  await page.waitForFunction(() => document.querySelectorAll('#runs tbody tr').length === 2, null, { timeout: 10_000 });
  const waiting = await textOf(page, '#runs tbody tr:first-child');
  assert.match(waiting, /pending\s+waiting for a slot of concurrency key "console-gate" \(limit 1\): every slot taken/);
  await page.close();
});

it('a superseded run says why in a line, with no stack for an error', { timeout: 60_000 }, async () => {
  const { rows } = await db.pool.query<{ id: string }>(
    `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, finished_at, error, attempts)
     VALUES ('beat', now() - interval '2 hours', 'catchup', 1, 'old', 'superseded', now(), $1, 1) RETURNING id::text`,
    ['a later slot already wrote report:acme (token 12 > 11)'],
  );
  await db.pool.query(
    `INSERT INTO cw_run_attempts (run_id, attempt, token, worker, state, finished_at, error, error_stack)
     VALUES ($1, 1, 11, 'w', 'superseded', now(), $2, $3)`,
    [rows[0]!.id, 'a later slot already wrote report:acme', 'SupersededError: a later slot\n    at fence (ctx.ts:1:1)'],
  );
  const page = await open(leader, `#run/${rows[0]!.id}`);
  await page.waitForFunction(() => /superseded/.test(document.getElementById('run-title')?.textContent ?? ''), null, {
    timeout: 10_000,
  });
  await page.waitForFunction(() => document.querySelectorAll('#attempts tbody tr').length === 1, null, {
    timeout: 10_000,
  });
  assert.match(await textOf(page, '#run-fields'), /superseded\s+a later slot already wrote report:acme/);
  assert.doesNotMatch(await textOf(page, '#run-fields'), /error/);
  assert.equal(await page.locator('#attempts pre, #run-fields pre').count(), 0, 'no stack shown');
  await page.close();
});

it(
  'at 1,400 and 390 px every view fits the width: no horizontal scrolling, buttons on screen; charts have axes',
  { timeout: 120_000 },
  async () => {
    await insertHistory(db, 'beat', 30, new Date(Date.now() - 60_000));
    const views = ['#overview', '#runs', '#history'];
    for (const width of [1400, 390]) {
      const page = await open(leader);
      await page.setViewportSize({ width, height: 900 });
      for (const view of views) {
        await page.goto(`${leader.url}/${view}`);
        if (view === '#overview')
          await page.waitForFunction(() => document.querySelectorAll('#jobs tbody tr').length > 0, null, {
            timeout: 15_000,
          });
        if (view === '#runs')
          await page.waitForFunction(() => document.querySelectorAll('#runs tbody tr').length > 0, null, {
            timeout: 15_000,
          });
        if (view === '#history') {
          await page.waitForFunction(() => document.querySelectorAll('#charts .uplot').length >= 2, null, {
            timeout: 15_000,
          });
          // Each chart: a time axis, the runs axis on the left and the lateness axis on the right.
          const axes = await page.$$eval('#charts .uplot', (plots) =>
            plots.map((p) => p.querySelectorAll('.u-axis').length),
          );
          assert.ok(
            axes.every((n) => n === 3),
            `axes per chart: ${axes.join(', ')}`,
          );
          const canvas = await page.$eval('#charts .uplot canvas', (c) => (c as HTMLCanvasElement).width);
          assert.ok(canvas > 0);
        }
        const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
        assert.ok(overflow <= 0, `${view} at ${width} px is ${overflow} px wider than the window`);
        const offscreen = await page.$$eval('button', (buttons) =>
          buttons
            .filter((b) => b.offsetParent !== null)
            .filter((b) => {
              const r = b.getBoundingClientRect();
              return r.left < 0 || r.right > window.innerWidth;
            })
            .map((b) => b.textContent),
        );
        assert.deepEqual(offscreen, [], `${view} at ${width} px: buttons off-screen`);
        await page.screenshot({ path: join(OUTPUT, `${view.slice(1)}-${width}.png`), fullPage: true });
      }
      await page.close();
    }
  },
);

it('renders a hostile job name and error as text, never as HTML', { timeout: 60_000 }, async () => {
  const { rows } = await db.pool.query<{ id: string }>(
    `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state, finished_at, error)
     VALUES ($1, now(), 'manual', 1, 'old-version', 'failed', now(), $2) RETURNING id::text`,
    [HOSTILE, `<b>bold</b>${HOSTILE}`],
  );
  const id = rows[0]!.id;
  const page = await open(leader, `#runs?job=${encodeURIComponent(HOSTILE)}`);
  await page.waitForFunction(() => document.querySelectorAll('#runs tbody tr').length === 1, null, { timeout: 10_000 });
  assert.equal(await textOf(page, '#runs tbody tr td:nth-child(2)'), HOSTILE);
  await page.goto(`${leader.url}/#run/${id}`);
  await page.waitForFunction(() => (document.getElementById('run-title')?.textContent ?? '').includes('<img'), null, {
    timeout: 10_000,
  });
  assert.match(await textOf(page, '#run-fields'), /<b>bold<\/b><img src=x/);
  assert.equal(await page.locator('main img, main b:text("bold")').count(), 0, 'no element was made from the text');
  assert.equal(await page.evaluate(() => (window as unknown as { __pwned?: number }).__pwned), undefined);
  await page.close();
  assert.deepEqual(pageErrors, []);
});
