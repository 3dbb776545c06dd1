/**
 * The console's workflow run page in headless Chromium (Debian's chromium through playwright-core),
 * against an in-process replica with a real ledger, Redis and BullMQ. The workflow `billing`:
 * `extract`, then `invoice` fanned out over 50 customers (two of them held by the test: one to
 * stay running, one to fail), and `approve` waiting for the signal "approved"; `report` needs both.
 * The overview lists it with its steps and next fires; the run page (opened from the runs list)
 * draws one box per step with its state, the fan-out counts, an edge per need and the critical
 * path, at 1,400 and 390 px; a step's detail shows its items and a failed item's attempt; signal,
 * retry and cancel from the page act on the run (checked through the API). Screenshots go to
 * test-output/console/ (CRONWARDEN_TEST_OUTPUT overrides the folder).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { launchChromium, type HeadlessChromium } from '../support/chromium.js';
import { type BrowserContext, type Page } from 'playwright-core';
import { defineWorkflow } from '../../src/jobs/define-workflow.js';
import { ADMIN_TOKEN, Cluster, firstLeader, json, type Node } from './support.js';
import { until } from './console-support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

const OUTPUT = process.env.CRONWARDEN_TEST_OUTPUT ?? join(process.cwd(), 'test-output', 'console');
const ITEMS = 50;
/** The item that stays running until released, and the one that fails (while `failing`) once released. */
const SLOW = 7;
const FAILING = 13;

/** An item held by the test: its handler waits for release(). */
function hold() {
  let release = () => {};
  const released = new Promise<void>((r) => (release = r));
  return { released, release };
}
let held = new Map<number, ReturnType<typeof hold>>();
let failing = true;

const billing = () => [
  defineWorkflow({ name: 'billing', schedule: '0 2 * * *', timezone: 'Europe/Berlin' })
    .step('extract', () => ({ customers: Array.from({ length: ITEMS }, (_, i) => i) }))
    .step('invoice', {
      needs: ['extract'],
      map: (input) => input.extract.customers,
      run: async (_ctx, customer) => {
        await held.get(customer)?.released;
        if (customer === FAILING && failing) throw new Error(`card declined for customer ${customer}`);
        return { customer, cents: 100 * customer };
      },
    })
    .step('approve', {
      needs: ['extract'],
      waitFor: { signal: 'approved', timeoutMs: 600_000 },
      run: (ctx) => ({ approvedBy: ctx.received?.data ?? null }),
    })
    .step('report', { needs: ['invoice', 'approve'], run: (_ctx, input) => ({ invoices: input.invoice.length }) }),
];

let db: TestDatabase;
let cluster: Cluster;
let leader: Node;
let browser: BrowserContext;
let chrome: HeadlessChromium | undefined;
let runId: string;
const pageErrors: string[] = [];

before(async () => {
  db = await createTestDatabase();
  await mkdir(OUTPUT, { recursive: true });
  cluster = new Cluster(db.url, db.schema, undefined, billing);
  const a = await cluster.add('wf-ui-a');
  await firstLeader([a.replica]);
  leader = a;
  chrome = await launchChromium({ width: 1400, height: 900 });
  browser = chrome.browser;
});
after(async () => {
  for (const h of held.values()) h.release();
  await chrome?.close();
  await cluster.stopAll();
  await db.drop();
});

async function open(hash: string, width = 1400): Promise<Page> {
  const page = await browser.newPage();
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await page.setViewportSize({ width, height: 900 });
  const res = await page.goto(`${leader.url}/${hash}`);
  assert.equal(res?.status(), 200);
  return page;
}

const api = async (path: string) => json(await fetch(`${leader.url}${path}`));
const graph = (id: string) => api(`/api/runs/${id}/workflow`);
type Step = { name: string; state: string; runs: { item: number | null; state: string; attempts: number }[] };
/** Step `name` of run `id`; undefined before the run is readable as a workflow run. */
const stepOf = async (id: string, name: string) =>
  ((await graph(id)).steps as Step[] | undefined)?.find((s) => s.name === name);

async function fire(): Promise<string> {
  const res = await fetch(`${leader.url}/api/jobs/billing/trigger`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  assert.equal(res.status, 200);
  return (await json(res)).runId as string;
}

/** Each box's step and state class, each edge's ends, and each box's text. */
async function drawn(page: Page) {
  return page.evaluate(() => ({
    nodes: [...document.querySelectorAll('#wf-graph g.wf-node')].map((g) => ({
      step: g.getAttribute('data-step'),
      state: [...g.classList].find((c) => c.startsWith('st-')),
      critical: g.classList.contains('critical'),
      text: g.querySelector('text')?.textContent ?? '',
    })),
    edges: [...document.querySelectorAll('#wf-graph path.wf-edge')]
      .map((e) => `${e.getAttribute('data-from')}->${e.getAttribute('data-to')}`)
      .sort(),
  }));
}
const stateOf = (d: Awaited<ReturnType<typeof drawn>>) => Object.fromEntries(d.nodes.map((n) => [n.step, n.state]));
const textOf = (d: Awaited<ReturnType<typeof drawn>>, step: string) => d.nodes.find((n) => n.step === step)?.text ?? '';
const NEEDS = ['approve->report', 'extract->approve', 'extract->invoice', 'invoice->report'];

/** No horizontal scrolling, and every visible button inside the window. */
async function fits(page: Page, what: string) {
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `${what} is ${overflow} px wider than the window`);
  const offscreen = await page.$$eval('button', (buttons) =>
    buttons
      .filter((b) => b.offsetParent !== null)
      .filter((b) => {
        const r = b.getBoundingClientRect();
        return r.left < 0 || r.right > window.innerWidth;
      })
      .map((b) => b.textContent),
  );
  assert.deepEqual(offscreen, [], `${what}: buttons off-screen`);
}

it("serves the page's files: the vendored libraries cached, its own revalidated; no other name", async () => {
  for (const [file, type, cache] of [
    ['dagre.js', /javascript/, 'public, max-age=3600'],
    ['history.js', /javascript/, 'no-cache'],
    ['workflow-model.js', /javascript/, 'no-cache'],
    ['workflow.js', /javascript/, 'no-cache'],
    ['workflow.css', /text\/css/, 'no-cache'],
  ] as const) {
    const res = await fetch(`${leader.url}/assets/${file}`);
    assert.equal(res.status, 200, file);
    assert.match(res.headers.get('content-type') ?? '', type, file);
    assert.equal(res.headers.get('cache-control'), cache, file);
    assert.ok((await res.text()).length > 1000, file);
  }
  assert.equal((await fetch(`${leader.url}/assets/console-workflow.js`)).status, 400, 'only the names it lists');
});

it('the overview lists the workflow with its steps and its next fires, apart from the jobs', async () => {
  const page = await open('#overview');
  await page.waitForFunction(() => document.querySelectorAll('#workflows tbody tr').length === 1, null, {
    timeout: 15_000,
  });
  const row = await page.locator('#workflows tbody tr').innerText();
  assert.match(row, /billing/);
  assert.match(row, /extract\s+⋔ invoice ← extract\s+approve ← extract\s+report ← invoice, approve/);
  assert.match(row, /0 2 \* \* \*[\s\S]*Europe\/Berlin/);
  assert.equal((row.match(/\d{4}-\d\d-\d\d 02:00:00 \+0[12]:00/g) ?? []).length, 3, 'its next three fires, zoned');
  assert.doesNotMatch(await page.locator('#jobs').innerText(), /billing/);
  await page.screenshot({ path: join(OUTPUT, 'workflows-overview.png'), fullPage: false });
  await page.close();
});

it(
  'a running run, opened from the runs list: a box per step with its state, the fan-out counts, an edge per need, what a step waits for',
  { timeout: 90_000 },
  async () => {
    held = new Map([
      [SLOW, hold()],
      [FAILING, hold()],
    ]);
    runId = await fire();
    await until(
      async () => {
        const invoice = await stepOf(runId, 'invoice');
        const approve = await stepOf(runId, 'approve');
        const done = invoice?.runs.filter((r) => r.state === 'completed').length;
        return done === ITEMS - 2 && approve?.state === 'waiting';
      },
      '48 invoices done, approve waiting',
      30_000,
    );
    const page = await open('#runs?job=billing');
    await page.waitForFunction(() => document.querySelectorAll('#runs tbody tr').length === 1, null, {
      timeout: 10_000,
    });
    assert.match(await page.locator('#runs tbody tr').innerText(), /billing\s*workflow/);
    await page.click(`#runs tbody a[href="#run/${runId}"]`);
    await page.waitForFunction(() => document.querySelectorAll('#wf-graph g.wf-node').length === 4, null, {
      timeout: 10_000,
    });
    assert.ok(page.url().endsWith(`#workflow/${runId}`), page.url());
    const d = await drawn(page);
    assert.deepEqual(stateOf(d), {
      extract: 'st-completed',
      invoice: 'st-running',
      approve: 'st-waiting',
      report: 'st-waiting',
    });
    assert.match(textOf(d, 'invoice'), /48\/50 done, 2 running/);
    assert.match(textOf(d, 'approve'), /waits for signal "approved"until \d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d\d:\d\d/);
    assert.deepEqual(d.edges, NEEDS);
    assert.deepEqual(
      d.nodes.filter((n) => n.critical).map((n) => n.step),
      ['extract', 'invoice'],
      'so far the run is as long as extract then invoice',
    );
    assert.match(await page.locator('#wf-title').innerText(), new RegExp(`Workflow run ${runId} · billing · running`));
    assert.equal(await page.isVisible('#wf-cancel'), true);
    assert.equal(await page.isVisible('#wf-retry'), false);
    assert.equal(await page.inputValue('#wf-signal-name'), 'approved', 'the signal the step waits for is offered');
    await page.screenshot({ path: join(OUTPUT, 'workflow-running-1400.png'), fullPage: true });
    // On a phone the actions (cancel, the signal's name and data) stay on screen too.
    await page.setViewportSize({ width: 390, height: 900 });
    await page.reload();
    await page.waitForFunction(() => document.querySelectorAll('#wf-graph g.wf-node').length === 4, null, {
      timeout: 10_000,
    });
    assert.equal(await page.isVisible('#wf-signal-send'), true);
    await fits(page, 'a running workflow run at 390 px');
    await page.screenshot({ path: join(OUTPUT, 'workflow-running-390.png'), fullPage: true });
    await page.close();
  },
);

it('sends the signal from the page, with the token and JSON data; a wrong token or bad JSON sends nothing', async () => {
  const page = await open(`#workflow/${runId}`);
  await page.waitForSelector('#wf-signal-send', { state: 'visible', timeout: 10_000 });
  await page.fill('#wf-signal-data', '{"by": "alice"}');
  await page.click('#wf-signal-send');
  assert.match(await page.locator('#notice').innerText(), /admin token/, 'without a token the page asks for it');
  await page.fill('#token-input', 'not-the-token');
  await page.click('#token-set');
  await page.click('#wf-signal-send');
  await page.waitForFunction(() => /wrong bearer token/.test(document.getElementById('notice')?.textContent ?? ''));
  await page.fill('#token-input', ADMIN_TOKEN);
  await page.click('#token-set');
  await page.fill('#wf-signal-data', '{nope');
  await page.click('#wf-signal-send');
  assert.match(await page.locator('#notice').innerText(), /must be JSON/);
  assert.deepEqual((await graph(runId)).signals, [], 'nothing was sent');

  await page.fill('#wf-signal-data', '{"by": "alice"}');
  await page.click('#wf-signal-send');
  await page.waitForFunction(() => /signal "approved" sent/.test(document.getElementById('notice')?.textContent ?? ''));
  await until(async () => (await stepOf(runId, 'approve'))?.state === 'completed', 'approve completes');
  const view = await graph(runId);
  assert.deepEqual(
    (view.signals as { name: string }[]).map((s) => s.name),
    ['approved'],
  );
  await page.waitForFunction(
    () => document.querySelector('#wf-graph g.wf-node[data-step="approve"]')?.classList.contains('st-completed'),
    null,
    { timeout: 10_000 },
  );
  await page.close();
});

it(
  'a failed item fails the run: "48/50 done, 1 running, 1 failed"; the step opens on its items and the failed attempt',
  { timeout: 60_000 },
  async () => {
    held.get(FAILING)!.release();
    await until(async () => (await graph(runId)).state === 'failed', 'the run fails');
    const page = await open(`#workflow/${runId}`);
    await page.waitForFunction(
      () => document.querySelector('#wf-graph g.wf-node[data-step="invoice"]')?.classList.contains('st-failed'),
      null,
      { timeout: 10_000 },
    );
    const d = await drawn(page);
    assert.deepEqual(stateOf(d), {
      extract: 'st-completed',
      invoice: 'st-failed',
      approve: 'st-completed',
      report: 'st-cancelled',
    });
    assert.match(textOf(d, 'invoice'), /48\/50 done, 1 running, 1 failed/);
    assert.equal(await page.isVisible('#wf-retry'), true);
    assert.equal(await page.isVisible('#wf-cancel'), false);
    assert.match(await page.locator('#wf-fields').innerText(), /card declined for customer 13/);
    await page.screenshot({ path: join(OUTPUT, 'workflow-failed-1400.png'), fullPage: false });

    await page.click('#wf-graph g.wf-node[data-step="invoice"]');
    await page.waitForFunction(() => document.querySelectorAll('#wf-items tbody tr').length === 50, null, {
      timeout: 10_000,
    });
    const first = await page.locator('#wf-items tbody tr').first().innerText();
    assert.match(first, new RegExp(`^${FAILING}\\b[\\s\\S]*failed[\\s\\S]*card declined`), 'unfinished items first');
    assert.match(await page.locator('#wf-items tbody').innerText(), /\{"cents": ?\d+, ?"customer": ?\d+\}/);
    await page.locator('#wf-items tbody tr').first().locator('button.wf-open-run').click();
    await page.waitForFunction(() => document.querySelectorAll('#wf-attempts tbody tr').length === 1, null, {
      timeout: 10_000,
    });
    assert.match(await page.locator('#wf-attempts tbody').innerText(), /card declined for customer 13/);
    assert.equal(await page.locator('#wf-attempts pre.stack').count(), 1, 'the failure with its stack');
    await page.screenshot({ path: join(OUTPUT, 'workflow-step-1400.png'), fullPage: true });
    // The one in docs/operating/console.md (docs/console-workflow.png): the run, its graph, the step opened.
    await page.setViewportSize({ width: 1100, height: 1150 });
    await page.evaluate(() => window.scrollTo(0, 0));
    await page.screenshot({ path: join(OUTPUT, 'workflow-page.png'), fullPage: false });
    await page.close();
  },
);

it('at 390 px the run page fits: no horizontal scrolling, buttons on screen, the same graph', async () => {
  const page = await open(`#workflow/${runId}`, 390);
  await page.waitForFunction(() => document.querySelectorAll('#wf-graph g.wf-node').length === 4, null, {
    timeout: 10_000,
  });
  const d = await drawn(page);
  assert.equal(stateOf(d).invoice, 'st-failed');
  assert.match(textOf(d, 'invoice'), /48\/50 done, 1 running, 1 failed/);
  assert.deepEqual(d.edges, NEEDS);
  await fits(page, 'the workflow run page at 390 px');
  await page.click('#wf-graph g.wf-node[data-step="invoice"]');
  await page.waitForFunction(() => document.querySelectorAll('#wf-items tbody tr').length === 50, null, {
    timeout: 10_000,
  });
  await fits(page, 'the workflow run page at 390 px with a step open');
  await page.screenshot({ path: join(OUTPUT, 'workflow-390.png'), fullPage: false });
  await page.goto(`${leader.url}/#overview`);
  await page.waitForFunction(() => document.querySelectorAll('#workflows tbody tr').length === 1, null, {
    timeout: 10_000,
  });
  await fits(page, 'the overview with a workflow at 390 px');
  // The runs list: a step run names its step and item, and links its workflow run.
  await page.goto(`${leader.url}/#runs`);
  await page.waitForFunction(() => document.querySelectorAll('#runs tbody tr').length === 50, null, {
    timeout: 10_000,
  });
  assert.match(
    await page.locator('#runs tbody').innerText(),
    new RegExp(`step invoice \\[\\d+\\] of workflow run ${runId}`),
  );
  assert.ok((await page.locator(`#runs tbody a[href="#workflow/${runId}"]`).count()) > 0);
  await fits(page, 'the runs list with step runs at 390 px');
  await page.screenshot({ path: join(OUTPUT, 'workflow-runs-390.png'), fullPage: false });
  await page.close();
});

it('retry from the page resumes the run from its failed item; it completes', { timeout: 60_000 }, async () => {
  held.get(SLOW)!.release();
  await until(
    async () => (await stepOf(runId, 'invoice'))!.runs.every((r) => r.state !== 'running'),
    'the held item finishes',
  );
  failing = false;
  const page = await open(`#workflow/${runId}`);
  await page.fill('#token-input', ADMIN_TOKEN);
  await page.click('#token-set');
  await page.waitForSelector('#wf-retry', { state: 'visible', timeout: 10_000 });
  await page.click('#wf-retry');
  await until(async () => (await graph(runId)).state === 'completed', 'the retried run completes', 30_000);
  const invoice = (await stepOf(runId, 'invoice'))!;
  assert.equal(invoice.runs.find((r) => r.item === FAILING)?.attempts, 2, 'the failed item ran again');
  assert.equal(invoice.runs.find((r) => r.item === 0)?.attempts, 1, 'a completed item did not');
  assert.equal((await stepOf(runId, 'report'))?.state, 'completed');
  await page.waitForFunction(
    () => [...document.querySelectorAll('#wf-graph g.wf-node')].every((g) => g.classList.contains('st-completed')),
    null,
    { timeout: 10_000 },
  );
  const d = await drawn(page);
  assert.deepEqual(
    d.nodes.filter((n) => n.critical).map((n) => n.step),
    ['extract', 'invoice', 'report'],
    'the retried invoice step made the run long, not the approval',
  );
  assert.match(await page.locator('#wf-critical').innerText(), /^extract .+ → invoice .+ → report .+ = .+/);
  await page.screenshot({ path: join(OUTPUT, 'workflow-retried-1400.png'), fullPage: false });
  await page.close();
});

it('cancel from the page cancels a waiting run and its steps', { timeout: 60_000 }, async () => {
  held = new Map();
  const id = await fire();
  await until(async () => (await stepOf(id, 'approve'))?.state === 'waiting', 'the second run waits for approval');
  const page = await open(`#workflow/${id}`);
  await page.fill('#token-input', ADMIN_TOKEN);
  await page.click('#token-set');
  await page.waitForSelector('#wf-cancel', { state: 'visible', timeout: 10_000 });
  await page.click('#wf-cancel');
  await until(async () => (await graph(id)).state === 'cancelled', 'the run is cancelled');
  await page.waitForFunction(
    () => document.querySelector('#wf-graph g.wf-node[data-step="approve"]')?.classList.contains('st-cancelled'),
    null,
    { timeout: 10_000 },
  );
  assert.equal(stateOf(await drawn(page)).report, 'st-cancelled');
  await page.close();
  assert.deepEqual(pageErrors, []);
});
