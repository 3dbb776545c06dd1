/**
 * The ledger side of runtime schedules on real PostgreSQL: versions kept with who and before /
 * after, the commit's re-check of the version in effect at each slot (the boundary rule), the
 * NOTIFY delivered at commit, and one-off runs once per key under the fence.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Ledger } from '../../src/ledger/ledger.js';
import type { FireRequest } from '../../src/ledger/fire-ledger.js';
import type { ScheduleSpec } from '../../src/ledger/schedule-ledger.js';
import { ScheduleExistsError, ScheduleNotFoundError, StaleTokenError } from '../../src/errors.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { readMigrationFiles, type MigrationMeta } from 'drizzle-orm/migrator';
import { migrateDatabase, migrationsFolder, rebase } from '../../src/db/migrate.js';
import { scheduleIdOf } from '../../src/cron/job-names.js';

const spec = (cron: string, o: Partial<ScheduleSpec> = {}): ScheduleSpec => ({
  handler: 'report',
  cron,
  timezone: 'UTC',
  misfire: 'all',
  overlap: 'allow',
  catchUpWindowMs: 300_000,
  misfireGraceMs: 1000,
  payload: { v: cron },
  paused: false,
  ...o,
});

describe('runtime schedules in the ledger (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  const leader = (token: bigint) => ({
    fenceResource: 'scheduler/x',
    token,
    replicaId: 'r1',
    stillLeading: () => true,
  });

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool, db.schema);
  });
  after(async () => {
    await db.drop();
  });

  it('keeps every version; a fire commits only under the version in effect at its instant', async () => {
    const listener = new pg.Client({ connectionString: db.url });
    await listener.connect();
    const heard: string[] = [];
    listener.on('notification', (m) => heard.push(m.payload ?? ''));
    await listener.query(`LISTEN "${ledger.tables.scheduleChannel}"`);
    try {
      const s = ledger.schedules;
      const v1 = await s.create('a', spec('* * * * * *'), 'admin');
      await assert.rejects(s.create('a', spec('* * * * * *'), 'admin'), ScheduleExistsError);
      const v2 = await s.change('a', 'update', (c) => ({ ...c, cron: '*/2 * * * * *' }), 'ops');
      const v3 = await s.change('a', 'pause', (c) => ({ ...c, paused: true }), 'ops');
      const v4 = await s.delete('a', 'admin');
      await assert.rejects(
        s.change('a', 'update', (c) => c, 'ops'),
        ScheduleNotFoundError,
      );
      assert.deepEqual(
        [v1, v2, v3, v4].map((v) => v.version),
        [1, 2, 3, 4],
      );
      const versions = await s.versions('a');
      assert.deepEqual(
        versions.map((v) => [v.action, v.actor, v.before?.cron ?? null, v.after?.cron ?? null]),
        [
          ['create', 'admin', null, '* * * * * *'],
          ['update', 'ops', '* * * * * *', '*/2 * * * * *'],
          ['pause', 'ops', '*/2 * * * * *', '*/2 * * * * *'],
          ['delete', 'admin', '*/2 * * * * *', null],
        ],
      );
      const E = versions.map((v) => v.effectiveAt.getTime());
      assert.ok(E[0]! < E[1]! && E[1]! < E[2]! && E[2]! < E[3]!, 'effective instants grow');

      const fire = (at: number, version: number): FireRequest => ({
        job: 'report/a',
        scheduledAt: new Date(at),
        trigger: 'schedule',
        schedule: { id: 'a', version },
        payload: { version },
      });
      const res = await ledger.fires.commitFires(
        [
          fire(E[1]! - 1, 1), // before the update: v1's
          fire(E[1]!, 1), // at the update: no longer v1's
          fire(E[1]!, 2), // v2's
          fire(E[2]!, 3), // paused
          fire(E[3]! + 5, 3), // deleted
          fire(E[0]! - 1, 1), // before the schedule existed
        ],
        leader(3n),
      );
      assert.deepEqual(
        res.committed.map((c) => [c.scheduledAt.getTime(), c.job]),
        [
          [E[1]! - 1, 'report/a'],
          [E[1]!, 'report/a'],
        ],
      );
      assert.equal(res.outdated, 4);
      const rows = await db.pool.query<{ schedule_version: number; payload: { version: number } }>(
        "SELECT schedule_version, payload FROM cw_runs WHERE job = 'report/a' ORDER BY scheduled_at",
      );
      assert.deepEqual(
        rows.rows.map((r) => [r.schedule_version, r.payload.version]),
        [
          [1, 1],
          [2, 2],
        ],
      );
      // Every change was announced, at its commit, with its version.
      for (let i = 0; i < 50 && heard.length < 4; i++) await new Promise((r) => setTimeout(r, 20));
      assert.deepEqual(heard, ['a 1', 'a 2', 'a 3', 'a 4']);
      // Deleted: gone from the list unless asked for, and back under its id as a new version.
      assert.deepEqual(await s.list(), []);
      assert.equal((await s.list({ includeDeleted: true }))[0]?.deletedAt?.getTime(), E[3]);
      const back = await s.create('a', spec('0 * * * * *'), 'admin');
      assert.equal(back.version, 5);
      assert.equal((await s.versionsInEffect(new Date(E[3]! + 1), ['a'])).length, 2, 'the delete and the new one');
    } finally {
      await listener.end();
    }
  });

  it('a one-off run commits once per key under the fence; a stale leader commits none', async () => {
    const once = { job: 'report', at: new Date('2026-01-01T00:00:00Z'), key: 'k1', payload: { n: 1 } };
    const a = await ledger.schedules.commitOnce(once, leader(7n));
    const b = await ledger.schedules.commitOnce({ ...once, payload: { n: 2 } }, leader(7n));
    assert.equal(a?.created, true);
    assert.equal(b?.created, false);
    assert.equal(b?.runId, a?.runId);
    // Another key at the same instant is its own run, and a scheduled fire there is not refused.
    const c = await ledger.schedules.commitOnce({ ...once, key: 'k2' }, leader(7n));
    assert.notEqual(c?.runId, a?.runId);
    const fired = await ledger.fires.commitFires(
      [{ job: 'report', scheduledAt: once.at, trigger: 'schedule' }],
      leader(7n),
    );
    assert.equal(fired.committed.length, 1);
    await assert.rejects(ledger.schedules.commitOnce({ ...once, key: 'k3' }, leader(6n)), StaleTokenError);
    const claim = await ledger.runs.claim(a.runId, 'w1');
    assert.equal(claim.status, 'claimed');
    assert.deepEqual(claim.status === 'claimed' && [claim.claim.payload, claim.claim.onceKey], [{ n: 1 }, 'k1']);
    // A runtime schedule's runs belong to its handler: while "report" is defined, they are not
    // settled as runs of a removed job; once it is not, they are, like the handler's own.
    await ledger.fires.commitFires([{ job: 'report/x', scheduledAt: once.at, trigger: 'schedule' }], leader(7n));
    await new Promise((r) => setTimeout(r, 5));
    assert.deepEqual(await ledger.fires.cancelRunsOfUndefinedJobs(['report'], 'job removed', 0), []);
    const gone = await ledger.fires.cancelRunsOfUndefinedJobs(['other'], 'job removed', 0);
    assert.ok(
      gone.some((r) => r.job === 'report/x'),
      JSON.stringify(gone.map((r) => r.job)),
    );
  });

  it("a ledger that already fired a runtime schedule's slot twice (two handlers' names) migrates: both rows kept, the slot taken", async () => {
    // Issue 25 #1, before migration 0012: "report/hx" ran slot 1, then a backfill as "tick/hx" ran it again.
    const old = await createTestDatabase({ migrate: false });
    try {
      const migrations = readMigrationFiles({ migrationsFolder });
      const before = migrations.findIndex((m) => m.sql.some((q) => q.includes('cw_runs_schedule_slot')));
      assert.ok(before > 0, 'the migration that keys runtime schedules by id');
      await migrateTo(old.url, migrations.slice(0, before));
      const slot = (n: number) => new Date(Date.UTC(2026, 4, 1, 0, 0, n));
      const insert = (job: string, n: number, trigger: string) =>
        old.pool.query(
          `INSERT INTO cronwarden.cw_runs (job, scheduled_at, trigger, leader_token, leader_id, state)
           VALUES ($1, $2, $3, 5, 'old', 'completed') RETURNING id::text`,
          [job, slot(n), trigger],
        );
      const first = (await insert('report/hx', 1, 'schedule')).rows[0].id as string;
      const again = (await insert('tick/hx', 1, 'backfill')).rows[0].id as string;
      await insert('report/hx', 2, 'schedule');
      await insert('tick/hx', 3, 'schedule');
      await insert('tick/hx', 1, 'manual');
      // node-cron tasks may have any name, '/' included: never a runtime schedule.
      await insert('node-cron:a/b', 1, 'schedule');
      await insert('node-cron:c/b', 1, 'schedule');
      await old.pool.query(
        `INSERT INTO cronwarden.cw_job_state (job, last_scheduled_at) VALUES ('report/hx', $1), ('tick/hx', $2)`,
        [slot(2), slot(3)],
      );

      assert.deepEqual(
        (await migrateDatabase(old.url)).applied,
        migrations.slice(before).map((_, i) => migrationTag(before + i)),
      );
      const rows = await old.pool.query<{
        id: string;
        job: string;
        schedule_id: string | null;
        duplicate_of: string | null;
      }>('SELECT id::text, job, schedule_id, duplicate_of::text FROM cronwarden.cw_runs ORDER BY id');
      assert.equal(rows.rowCount, 7, 'every run is still there, readable');
      for (const r of rows.rows)
        assert.equal(r.schedule_id, scheduleIdOf(r.job) ?? null, `${r.job}: the SQL and the code agree`);
      assert.deepEqual(
        rows.rows.filter((r) => r.duplicate_of !== null).map((r) => [r.id, r.duplicate_of]),
        [[again, first]],
        'the second run of slot 1 is marked as repeating the first',
      );
      // From now on the slot is the schedule's, under any name; its last fire is the newest of both.
      const migrated = new Ledger(old.pool, 'cronwarden');
      const retry = await migrated.fires.commitFires(
        [1, 2, 3, 4].map((n): FireRequest => ({ job: 'tick/hx', scheduledAt: slot(n), trigger: 'backfill' })),
        leader(5n),
      );
      assert.deepEqual(
        retry.committed.map((r) => r.scheduledAt.getTime()),
        [slot(4).getTime()],
      );
      assert.equal((await migrated.fires.lastFired()).get('/hx')?.getTime(), slot(4).getTime());
    } finally {
      await old.drop();
    }
  });
});

/** Apply `migrations` to the default schema as migrateDatabase does, journal included: an older ledger. */
async function migrateTo(url: string, migrations: MigrationMeta[]): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('BEGIN');
    await client.query('CREATE SCHEMA cronwarden');
    await client.query(
      'CREATE TABLE cronwarden.__drizzle_migrations (id SERIAL PRIMARY KEY, hash text NOT NULL, created_at bigint)',
    );
    await client.query('SET LOCAL search_path TO cronwarden');
    for (const m of migrations) {
      for (const statement of m.sql) if (statement.trim()) await client.query(rebase(statement, 'cronwarden'));
      await client.query('INSERT INTO cronwarden.__drizzle_migrations (hash, created_at) VALUES ($1, $2)', [
        m.hash,
        m.folderMillis,
      ]);
    }
    await client.query('COMMIT');
  } finally {
    await client.end();
  }
}

function migrationTag(index: number): string {
  const journal = JSON.parse(readFileSync(join(migrationsFolder, 'meta', '_journal.json'), 'utf8')) as {
    entries: { tag: string }[];
  };
  return journal.entries[index]!.tag;
}
