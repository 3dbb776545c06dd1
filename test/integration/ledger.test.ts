import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { bigint, pgTable, text } from 'drizzle-orm/pg-core';
import { count, eq } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { migrateDatabase } from '../../src/db/migrate.js';
import { Ledger, type Claim } from '../../src/ledger/ledger.js';
import { idempotencyKey } from '../../src/jobs/run-executor.js';
import { StaleTokenError, SupersededError } from '../../src/errors.js';
import { slotToken } from '../../src/ledger/slot-token.js';
import { MAX_ERROR_MESSAGE, MAX_ERROR_STACK } from '../../src/ledger/stored-text.js';
import { runDetail } from '../../src/ledger/run-reads.js';
import { tablesIn } from '../../src/db/tables.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';

describe('Ledger (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  const leader = (token: bigint, id = 'r1') => ({
    fenceResource: 'scheduler/x',
    token,
    replicaId: id,
    stillLeading: () => true,
  });
  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool);
  });
  after(async () => {
    await db.drop();
  });

  it('commits a batch once; the unique key refuses the same fires again', async () => {
    const fires = [
      { job: 'a', scheduledAt: at(1), trigger: 'schedule' as const },
      { job: 'b', scheduledAt: at(1), trigger: 'schedule' as const },
    ];
    const first = await ledger.fires.commitFires(fires, leader(5n));
    assert.equal(first.committed.length, 2);
    assert.equal(first.duplicates, 0);
    const again = await ledger.fires.commitFires(fires, leader(5n, 'r2'));
    assert.equal(again.committed.length, 0);
    assert.equal(again.duplicates, 2);
    const last = await ledger.fires.lastFired();
    assert.equal(last.get('a')?.toISOString(), at(1).toISOString());
  });

  it('a manual trigger on a scheduled instant neither swallows that fire nor is refused as its duplicate', async () => {
    const t = at(40);
    const manual = await ledger.fires.commitFires([{ job: 'm', scheduledAt: t, trigger: 'manual' }], leader(5n));
    assert.equal(manual.committed.length, 1);
    const scheduled = await ledger.fires.commitFires([{ job: 'm', scheduledAt: t, trigger: 'schedule' }], leader(5n));
    assert.equal(scheduled.committed.length, 1, 'the scheduled fire at the same instant commits');
    const secondManual = await ledger.fires.commitFires([{ job: 'm', scheduledAt: t, trigger: 'manual' }], leader(5n));
    assert.equal(secondManual.committed.length, 1, 'each trigger is its own run');
    const catchup = await ledger.fires.commitFires([{ job: 'm', scheduledAt: t, trigger: 'catchup' }], leader(5n));
    assert.equal(catchup.duplicates, 1, 'a catch-up of the scheduled instant is still refused by the key');
    const rows = await db.pool.query(
      "SELECT trigger, count(*)::int AS n FROM cw_runs WHERE job = 'm' GROUP BY trigger ORDER BY trigger",
    );
    assert.deepEqual(rows.rows, [
      { trigger: 'manual', n: 2 },
      { trigger: 'schedule', n: 1 },
    ]);
  });

  it('retention deletes finished runs past the period with their attempts, and keeps active and recent ones', async () => {
    const fires = ['done', 'failed', 'active', 'recent'].map((job) => ({
      job: `ret-${job}`,
      scheduledAt: at(50),
      trigger: 'schedule' as const,
    }));
    const { committed } = await ledger.fires.commitFires(fires, leader(7n));
    const id = (job: string) => committed.find((c) => c.job === `ret-${job}`)!.runId;
    for (const job of ['done', 'failed', 'active', 'recent']) await ledger.runs.claim(id(job), 'w');
    const claimOf = async (job: string): Promise<Claim> => ({
      runId: id(job),
      job: `ret-${job}`,
      scheduledAt: at(50),
      attempt: 1,
      token: (await ledger.runs.runState(id(job)))!.claimToken!,
      failures: 0,
      trigger: 'schedule',
      claimedAt: new Date(),
    });
    assert.ok(await ledger.runs.finish(await claimOf('done'), 'completed'));
    assert.ok(await ledger.runs.finish(await claimOf('failed'), 'failed', 'boom'));
    assert.ok(await ledger.runs.finish(await claimOf('recent'), 'completed'));
    await db.pool.query(
      `UPDATE cw_runs SET created_at = now() - interval '20 days' WHERE job IN ('ret-done', 'ret-failed', 'ret-active')`,
    );
    // Batches of one: the caller loops until a batch comes back short.
    assert.equal(await ledger.fires.pruneFinishedRuns(14 * 86_400_000, 1), 1);
    assert.equal(await ledger.fires.pruneFinishedRuns(14 * 86_400_000, 10), 1);
    assert.equal(await ledger.fires.pruneFinishedRuns(14 * 86_400_000, 10), 0);
    const left = await db.pool.query<{ job: string }>(`SELECT job FROM cw_runs WHERE job LIKE 'ret-%' ORDER BY job`);
    assert.deepEqual(
      left.rows.map((r) => r.job),
      ['ret-active', 'ret-recent'],
      'an old run still running, and a recent finished one, stay',
    );
    const orphans = await db.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM cw_run_attempts WHERE run_id = ANY($1::bigint[])',
      [[id('done'), id('failed')].map(String)],
    );
    assert.equal(orphans.rows[0]!.n, 0, 'their attempts went with them');
    assert.equal(
      (await ledger.fires.lastFired()).get('ret-done')?.toISOString(),
      at(50).toISOString(),
      'the schedule keeps its anchor in cw_job_state',
    );
  });

  it('the fence refuses a leader token lower than one already committed, and commits nothing', async () => {
    await ledger.fires.commitFires([{ job: 'a', scheduledAt: at(2), trigger: 'schedule' }], leader(7n));
    await assert.rejects(
      ledger.fires.commitFires([{ job: 'a', scheduledAt: at(3), trigger: 'schedule' }], leader(6n)),
      (err: Error) => err instanceof StaleTokenError && err.highest === 7n,
    );
    const rows = await db.pool.query("SELECT count(*)::int AS n FROM cw_runs WHERE job = 'a' AND scheduled_at = $1", [
      at(3),
    ]);
    assert.equal(rows.rows[0].n, 0);
  });

  it('rolls back when the leader passes its deadline before commit', async () => {
    const res = await ledger.fires.commitFires([{ job: 'a', scheduledAt: at(4), trigger: 'schedule' }], {
      ...leader(7n),
      stillLeading: () => false,
    });
    assert.equal(res.committed.length, 0);
    const rows = await db.pool.query('SELECT count(*)::int AS n FROM cw_runs WHERE scheduled_at = $1', [at(4)]);
    assert.equal(rows.rows[0].n, 0);
  });

  it('claims give ever-higher execution tokens; a stale attempt cannot record its outcome', async () => {
    const { committed } = await ledger.fires.commitFires(
      [{ job: 'c', scheduledAt: at(5), trigger: 'schedule' }],
      leader(7n),
    );
    const runId = committed[0]!.runId;
    const c1 = await ledger.runs.claim(runId, 'w1');
    const c2 = await ledger.runs.claim(runId, 'w2');
    assert.equal(c1.status, 'claimed');
    assert.equal(c2.status, 'claimed');
    const first = (c1 as { claim: Claim }).claim;
    const second = (c2 as { claim: Claim }).claim;
    assert.ok(second.token > first.token);
    assert.equal(second.attempt, 2);
    assert.equal(await ledger.runs.finish(first, 'completed'), false, 'the stale attempt is refused');
    assert.equal(await ledger.runs.finish(second, 'completed'), true);
    const again = await ledger.runs.claim(runId, 'w3');
    assert.deepEqual(again, { status: 'finished', state: 'completed', job: 'c' });
    const run = await db.pool.query('SELECT state, completed_attempt, skipped_attempts FROM cw_runs WHERE id = $1', [
      runId.toString(),
    ]);
    assert.deepEqual(run.rows[0], { state: 'completed', completed_attempt: 2, skipped_attempts: 1 });
    const attempts = await db.pool.query(
      'SELECT attempt, state FROM cw_run_attempts WHERE run_id = $1 ORDER BY attempt',
      [runId.toString()],
    );
    assert.deepEqual(attempts.rows, [
      { attempt: 1, state: 'stale' },
      { attempt: 2, state: 'completed' },
      { attempt: 3, state: 'skipped' },
    ]);
  });

  it('fenceRun refuses an attempt once a newer one has claimed the run, whatever the write order', async () => {
    const { committed } = await ledger.fires.commitFires(
      [{ job: 'd', scheduledAt: at(6), trigger: 'schedule' }],
      leader(7n),
    );
    const runId = committed[0]!.runId;
    const first = ((await ledger.runs.claim(runId, 'w1')) as { claim: Claim }).claim;
    await ledger.runs.fenceRun('account/1', first); // first attempt writes while it is the newest claim
    const second = ((await ledger.runs.claim(runId, 'w2')) as { claim: Claim }).claim;
    await assert.rejects(
      ledger.runs.fenceRun('account/1', first),
      StaleTokenError,
      'older attempt refused after the new claim',
    );
    await assert.rejects(
      ledger.runs.fenceRun('account/2', first),
      StaleTokenError,
      'even on a resource the new attempt has not written',
    );
    await ledger.runs.fenceRun('account/1', second);
    assert.equal(
      await ledger.fires.fenceToken('account/1'),
      slotToken(second.scheduledAt, second.attempt),
      'the fence holds the slot token',
    );
  });

  it('fenceRun orders runs by slot: an earlier slot after a later one is superseded, not stale, whatever the claim order', async () => {
    const { committed } = await ledger.fires.commitFires(
      [
        { job: 'catchup', scheduledAt: at(4), trigger: 'catchup' },
        { job: 'catchup', scheduledAt: at(5), trigger: 'catchup' },
      ],
      leader(7n),
    );
    const [early, late] = committed.map((c) => c.runId);
    // Claimed in the "wrong" order: the later slot gets the lower execution token and writes first.
    const lateClaim = ((await ledger.runs.claim(late!, 'w1')) as { claim: Claim }).claim;
    const earlyClaim = ((await ledger.runs.claim(early!, 'w2')) as { claim: Claim }).claim;
    assert.ok(earlyClaim.token > lateClaim.token);
    await ledger.runs.fenceRun('res-catchup', lateClaim);
    const refused = await ledger.runs.fenceRun('res-catchup', earlyClaim).catch((err: unknown) => err);
    assert.ok(refused instanceof SupersededError, `superseded, got ${String(refused)}`);
    assert.equal(refused.newerScheduledAt?.getTime(), at(5).getTime());
    assert.equal(await ledger.runs.finish(earlyClaim, 'superseded', refused), true);
    assert.equal((await ledger.runs.runState(early!))?.state, 'superseded');
    // The same run's next attempt still passes its own slot's earlier write.
    await ledger.runs.finish(lateClaim, 'retrying', 'try again');
    const lateAgain = ((await ledger.runs.claim(late!, 'w3')) as { claim: Claim }).claim;
    await ledger.runs.fenceRun('res-catchup', lateAgain);
    assert.equal(await ledger.fires.fenceToken('res-catchup'), slotToken(at(5), 2));
  });

  it('an error with NUL characters and megabytes of text is stored bounded and sanitised; the outcome is recorded', async () => {
    const { committed } = await ledger.fires.commitFires(
      [{ job: 'nul', scheduledAt: at(8), trigger: 'schedule' }],
      leader(7n),
    );
    const runId = committed[0]!.runId;
    const claim = ((await ledger.runs.claim(runId, 'w1')) as { claim: Claim }).claim;
    const error = new Error('x\u0000' + 'y'.repeat(5_000_000));
    assert.equal(await ledger.runs.finish(claim, 'failed', error), true);
    const row = (
      await db.pool.query<{ state: string; error: string }>('SELECT state, error FROM cw_runs WHERE id = $1', [
        runId.toString(),
      ])
    ).rows[0]!;
    assert.equal(row.state, 'failed');
    assert.ok(row.error.startsWith('x\\0yyy'), row.error.slice(0, 20));
    assert.ok(row.error.length <= MAX_ERROR_MESSAGE, `stored ${row.error.length} characters`);
    const attempt = (
      await db.pool.query<{ error_stack: string }>('SELECT error_stack FROM cw_run_attempts WHERE run_id = $1', [
        runId.toString(),
      ])
    ).rows[0]!;
    assert.ok(attempt.error_stack.length <= MAX_ERROR_STACK && !attempt.error_stack.includes('\u0000'));
  });

  it('completeInTransaction commits effect and completion together, and skips a second attempt', async () => {
    await db.pool.query('CREATE TABLE effects (run_id bigint, note text)');
    const { committed } = await ledger.fires.commitFires(
      [{ job: 'e', scheduledAt: at(7), trigger: 'schedule' }],
      leader(7n),
    );
    const runId = committed[0]!.runId;
    const first = ((await ledger.runs.claim(runId, 'w1')) as { claim: Claim }).claim;
    const r1 = await ledger.runs.completeInTransaction(first, async (tx) => {
      await tx.query('INSERT INTO effects VALUES ($1, $2)', [runId.toString(), 'first']);
      return 'done';
    });
    assert.deepEqual(r1, { status: 'committed', value: 'done' });
    // A re-delivery of a completed run is not even claimable.
    assert.deepEqual(await ledger.runs.claim(runId, 'w2'), { status: 'finished', state: 'completed', job: 'e' });
    const effects = await db.pool.query('SELECT note FROM effects WHERE run_id = $1', [runId.toString()]);
    assert.deepEqual(effects.rows, [{ note: 'first' }]);
  });

  it('drizzle over tx takes part in the transaction: a refused attempt leaves nothing, one effect lands; the idempotency key is the same for every attempt', async () => {
    await db.pool.query('CREATE TABLE drizzle_effects (run_id bigint NOT NULL, idempotency_key text NOT NULL)');
    const drizzleEffects = pgTable('drizzle_effects', {
      runId: bigint('run_id', { mode: 'bigint' }).notNull(),
      idempotencyKey: text('idempotency_key').notNull(),
    });
    const { committed } = await ledger.fires.commitFires(
      [{ job: 'dz', scheduledAt: at(30), trigger: 'schedule' }],
      leader(7n),
    );
    const runId = committed[0]!.runId;
    const first = ((await ledger.runs.claim(runId, 'w1')) as { claim: Claim }).claim;
    const insert = (claim: Claim, tx: Parameters<Parameters<Ledger['runs']['completeInTransaction']>[1]>[0]) =>
      drizzle(tx)
        .insert(drizzleEffects)
        .values({ runId, idempotencyKey: idempotencyKey(claim) });
    // The first attempt writes through drizzle; while it is inside, a re-delivery claims the run.
    let second: Claim | undefined;
    await assert.rejects(
      ledger.runs.completeInTransaction(first, async (tx) => {
        await insert(first, tx);
        second = ((await ledger.runs.claim(runId, 'w2')) as { claim: Claim }).claim;
      }),
      StaleTokenError,
      'the first attempt lost its claim while inside: its completion is refused',
    );
    assert.ok(second);
    assert.equal(idempotencyKey(first), idempotencyKey(second), 'one key for every attempt of a run');
    assert.notEqual(
      idempotencyKey(second),
      idempotencyKey({ job: 'dz', scheduledAt: at(31) }),
      'another run, another key',
    );
    const none = await drizzle(db.pool)
      .select({ n: count() })
      .from(drizzleEffects)
      .where(eq(drizzleEffects.runId, runId));
    assert.equal(none[0]!.n, 0, "the refused attempt's drizzle insert was rolled back with it");
    const done = await ledger.runs.completeInTransaction(second, async (tx) => {
      await insert(second!, tx);
    });
    assert.equal(done.status, 'committed');
    assert.equal(
      (await ledger.runs.completeInTransaction(first, async () => assert.fail('fn of a done run must not run'))).status,
      'skipped',
    );
    const rows = await drizzle(db.pool)
      .select({ n: count() })
      .from(drizzleEffects)
      .where(eq(drizzleEffects.runId, runId));
    assert.equal(rows[0]!.n, 1);
  });

  it('completeInTransaction of a stale attempt rolls its effect back', async () => {
    const { committed } = await ledger.fires.commitFires(
      [{ job: 'e', scheduledAt: at(8), trigger: 'schedule' }],
      leader(7n),
    );
    const runId = committed[0]!.runId;
    const first = ((await ledger.runs.claim(runId, 'w1')) as { claim: Claim }).claim;
    const second = ((await ledger.runs.claim(runId, 'w2')) as { claim: Claim }).claim;
    const r2 = await ledger.runs.completeInTransaction(second, async (tx) => {
      await tx.query('INSERT INTO effects VALUES ($1, $2)', [runId.toString(), 'second']);
    });
    assert.equal(r2.status, 'committed');
    const r1 = await ledger.runs.completeInTransaction(first, async (tx) => {
      await tx.query('INSERT INTO effects VALUES ($1, $2)', [runId.toString(), 'first']);
    });
    assert.equal(r1.status, 'skipped', 'the run is completed: the late attempt is skipped');
    const effects = await db.pool.query('SELECT note FROM effects WHERE run_id = $1', [runId.toString()]);
    assert.deepEqual(effects.rows, [{ note: 'second' }]);
  });

  it('an attempt paused inside its transaction blocks no one; when it resumes, its effect rolls back', async () => {
    const { committed } = await ledger.fires.commitFires(
      [{ job: 'e', scheduledAt: at(9), trigger: 'schedule' }],
      leader(7n),
    );
    const runId = committed[0]!.runId;
    const first = ((await ledger.runs.claim(runId, 'w1')) as { claim: Claim }).claim;
    let resume!: () => void;
    const paused = new Promise<void>((r) => (resume = r));
    let inside!: () => void;
    const entered = new Promise<void>((r) => (inside = r));
    const slow = ledger.runs.completeInTransaction(first, async (tx) => {
      await tx.query('INSERT INTO effects VALUES ($1, $2)', [runId.toString(), 'paused']);
      inside();
      await paused; // the worker is SIGSTOPped here
    });
    await entered;
    // Re-delivery elsewhere: the claim must not wait for the paused transaction.
    const second = ((await ledger.runs.claim(runId, 'w2')) as { claim: Claim }).claim;
    const r2 = await ledger.runs.completeInTransaction(second, async (tx) => {
      await tx.query('INSERT INTO effects VALUES ($1, $2)', [runId.toString(), 'second']);
    });
    assert.equal(r2.status, 'committed');
    resume();
    await assert.rejects(slow, StaleTokenError, 'the resumed attempt must be refused');
    const effects = await db.pool.query('SELECT note FROM effects WHERE run_id = $1', [runId.toString()]);
    assert.deepEqual(effects.rows, [{ note: 'second' }]);
  });

  it('overlap bookkeeping: active runs, held runs and the outbox', async () => {
    const { committed } = await ledger.fires.commitFires(
      [
        { job: 'q', scheduledAt: at(10), trigger: 'schedule' },
        { job: 'q', scheduledAt: at(11), trigger: 'schedule', hold: true },
      ],
      leader(7n),
    );
    assert.equal(committed.length, 2);
    assert.equal(committed[1]!.hold, true);
    await ledger.fires.markEnqueued([committed[0]!.runId]);
    const active = await ledger.fires.activeJobs(['q']);
    assert.equal(active.get('q')?.ids.length, 2);
    assert.equal(active.get('q')?.held, 1);
    const ofQ = async () =>
      (await ledger.fires.unenqueued(100, ['q'])).filter((r) => r.job === 'q').map((r) => r.runId);
    assert.deepEqual(await ofQ(), [], 'held while the first run is active');
    const claim = ((await ledger.runs.claim(committed[0]!.runId, 'w')) as { claim: Claim }).claim;
    await ledger.runs.finish(claim, 'completed');
    assert.deepEqual(await ofQ(), [committed[1]!.runId], 'released once the job is idle');
  });
  it('a fire commit releases its runs with a hand-over row: the outbox has them until the hand-over is confirmed, the delivery sweep leaves them to it', async () => {
    const { committed } = await ledger.fires.commitFires(
      [
        { job: 'h', scheduledAt: at(30), trigger: 'schedule' },
        { job: 'h', scheduledAt: at(31), trigger: 'schedule' },
        { job: 'h', scheduledAt: at(32), trigger: 'schedule' },
      ],
      leader(7n),
    );
    const [confirmed, lost, taken] = committed.map((f) => f.runId);
    const ofH = async () => (await ledger.fires.unenqueued(100, [])).filter((r) => r.job === 'h').map((r) => r.runId);
    const handOverRows = async () =>
      (
        await db.pool.query<{ run_id: string }>(
          'SELECT run_id FROM cw_hand_overs WHERE run_id = ANY($1::bigint[]) ORDER BY run_id',
          [committed.map((f) => f.runId.toString())],
        )
      ).rows.map((r) => BigInt(r.run_id));
    const released = await db.pool.query(
      'SELECT count(*)::int AS n FROM cw_runs WHERE id = ANY($1::bigint[]) AND enqueued_at IS NOT NULL',
      [committed.map((f) => f.runId.toString())],
    );
    assert.equal(released.rows[0].n, 3, 'released to the queue at the commit');
    assert.deepEqual(await handOverRows(), [confirmed, lost, taken]);
    assert.deepEqual(await ofH(), [confirmed, lost, taken], 'unconfirmed: the outbox would hand them over again');
    const shown = async (id: bigint) => (await runDetail(db.pool, tablesIn(db.schema), id))!.enqueuedAt;
    assert.equal(await shown(confirmed!), null, 'the admin view shows no hand-over before the queue took the run');
    await ledger.fires.markEnqueued([confirmed!]);
    assert.notEqual(await shown(confirmed!), null, 'and shows it once the queue did');
    // A worker took `taken` though its confirmation was lost (a crash after addBulk).
    await ledger.runs.claim(taken!, 'w');
    assert.deepEqual(await ofH(), [lost], 'confirmed and claimed runs are not handed over again');
    assert.deepEqual(await handOverRows(), [lost], "the claimed run's row is dropped by the outbox read");
    await db.pool.query("UPDATE cw_runs SET enqueued_at = now() - interval '1 hour' WHERE job = 'h'");
    const swept = (await ledger.fires.deliveriesToCheck(1000, 100))
      .map((r) => r.runId)
      .filter((id) => id === lost || id === confirmed);
    assert.deepEqual(swept, [confirmed], "the run still in the outbox is not also the delivery sweep's");
  });

  it("overlap 'replace' from a stale leader: the fence refuses the batch and the active run is untouched", async () => {
    const { committed } = await ledger.fires.commitFires(
      [{ job: 'r', scheduledAt: at(20), trigger: 'schedule' }],
      leader(7n),
    );
    const running = committed[0]!.runId;
    await ledger.runs.claim(running, 'w1');
    await assert.rejects(
      ledger.fires.commitFires(
        [{ job: 'r', scheduledAt: at(21), trigger: 'schedule', replace: true }],
        leader(6n, 'stale'),
      ),
      (err: Error) => err instanceof StaleTokenError && err.highest === 7n,
    );
    const rows = await db.pool.query("SELECT id, state, error FROM cw_runs WHERE job = 'r' ORDER BY scheduled_at");
    assert.deepEqual(rows.rows, [{ id: running.toString(), state: 'running', error: null }]);
  });

  it("overlap 'replace' from the current leader: the active run is cancelled in the same commit as the new fire", async () => {
    // Past the local deadline the whole commit rolls back: nothing cancelled either.
    const late = await ledger.fires.commitFires(
      [{ job: 'r', scheduledAt: at(22), trigger: 'schedule', replace: true }],
      {
        ...leader(7n),
        stillLeading: () => false,
      },
    );
    assert.deepEqual(late, { committed: [], duplicates: 0, cancelled: [] });
    const running = (
      await db.pool.query<{ id: string }>("SELECT id FROM cw_runs WHERE job = 'r' AND state = 'running'")
    ).rows[0]!.id;

    const res = await ledger.fires.commitFires(
      [{ job: 'r', scheduledAt: at(22), trigger: 'schedule', replace: true }],
      leader(8n),
    );
    assert.equal(res.committed.length, 1);
    assert.deepEqual(res.cancelled, [BigInt(running)]);
    const rows = await db.pool.query<{ id: string; state: string; error: string | null; finished: boolean }>(
      "SELECT id, state, error, finished_at IS NOT NULL AS finished FROM cw_runs WHERE job = 'r' ORDER BY scheduled_at",
    );
    assert.deepEqual(
      rows.rows.map((r) => [r.id, r.state, r.finished]),
      [
        [running, 'cancelled', true],
        [res.committed[0]!.runId.toString(), 'pending', false],
      ],
    );
    assert.match(rows.rows[0]!.error ?? '', /replaced by the fire of 2026-01-01T00:00:22\.000Z/);

    // The same fire again (a retry after a lost reply) is a duplicate: it cancels nothing, not
    // even the run it already committed.
    const again = await ledger.fires.commitFires(
      [{ job: 'r', scheduledAt: at(22), trigger: 'schedule', replace: true }],
      leader(8n),
    );
    assert.deepEqual(again, { committed: [], duplicates: 1, cancelled: [] });
    const state = await ledger.runs.runState(res.committed[0]!.runId);
    assert.equal(state?.state, 'pending');
  });

  it('one connection, two schemas: each named statement is prepared per schema, and each reads its own tables', async () => {
    await migrateDatabase(db.url, { schema: 'cw_second' });
    // One connection: both schemas' statements are prepared on it, so a name shared by two texts would fail.
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const first = new Ledger(pool);
      const second = new Ledger(pool, 'cw_second');
      await first.fires.commitFires([{ job: 'two', scheduledAt: at(31), trigger: 'schedule' }], leader(9n));
      await second.fires.commitFires([{ job: 'two', scheduledAt: at(32), trigger: 'schedule' }], leader(1n));
      assert.equal((await first.fires.lastFiredOf(['two'])).get('two')?.toISOString(), at(31).toISOString());
      assert.equal((await second.fires.lastFiredOf(['two'])).get('two')?.toISOString(), at(32).toISOString());
      assert.equal(await second.fires.fenceToken('scheduler/x'), 1n);
    } finally {
      await pool.end();
    }
  });
});
