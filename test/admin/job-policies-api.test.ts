/**
 * Issue 16 on the admin API (in-process replicas, real PostgreSQL and Redis): pause with a reason
 * and an expiry (validated, who recorded), the policies and pauses in /api/jobs, and the preview
 * GET /api/jobs/:name/next.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { ADMIN_TOKEN, Cluster, firstLeader, json, type Node } from './support.js';

let db: TestDatabase;
let cluster: Cluster;
let node: Node;

before(async () => {
  db = await createTestDatabase();
  cluster = new Cluster(db.url, db.schema);
  node = await cluster.add('pol-a');
  await firstLeader([node.replica]);
});
after(async () => {
  await cluster.stopAll();
  await db.drop();
});

const pause = (body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${node.url}/api/jobs/tick/pause`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

async function tickJob(): Promise<Record<string, unknown>> {
  const body = await json(await fetch(`${node.url}/api/jobs`));
  return body.jobs.find((j: { name: string }) => j.name === 'tick');
}

describe('pause with a reason and an expiry', () => {
  it('is recorded with who, why and until, and shown in /api/jobs with the job policies', async () => {
    const until = new Date(Math.ceil((Date.now() + 3_600_000) / 1000) * 1000).toISOString();
    const res = await pause({ reason: 'ledger migration', until }, { 'x-cronwarden-user': 'alice' });
    assert.equal(res.status, 200);
    const body = await json(res);
    assert.deepEqual(
      [body.paused, body.pausedBy, body.pausedReason, body.pausedUntil],
      [true, 'admin (alice)', 'ledger migration', until],
    );
    const tick = await tickJob();
    assert.equal(tick.paused, true);
    assert.equal(tick.pausedBy, 'admin (alice)');
    assert.equal(tick.pausedReason, 'ledger migration');
    assert.equal(tick.pausedUntil, until);
    assert.ok(!Number.isNaN(Date.parse(String(tick.pausedAt))));
    assert.deepEqual([tick.dstRepeat, tick.dstGap, tick.maxCatchUp, tick.overlapQueueMax], ['first', 'shift', 1000, 1]);
  });

  it('refuses a bad body with 400 and changes nothing', async () => {
    // The pause as stored (the job's next fires move on with the clock while the cases run).
    const pauseOf = async () => {
      const j = await tickJob();
      return [j.paused, j.pausedBy, j.pausedReason, j.pausedAt, j.pausedUntil];
    };
    const before = await pauseOf();
    const cases: [unknown, RegExp][] = [
      [{ until: '2001-01-01T00:00:00Z' }, /until: must be in the future/],
      [{ until: 'tomorrow' }, /until: must be an ISO-8601 instant/],
      [{ until: '2026-02-30T00:00:00' }, /until: must be an ISO-8601 instant with a zone/],
      [{ reason: 'x'.repeat(501) }, /reason: must be at most 500 characters/],
      [{ reason: 'two\nlines' }, /reason: must be one line/],
      [{ reason: 5 }, /reason: must be a string/],
      [{ reasn: 'typo' }, /reasn|unrecognized/i],
    ];
    for (const [body, message] of cases) {
      const res = await pause(body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.match(String((await json(res)).error), message, JSON.stringify(body));
    }
    assert.deepEqual(await pauseOf(), before);
  });

  it('without a body pauses until resumed, by "admin"; resume clears it all', async () => {
    const res = await fetch(`${node.url}/api/jobs/tick/pause`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    assert.equal(res.status, 200);
    const tick = await tickJob();
    assert.deepEqual([tick.paused, tick.pausedBy, tick.pausedReason, tick.pausedUntil], [true, 'admin', null, null]);
    const resumed = await fetch(`${node.url}/api/jobs/tick/resume`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    assert.equal(resumed.status, 200);
    const after = await tickJob();
    assert.deepEqual([after.paused, after.pausedBy, after.pausedUntil], [false, null, null]);
  });

  it('needs the token', async () => {
    const res = await fetch(`${node.url}/api/jobs/tick/pause`, { method: 'POST' });
    assert.equal(res.status, 401);
    assert.equal((await tickJob()).paused, false);
  });
});

describe('GET /api/jobs/:name/next', () => {
  it('lists the next fires with local time, offset and DST marks', async () => {
    const body = await json(await fetch(`${node.url}/api/jobs/yearly/next?count=3`));
    assert.equal(body.timezone, 'Europe/Berlin');
    assert.equal(body.fires.length, 3);
    const year = new Date().getUTCFullYear() + 1;
    assert.deepEqual(body.fires[0], {
      at: `${year - 1}-12-31T23:00:00.000Z`,
      local: `${year}-01-01T00:00:00+01:00`,
      offset: '+01:00',
      dstDay: false,
      dst: null,
      paused: false,
    });
    assert.equal((await json(await fetch(`${node.url}/api/jobs/tick/next`))).fires.length, 20, 'default count 20');
  });

  it('refuses a bad count and an unknown job', async () => {
    for (const q of ['0', '201', 'x']) {
      const res = await fetch(`${node.url}/api/jobs/yearly/next?count=${q}`);
      assert.equal(res.status, 400, q);
      assert.match(String((await json(res)).error), /count/);
    }
    assert.equal((await fetch(`${node.url}/api/jobs/nope/next`)).status, 404);
  });
});
