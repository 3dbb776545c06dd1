/**
 * The CLI of runtime schedules, one-off runs and backfill (`bin/cronwarden.js` in a child process)
 * against two in-process replicas with their admin HTTP: every command through a follower, the
 * refusal of a bad cron with defineJob's message and exit code 2, and a backfill run twice.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { defineJob } from '../../src/jobs/define-job.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { ADMIN_TOKEN, Cluster, firstLeader } from './support.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

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

describe('cronwarden schedule / once / backfill', { timeout: 120_000 }, () => {
  let db: TestDatabase;
  let cluster: Cluster;
  let url = '';

  before(async () => {
    db = await createTestDatabase();
    cluster = new Cluster(db.url, db.schema);
    const nodes = [await cluster.add('cli-a'), await cluster.add('cli-b')];
    const leader = await firstLeader(nodes.map((n) => n.replica));
    url = nodes.find((n) => n.replica !== leader)!.url; // a follower: mutations are forwarded
  });
  after(async () => {
    await cluster?.stopAll();
    await db?.drop();
  });

  it('creates, updates, pauses, lists, shows and deletes a schedule', async () => {
    const created = await cli(url, 'schedule', 'create', 'acme', '--handler', 'tick', '--cron', '*/5 * * * *');
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.stdout, /^created acme\ttick\/acme\t\*\/5 \* \* \* \* \(UTC\)\tv1\tnext /);
    const updated = await cli(url, 'schedule', 'update', 'acme', '--timezone', 'Europe/Berlin', '--payload', '{"a":1}');
    assert.match(updated.stdout, /Europe\/Berlin\)\tv2/);
    assert.match((await cli(url, 'schedule', 'pause', 'acme')).stdout, /^paused acme.*v3\tpaused/);
    assert.match((await cli(url, 'schedule', 'list')).stdout, /^acme\ttick\/acme/);
    const show = JSON.parse((await cli(url, 'schedule', 'show', 'acme')).stdout) as {
      schedule: { payload: unknown };
      versions: { action: string }[];
    };
    assert.deepEqual(show.schedule.payload, { a: 1 });
    assert.deepEqual(
      show.versions.map((v) => v.action),
      ['create', 'update', 'pause'],
    );
    assert.match((await cli(url, 'schedule', 'delete', 'acme')).stdout, /^deleted acme.*\tdeleted$/m);
    assert.equal((await cli(url, 'schedule', 'list')).stdout, '');
  });

  it('refuses a bad cron with the message defineJob gives, exit 2, nothing stored', async () => {
    const bad = await cli(url, 'schedule', 'create', 'bad', '--handler', 'tick', '--cron', '* * * *');
    assert.equal(bad.code, 2);
    let expected = '';
    try {
      defineJob({ name: 'bad', schedule: '* * * *', handler: () => {} });
    } catch (err) {
      expected = (err as Error).message;
    }
    assert.ok(bad.stderr.includes(expected), bad.stderr);
    assert.equal((await db.pool.query("SELECT 1 FROM cw_schedules WHERE id = 'bad' AND version > 0")).rowCount, 0);
  });

  it('a one-off run once per key, and a backfill that adds nothing the second time', async () => {
    const first = await cli(url, 'once', 'yearly', '--key', 'k-1', '--payload', '{"n":1}');
    assert.match(first.stdout, /^yearly: committed run \d+ at /);
    const second = await cli(url, 'once', 'yearly', '--key', 'k-1');
    assert.match(second.stdout, /already committed for this key: run \d+/);
    assert.equal(first.stdout.match(/run (\d+)/)![1], second.stdout.match(/run (\d+)/)![1]);
    const range = ['--from', '2019-06-01T00:00:00Z', '--to', '2025-06-01T00:00:00Z'];
    const filled = await cli(url, 'backfill', 'yearly', ...range);
    assert.equal(filled.code, 0, filled.stderr);
    assert.match(filled.stdout, /^yearly: backfilled 6 slot\(s\); 0 of 6 were already in the ledger$/m);
    const again = await cli(url, 'backfill', 'yearly', ...range);
    assert.match(again.stdout, /backfilled 0 slot\(s\); 6 of 6 were already in the ledger/);
    const future = await cli(
      url,
      'backfill',
      'yearly',
      '--from',
      '2020-01-01T00:00:00Z',
      '--to',
      '2999-01-01T00:00:00Z',
    );
    assert.equal(future.code, 2);
    assert.match(future.stderr, /in the future/);
    const fast = await cli(url, 'backfill', 'yearly', ...range, '--rate', '3000');
    assert.equal(fast.code, 2);
    assert.match(fast.stderr, /^cronwarden: --rate: must be from 1 to 2000$/m, 'names the option the CLI has');
    const fastest = await cli(url, 'backfill', 'yearly', ...range, '--rate', '2000');
    assert.equal(fastest.code, 0, fastest.stderr);
  });

  it('a conflict that trying again cannot change (schedule exists) exits 2', async () => {
    assert.equal((await cli(url, 'schedule', 'create', 'twice', '--handler', 'tick', '--cron', '0 0 1 1 *')).code, 0);
    const again = await cli(url, 'schedule', 'create', 'twice', '--handler', 'tick', '--cron', '0 0 1 1 *');
    assert.equal(again.code, 2, again.stderr);
    assert.match(again.stderr, /409 .*exists/);
  });

  it("a one-off run far ahead is not the job's last outcome until it is due", async () => {
    const before = await cli(url, 'status', '--json');
    const lastOf = (out: string) =>
      (JSON.parse(out) as { jobs: { name: string; lastRun: { scheduledAt: string } | null }[] }).jobs.find(
        (j) => j.name === 'yearly',
      )!.lastRun;
    const far = await cli(url, 'once', 'yearly', '--key', 'far', '--at', '9999-12-31T00:00:00Z');
    assert.equal(far.code, 0, far.stderr);
    const after = await cli(url, 'status', '--json');
    assert.deepEqual(lastOf(after.stdout), lastOf(before.stdout), 'a run not due yet is not the last outcome');
    assert.notEqual(lastOf(after.stdout)?.scheduledAt.slice(0, 4), '9999');
  });

  it('schedule list pages through every schedule (the API answers a page at a time, with nextAfter)', async () => {
    // 5,100 deleted schedules straight into the ledger: more than one page of the API's 5,000.
    await db.pool.query(
      `INSERT INTO cw_schedules (id, handler, cron, timezone, misfire, overlap, catch_up_window_ms, misfire_grace_ms,
         payload, paused, version, deleted_at)
       SELECT 'bulk-' || lpad(g::text, 5, '0'), 'tick', '0 0 1 1 *', 'UTC', 'all', 'allow', 0, 0, NULL, false, 1, now()
       FROM generate_series(1, 5100) g`,
    );
    const page = (await (await fetch(`${url}/api/schedules?deleted=1&limit=2&after=bulk-00010`)).json()) as {
      schedules: { id: string }[];
      nextAfter: string | null;
    };
    assert.deepEqual(
      page.schedules.map((x) => x.id),
      ['bulk-00011', 'bulk-00012'],
    );
    assert.equal(page.nextAfter, 'bulk-00012');
    const list = await cli(url, 'schedule', 'list', '--deleted');
    assert.equal(list.code, 0, list.stderr);
    const ids = list.stdout.split('\n').filter((l) => l.startsWith('bulk-'));
    assert.equal(ids.length, 5100, 'every schedule, not the first page');
    assert.equal(new Set(ids).size, 5100);
    const json = JSON.parse((await cli(url, 'schedule', 'list', '--deleted', '--json')).stdout) as {
      schedules: { id: string }[];
    };
    assert.equal(json.schedules.filter((x) => x.id.startsWith('bulk-')).length, 5100);
  });
});
