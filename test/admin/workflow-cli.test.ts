/**
 * Workflows through the admin API and the real CLI (a child process), against two in-process
 * replicas with their admin HTTP (in a thread of its own): `cronwarden workflows` lists them,
 * `cronwarden run ID` shows a workflow run's graph, `cronwarden signal` lets a waiting step go on,
 * `cronwarden cancel` cancels a run; bad input is a clear 4xx or exit 2.
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { defineWorkflow } from '../../src/jobs/define-workflow.js';
import { Cluster, ADMIN_TOKEN, firstLeader, json, type Node } from './support.js';
import { until } from './console-support.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

const root = fileURLToPath(new URL('../../', import.meta.url));

function cli(args: string[], token?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/cronwarden.js', ...args], {
      cwd: root,
      env: { ...process.env, CRONWARDEN_ADMIN_TOKEN: token ?? '' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

const approval = () => [
  defineWorkflow({ name: 'approval', schedule: '0 0 1 1 *' })
    .step('prepare', () => ({ amount: 7 }))
    .step('items', { needs: ['prepare'], map: (i) => [i.prepare.amount, 8, 9], run: (_ctx, n) => n * 2 })
    .step('approve', {
      needs: ['items'],
      waitFor: { signal: 'approved', timeoutMs: 600_000 },
      run: (ctx, i) => ({ total: i.items.reduce((a, b) => a + b, 0), by: ctx.received?.data }),
    }),
];

let db: TestDatabase;
let cluster: Cluster;
let leader: Node;
let follower: Node;

const stateOf = async (id: string) =>
  (await db.pool.query<{ state: string }>(`SELECT state FROM ${db.schema}.cw_runs WHERE id = $1`, [id])).rows[0]?.state;

async function fire(): Promise<string> {
  const res = await fetch(`${leader.url}/api/jobs/approval/trigger`, {
    method: 'POST',
    headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
  });
  assert.equal(res.status, 200);
  const id = (await json(res)).runId as string;
  await until(async () => {
    const g = await db.pool.query(
      `SELECT 1 FROM ${db.schema}.cw_workflow_steps WHERE workflow_run_id = $1 AND step = 'items' AND state = 'completed'`,
      [id],
    );
    return g.rowCount === 1;
  }, 'the run waits for its signal');
  return id;
}

before(async () => {
  db = await createTestDatabase();
  cluster = new Cluster(db.url, db.schema, undefined, approval);
  const a = await cluster.add('wcli-a');
  const b = await cluster.add('wcli-b');
  const l = await firstLeader([a.replica, b.replica]);
  leader = l === a.replica ? a : b;
  follower = l === a.replica ? b : a;
});
after(async () => {
  await cluster.stopAll();
  await db.drop();
});

it('cronwarden workflows lists each workflow with its steps', { timeout: 60_000 }, async () => {
  const out = await cli(['workflows', '--url', follower.url]);
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stdout, /^approval\s+0 0 1 1 \*\s+UTC\s+\S+\s+prepare items\[\]<-prepare approve<-items$/m);
});

it('run ID shows the graph; signal lets the waiting step go on; the run completes', { timeout: 60_000 }, async () => {
  const id = await fire();
  const shown = await cli(['run', id, '--url', follower.url]);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /^workflow\s+approval \(definition [0-9a-f]{10}\)\s+running$/m);
  assert.match(shown.stdout, /^⋔ items\s+prepare\s+completed\s+3\/3 items done/m);
  assert.match(shown.stdout, /^approve\s+items\s+waiting\s+-\s+signal "approved" until /m);

  const noToken = await cli(['signal', id, 'approved', '--url', follower.url]);
  assert.equal(noToken.code, 2, 'a missing token is a usage error');
  const badData = await cli(['signal', id, 'approved', '--data', '{nope', '--url', follower.url], ADMIN_TOKEN);
  assert.equal(badData.code, 2);
  assert.match(badData.stderr, /--data must be JSON/);
  const sent = await cli(
    ['signal', id, 'approved', '--data', '{"ok":true}', '--by', 'alice', '--url', follower.url],
    ADMIN_TOKEN,
  );
  assert.equal(sent.code, 0, sent.stderr);
  assert.match(sent.stdout, /signal "approved" sent to run \d+; 1 step run\(s\) started/);
  await until(async () => (await stateOf(id)) === 'completed', 'the run completes');
  const graph = await json(await fetch(`${follower.url}/api/runs/${id}/workflow`));
  const approve = (graph.steps as { name: string; runs: { result: string }[] }[]).find((s) => s.name === 'approve')!;
  assert.deepEqual(JSON.parse(approve.runs[0]!.result), { total: 48, by: { ok: true } });
  assert.deepEqual(
    (graph.signals as { name: string; sentBy: string }[]).map((s) => [s.name, s.sentBy]),
    [['approved', 'admin (alice)']],
  );
  const again = await cli(['signal', id, 'approved', '--url', follower.url], ADMIN_TOKEN);
  assert.equal(again.code, 0);
  assert.match(again.stdout, /had a signal "approved" already/);
});

it(
  'cancel cancels a waiting workflow run; cancelling it again is refused; bad ids and names are 4xx',
  { timeout: 60_000 },
  async () => {
    const id = await fire();
    const out = await cli(['cancel', id, '--reason', 'not today', '--url', follower.url], ADMIN_TOKEN);
    assert.equal(out.code, 0, out.stderr);
    assert.equal(await stateOf(id), 'cancelled');
    const again = await cli(['cancel', id, '--url', follower.url], ADMIN_TOKEN);
    assert.equal(again.code, 2, 'not active: not retryable');
    assert.match(again.stderr, /is not active/);
    const auth = { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' };
    for (const [path, status] of [
      ['/api/runs/abc/cancel', 400],
      ['/api/runs/1/signal/no%20spaces', 400],
      ['/api/runs/999999/signal/approved', 404],
    ] as const) {
      const res = await fetch(`${follower.url}${path}`, { method: 'POST', headers: auth, body: '{}' });
      assert.equal(res.status, status, path);
    }
    const view = await fetch(`${follower.url}/api/runs/999999/workflow`);
    assert.equal(view.status, 404);
  },
);
