/**
 * Issue 25 #1 through the CLI (`bin/cronwarden.js` against two in-process replicas): a runtime
 * schedule is its id, not its handler. After `schedule update hx --handler tick`, and after a delete
 * and a re-create of the id with another handler, a backfill from the schedule's creation fires
 * only the slots no run of the schedule holds, under any handler's name: none twice.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { defineJob } from '../../src/jobs/define-job.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { ADMIN_TOKEN, Cluster, firstLeader } from './support.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function cli(url: string, ...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['bin/cronwarden.js', ...args, '--url', url], {
      cwd: root,
      env: { ...process.env, CRONWARDEN_ADMIN_TOKEN: ADMIN_TOKEN },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

/** Two handlers that fire from code only once a year: every run below is the runtime schedule's. */
const jobs = () =>
  ['report', 'tick'].map((name) => defineJob({ name, schedule: '0 0 1 1 *', handler: async () => {} }));

describe('a runtime schedule whose handler changes keeps its slots (CLI)', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  let cluster: Cluster;
  let url = '';

  before(async () => {
    db = await createTestDatabase();
    cluster = new Cluster(db.url, db.schema, undefined, jobs);
    const nodes = [await cluster.add('hc-a'), await cluster.add('hc-b')];
    const leader = await firstLeader(nodes.map((n) => n.replica));
    url = nodes.find((n) => n.replica !== leader)!.url;
  });
  after(async () => {
    await cluster?.stopAll();
    await db?.drop();
  });

  /** The schedule's runs (not manual, not one-off) by slot, under whichever handler's name. */
  const slots = async (id: string) =>
    (
      await db.pool.query<{ at: Date; runs: string[] }>(
        `SELECT scheduled_at AS at, array_agg(job || ' ' || trigger ORDER BY id) AS runs FROM cw_runs
         WHERE split_part(job, '/', 2) = $1 AND trigger NOT IN ('manual', 'once')
         GROUP BY scheduled_at ORDER BY scheduled_at`,
        [id],
      )
    ).rows;
  const runsOf = async (job: string) =>
    (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM cw_runs WHERE job = $1', [job])).rows[0]!.n;
  const until = async (what: () => Promise<boolean>) => {
    for (let i = 0; i < 100 && !(await what()); i++) await sleep(100);
    assert.ok(await what(), 'in time');
  };

  it('update --handler, then backfill from the creation: the slots that ran under the old name are taken', async () => {
    const createdAt = new Date();
    const created = await cli(url, 'schedule', 'create', 'hx', '--handler', 'report', '--cron', '* * * * * *');
    assert.equal(created.code, 0, created.stderr);
    await until(async () => (await runsOf('report/hx')) >= 3);
    const updated = await cli(url, 'schedule', 'update', 'hx', '--handler', 'tick');
    assert.equal(updated.code, 0, updated.stderr);
    assert.match(updated.stdout, /tick\/hx/);
    await until(async () => (await runsOf('tick/hx')) >= 3);
    const to = new Date(Date.now() - 1500); // slots the fire loop has committed by now
    const filled = await cli(url, 'backfill', 'tick/hx', '--from', createdAt.toISOString(), '--to', to.toISOString());
    assert.equal(filled.code, 0, filled.stderr);
    const [, inserted, existing, total] = /backfilled (\d+) slot\(s\); (\d+) of (\d+)/.exec(filled.stdout) ?? [];
    const held = (await slots('hx')).filter((s) => s.at <= to);
    assert.deepEqual(
      held.filter((s) => s.runs.length > 1),
      [],
      'no slot ran twice, under any name',
    );
    assert.equal(Number(total), held.length, 'every slot of the range is held, once');
    assert.equal(Number(inserted) + Number(existing), Number(total));
    const ranAs = (name: string) =>
      held.filter((s) => s.runs[0]!.startsWith(`${name} `) && !s.runs[0]!.endsWith(' backfill')).length;
    assert.ok(ranAs('report/hx') >= 3 && ranAs('tick/hx') >= 1, `both names' slots are in the range: ${filled.stdout}`);
    assert.ok(Number(existing) >= ranAs('report/hx') + ranAs('tick/hx'), filled.stdout);
  });

  it('delete, then re-create the id with another handler, then backfill: still each slot once', async () => {
    const from = (await slots('hx'))[0]!.at;
    assert.equal((await cli(url, 'schedule', 'delete', 'hx')).code, 0);
    await sleep(1500);
    const again = await cli(url, 'schedule', 'create', 'hx', '--handler', 'report', '--cron', '* * * * * *');
    assert.equal(again.code, 0, again.stderr);
    await until(async () => (await slots('hx')).at(-1)!.runs.some((r) => r.startsWith('report/hx schedule')));
    await sleep(1500);
    const to = new Date(Date.now() - 1500);
    const filled = await cli(url, 'backfill', 'report/hx', '--from', from.toISOString(), '--to', to.toISOString());
    assert.equal(filled.code, 0, filled.stderr);
    assert.match(filled.stdout, /backfilled \d+ slot\(s\)/);
    assert.deepEqual(
      (await slots('hx')).filter((s) => s.runs.length > 1),
      [],
      'no slot ran twice, under any name',
    );
  });
});
