/**
 * The live ledger check's checks against a real ledger (PostgreSQL): a ledger written through its
 * own statements reports 0; each broken invariant planted in it (a fire of a stale leader written
 * past the fence, a slot doubled once its key is gone, a run no one is on, a claim the ledger lost)
 * is reported by its check, and a run waiting by policy (a retry's backoff, a concurrency slot in
 * order, a pause, an overlap queue, a one-off not yet due) is not. Ages are planted by moving a
 * row's times back, so nothing sleeps.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { Ledger, type Claim } from '../../src/ledger/ledger.js';
import { findLostClaims } from '../../src/ledger/members.js';
import { lastLedgerCheck } from '../../src/ledger/ledger-check.js';
import type { LedgerCheckReport } from '../../src/scheduler/chores/ledger-check.js';
import { shardOf } from '../../src/scheduler/shards/shard-map.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { testLedgerCheck } from '../support/ledger-check-round.js';

describe('live ledger check (real PostgreSQL)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  let logged: { msg: string; ledgerCheck?: unknown }[];
  let timeouts: { job: string; timeoutMs: number }[];
  let shards: number;
  const leader = (token: bigint, fenceResource = 'scheduler/x') => ({
    fenceResource,
    token,
    replicaId: 'r1',
    stillLeading: () => true,
  });
  const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));

  const chore = () =>
    testLedgerCheck(ledger, {
      shards,
      timeouts: () => timeouts,
      redelivery: { checkAfterMs: 1000, intervalMs: 500 },
      logger: pino(
        { level: 'warn' },
        new Writable({
          write(chunk: Buffer, _enc, done) {
            logged.push(JSON.parse(chunk.toString()) as { msg: string });
            done();
          },
        }),
      ),
    });
  const check = () => chore().checkOnce();
  const sql = (text: string, values: unknown[] = []) => db.pool.query(text, values);
  /** Move a run's times back by `minutes`, as if it had been committed (and claimed, handed over) that long ago. */
  const age = (id: bigint, minutes: number) =>
    sql(
      `UPDATE cw_runs SET created_at = created_at - $2 * interval '1 minute',
         started_at = started_at - $2 * interval '1 minute', enqueued_at = enqueued_at - $2 * interval '1 minute',
         delivery_checked_at = delivery_checked_at - $2 * interval '1 minute' WHERE id = $1`,
      [id.toString(), minutes],
    );
  /** A fire committed by the leader of `job`'s shard (each shard has its own fence). */
  /** A committed run; `hold`: held back by its overlap policy (overlap 'queue'), not released to the queue. */
  const commit = async (job: string, s: number, token = 5n, hold = false) =>
    (
      await ledger.fires.commitFires(
        [{ job, scheduledAt: at(s), trigger: 'schedule', hold }],
        leader(token, `scheduler/shard-${shardOf(job, shards)}`),
      )
    ).committed[0]!.runId;

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool);
  });
  after(async () => {
    await db.drop();
  });
  beforeEach(async () => {
    await sql(
      'TRUNCATE cw_runs, cw_run_attempts, cw_members, cw_workers, cw_limit_slots, cw_job_state, cw_ledger_checks, cw_fences CASCADE',
    );
    logged = [];
    timeouts = [];
    shards = 1;
  });

  it('a ledger written through its own statements reports 0 on every check, and the round is kept', async () => {
    for (let s = 0; s < 20; s++) for (const job of ['a', 'b', 'c']) await commit(job, s, s < 10 ? 5n : 7n);
    const ids = (await sql("SELECT id FROM cw_runs WHERE job = 'a' ORDER BY id")).rows.map((r) => BigInt(r.id));
    await ledger.runs.beat('w1');
    for (const id of ids.slice(0, 10)) {
      const c = await ledger.runs.claim(id, 'w1');
      assert.equal(c.status, 'claimed');
      if (c.status === 'claimed') await ledger.runs.finish(c.claim, 'completed');
    }
    const report = await check();
    assert.deepEqual(report.counts, {
      'duplicate-slots': 0,
      'token-order': 0,
      unsettled: 0,
      'workflow-order': 0,
      'lost-writes': 0,
      'unanswered-instants': 0,
    });
    assert.equal(report.violations, 0);
    assert.deepEqual(report.window, { ms: 600_000, runs: 60, capped: false });
    assert.deepEqual(logged, [], 'no warning when nothing is found');
    const kept = await lastLedgerCheck(ledger.pool, ledger.tables);
    assert.deepEqual((kept?.report as LedgerCheckReport).counts, report.counts);
  });

  it('a fire committed past the fence with an older leader token is reported (I3), once per job and token', async () => {
    for (let s = 0; s < 5; s++) await commit('a', s, 7n);
    await commit('b', 0, 7n);
    // A stale leader whose fencing is broken: its writes go straight in, under token 6.
    await sql(
      "INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id) VALUES ('a', $1, 'schedule', 6, 'stale'), ('a', $2, 'schedule', 6, 'stale')",
      [at(10), at(11)],
    );
    await commit('b', 12, 7n); // the live leader goes on
    const report = await check();
    assert.equal(report.counts['token-order'], 1);
    assert.equal(report.counts['duplicate-slots'], 0);
    assert.match(report.examples['token-order']![0]!, /^I3: a: run \d+ committed with leader token 6 after token 7$/);
    // One warning line for the round, with the counts and the examples.
    assert.equal(logged.length, 1);
    assert.match(logged[0]!.msg, /^ledger check: 1 token-order in the last 600 s$/);
    assert.deepEqual((logged[0]!.ledgerCheck as { counts: Record<string, number> }).counts['token-order'], 1);
  });

  it('one chore over rounds: each round reads what was committed since the last, and meets what earlier rounds read', async () => {
    const c = chore();
    for (let s = 0; s < 5; s++) await commit('a', s, 7n);
    const first = await c.checkOnce();
    assert.deepEqual([first.window?.runs, first.violations], [5, 0]);
    // Those runs now lie before the next round's read: only the kept pairs and slots remember them.
    await sql("UPDATE cw_runs SET created_at = created_at - interval '1 minute'");
    await sql(
      "INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id) VALUES ('a', $1, 'schedule', 6, 'stale')",
      [at(10)],
    );
    const second = await c.checkOnce();
    assert.equal(second.window?.runs, 1, 'the second round read only the new run');
    assert.equal(second.counts['token-order'], 1);
    // A slot fired again a round later (its key gone): the late run's probe finds the first.
    await sql('DROP INDEX cw_runs_job_scheduled_at');
    try {
      await sql("UPDATE cw_runs SET created_at = created_at - interval '1 minute'");
      await sql(
        "INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id) VALUES ('a', $1, 'catchup', 7, 'r2')",
        [at(0)],
      );
      const third = await c.checkOnce();
      assert.equal(third.window?.runs, 1);
      assert.equal(third.counts['duplicate-slots'], 1);
      assert.equal(third.counts['token-order'], 1, 'still in the window');
    } finally {
      await sql("DELETE FROM cw_runs WHERE leader_id IN ('r2', 'stale')");
      await sql(
        `CREATE UNIQUE INDEX cw_runs_job_scheduled_at ON cw_runs (job, scheduled_at) WHERE "trigger" NOT IN ('manual', 'once', 'step')`,
      );
    }
  });

  it("with shards, each shard's tokens are ordered on their own: a lower token of another shard is no violation", async () => {
    shards = 2;
    const names = ['a', 'b', 'c', 'd', 'e', 'f'];
    const zero = names.find((j) => shardOf(j, 2) === 0)!;
    const one = names.find((j) => shardOf(j, 2) === 1)!;
    await commit(zero, 0, 9n);
    await commit(one, 0, 3n); // shard 1's lease has its own, lower tokens
    await commit(one, 1, 3n);
    assert.equal((await check()).counts['token-order'], 0);
    // Below shard 0's 9, past its fence: out of order.
    await sql(
      "INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id) VALUES ($1, $2, 'schedule', 2, 'stale')",
      [zero, at(1)],
    );
    const report = await check();
    assert.equal(report.counts['token-order'], 1);
    assert.match(report.examples['token-order']![0]!, new RegExp(`^I3: ${zero}: `));
  });

  it('a slot with two counted runs is reported (I1) once the unique key no longer guards it', async () => {
    await commit('a', 0);
    // The key is what keeps I1; without it (a dropped or corrupt index) a second fire of the slot lands.
    await sql('DROP INDEX cw_runs_job_scheduled_at');
    try {
      await sql(
        "INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id) VALUES ('a', $1, 'schedule', 5, 'r2')",
        [at(0)],
      );
      // A manual trigger on the same instant is outside the key: not a duplicate.
      await ledger.fires.commitFires([{ job: 'a', scheduledAt: at(0), trigger: 'manual' }], leader(5n));
      const report = await check();
      assert.equal(report.counts['duplicate-slots'], 1);
      assert.match(report.examples['duplicate-slots']![0]!, /^I1: a@\d+ fired 2 times \(runs \d+, \d+\)$/);
    } finally {
      await sql("DELETE FROM cw_runs WHERE leader_id = 'r2'");
      await sql(
        `CREATE UNIQUE INDEX cw_runs_job_scheduled_at ON cw_runs (job, scheduled_at) WHERE "trigger" NOT IN ('manual', 'once', 'step')`,
      );
    }
  });

  it('runs no one is on past their bound are reported (I6): a dead worker, a timeout overrun, a lost hand-over', async () => {
    timeouts = [{ job: 'slow', timeoutMs: 60_000 }];
    await ledger.runs.beat('alive');
    const dead = await commit('a', 0);
    assert.equal((await ledger.runs.claim(dead, 'ghost')).status, 'claimed'); // 'ghost' never beats
    await age(dead, 10);
    const overran = await commit('slow', 0);
    assert.equal((await ledger.runs.claim(overran, 'alive')).status, 'claimed');
    await age(overran, 10);
    const lost = await commit('b', 0);
    await sql('UPDATE cw_runs SET enqueued_at = now() WHERE id = $1', [lost.toString()]);
    await age(lost, 10);
    const report = await check();
    assert.equal(report.counts.unsettled, 3, JSON.stringify(report.examples));
    const text = report.examples.unsettled!.join('\n');
    assert.match(text, new RegExp(`run ${dead} \\(a@.*\\) running for 6\\d\\d s: its worker stopped beating`));
    assert.match(text, new RegExp(`run ${overran} \\(slow@.*\\) running .* past its job's timeout`));
    assert.match(text, new RegExp(`run ${lost} \\(b@.*\\) pending .* neither handed to a worker nor looked for`));
  });

  it('a run waiting by policy is not unsettled: backoff, a slot in order, a pause, an overlap queue, a one-off not due, a long handler', async () => {
    await ledger.runs.beat('alive');
    // A long handler on a live worker (its job has no timeout).
    const long = await commit('long', 0);
    await ledger.runs.claim(long, 'alive');
    await age(long, 10);
    // A retry waiting for its backoff.
    const retry = await commit('retry', 0);
    await age(retry, 10);
    await sql(
      "UPDATE cw_runs SET state = 'retrying', enqueued_at = created_at, available_at = now() + interval '5 minutes' WHERE id = $1",
      [retry.toString()],
    );
    // A run waiting for the one slot of key k, which a running run on a live worker holds.
    const holder = await commit('limited', 0);
    await ledger.runs.claim(holder, 'alive');
    const waiter = await commit('limited', 1);
    await sql(
      "INSERT INTO cw_limit_slots (key, slot, run_id, token, worker, taken_at) SELECT 'k', 0, id, claim_token, 'alive', now() FROM cw_runs WHERE id = $1",
      [holder.toString()],
    );
    await sql("UPDATE cw_runs SET limit_key = 'k' WHERE id IN ($1, $2)", [holder.toString(), waiter.toString()]);
    await sql('UPDATE cw_runs SET enqueued_at = now() WHERE id = $1', [waiter.toString()]);
    await age(waiter, 10);
    // A paused job's pending run.
    const paused = await commit('paused', 0);
    await sql(
      "INSERT INTO cw_job_state (job, paused) VALUES ('paused', true) ON CONFLICT (job) DO UPDATE SET paused = true",
    );
    await age(paused, 10);
    // Overlap 'queue': not handed over while an earlier run of its job is active.
    const first = await commit('queued', 0);
    await ledger.runs.claim(first, 'alive');
    const second = await commit('queued', 1, 5n, true);
    await age(second, 10);
    // A one-off run for an hour from now.
    await sql(
      "INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, once_key, created_at) VALUES ('once', now() + interval '1 hour', 'once', 5, 'r1', 'k1', now() - interval '10 minutes')",
    );
    const report = await check();
    assert.equal(report.counts.unsettled, 0, JSON.stringify(report.examples));
    // The same waiting run, once the slot's holder is gone (settled) and nobody hands it over: reported.
    await sql("UPDATE cw_runs SET state = 'completed', finished_at = now() WHERE id = $1", [holder.toString()]);
    await sql('UPDATE cw_limit_slots SET run_id = NULL, token = NULL, worker = NULL');
    const after = await check();
    assert.equal(after.counts.unsettled, 1, JSON.stringify(after.examples));
    assert.match(after.examples.unsettled![0]!, new RegExp(`run ${waiter} \\(limited@`));
  });

  it('a backlog of handed-over runs waits as long as the sweep takes to come back to each: not unsettled until then', async () => {
    // 5,000 runs handed over 150 s ago, never looked at since: past the 33 s bound of a lone run.
    await sql(
      `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, enqueued_at, created_at)
       SELECT 'burst', $1::timestamptz + g * interval '1 second', 'schedule', 5, 'r1', now() - interval '150 seconds', now() - interval '150 seconds'
       FROM generate_series(1, 5000) g`,
      [at(0)],
    );
    const c = () =>
      testLedgerCheck(ledger, {
        redelivery: { checkAfterMs: 1000, intervalMs: 500, batchSize: 20 },
        keep: false,
      }).checkOnce();
    // With batches of 20, the sweep needs 125 s to come back: 33.5 + 125 > 150, none unsettled yet.
    assert.equal((await c()).counts.unsettled, 0);
    // Once they have waited past that too, every one of them is.
    await sql(
      "UPDATE cw_runs SET enqueued_at = enqueued_at - interval '1 minute', created_at = created_at - interval '1 minute'",
    );
    assert.equal((await c()).counts.unsettled, 5000);
  });

  it('a workflow step run started before a step it needs had finished is reported (I7); one started after is not', async () => {
    const steps = JSON.stringify({
      steps: [
        { name: 'a', needs: [] },
        { name: 'b', needs: ['a'] },
      ],
    });
    const workflowRun = async (s: number, bStartsAfterASecondsAgo: number) => {
      const w = await sql(
        `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, kind, state, result)
         VALUES ('wf', $1, 'schedule', 5, 'r1', 'workflow', 'running', $2::jsonb) RETURNING id`,
        [at(s), steps],
      );
      const id = w.rows[0].id as string;
      // a ran from 10 s ago to 4 s ago; b started `bStartsAfterASecondsAgo` s ago.
      await sql(
        `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, kind, workflow_run_id, step, state, started_at, finished_at)
         VALUES ('wf@x:a', $1, 'step', 5, 'r1', 'step', $2, 'a', 'completed', now() - interval '10 seconds', now() - interval '4 seconds'),
                ('wf@x:b', $1, 'step', 5, 'r1', 'step', $2, 'b', 'running', now() - $3 * interval '1 second', NULL)`,
        [at(s), id, bStartsAfterASecondsAgo],
      );
      return id;
    };
    await workflowRun(0, 2); // b after a: fine
    assert.equal((await check()).counts['workflow-order'], 0);
    const early = await workflowRun(1, 6); // b 6 s ago, a finished 4 s ago
    const report = await check();
    assert.equal(report.counts['workflow-order'], 1);
    assert.match(
      report.examples['workflow-order']![0]!,
      new RegExp(`^I7: wf@.* \\(run ${early}\\): step b \\(run \\d+\\) started before its need a completed$`),
    );
  });

  it('a claim a replica saw commit that the ledger no longer has is counted on its member row and reported', async () => {
    await sql("INSERT INTO cw_members (replica_id, host, pid, version, role) VALUES ('r1', 'h', 1, 'v', 'follower')");
    await ledger.runs.beat('r1');
    const claims = [];
    for (const id of [await commit('a', 0), await commit('a', 1)]) {
      const c = await ledger.runs.claim(id, 'r1');
      assert.equal(c.status, 'claimed');
      if (c.status === 'claimed') claims.push(c.claim);
    }
    const [kept, gone] = claims as [Claim, Claim];
    assert.ok(
      ledger.runs.witness.recent().some((c) => c.runId === gone.runId && c.token === gone.token),
      'the witness remembers the newest claim',
    );
    // Every claim still there: nothing lost, nothing reported.
    assert.deepEqual(await findLostClaims(ledger.pool, ledger.tables, 'r1', claims), []);
    assert.equal((await check()).counts['lost-writes'], 0);
    // A failover to a standby that never got the claim: its attempt is gone, the run pending again.
    await sql('DELETE FROM cw_run_attempts WHERE run_id = $1', [gone.runId.toString()]);
    await sql("UPDATE cw_runs SET state = 'pending', claim_token = NULL, attempts = 0 WHERE id = $1", [
      gone.runId.toString(),
    ]);
    const lost = await findLostClaims(ledger.pool, ledger.tables, 'r1', claims);
    assert.deepEqual(
      lost.map((c) => c.runId),
      [gone.runId],
    );
    // A run id issued again for another slot is a loss too.
    await sql('UPDATE cw_runs SET scheduled_at = $2 WHERE id = $1', [kept.runId.toString(), at(99)]);
    assert.deepEqual(
      (await findLostClaims(ledger.pool, ledger.tables, 'r1', [kept])).map((c) => c.runId),
      [kept.runId],
    );
    const report = await check();
    assert.equal(report.counts['lost-writes'], 2);
    assert.match(
      report.examples['lost-writes']![0]!,
      new RegExp(
        `^I4: replica r1 saw 2 claim\\(s\\) or outcome\\(s\\) commit that the ledger no longer has, first: claim of run ${gone.runId} \\(a at 2026-01-01T00:00:01.000Z\\), attempt 1, token ${gone.token}$`,
      ),
    );
  });

  it('an outcome a replica saw commit that the ledger lost (its claim kept) is counted too', async () => {
    await sql("INSERT INTO cw_members (replica_id, host, pid, version, role) VALUES ('r2', 'h', 1, 'v', 'follower')");
    await ledger.runs.beat('r2');
    const c = await ledger.runs.claim(await commit('a', 0), 'r2');
    assert.equal(c.status, 'claimed');
    if (c.status !== 'claimed') return;
    assert.ok(await ledger.runs.finish(c.claim, 'completed'));
    const outcome = ledger.runs.witness.recent().find((w) => w.finished && w.runId === c.claim.runId);
    assert.ok(outcome, 'the witness remembers the outcome');
    assert.deepEqual(await findLostClaims(ledger.pool, ledger.tables, 'r2', [outcome, c.claim]), []);
    // The standby got the claim but not the completion: the attempt is running again there.
    await sql("UPDATE cw_run_attempts SET state = 'running', finished_at = NULL WHERE run_id = $1", [
      c.claim.runId.toString(),
    ]);
    const lost = await findLostClaims(ledger.pool, ledger.tables, 'r2', [outcome, c.claim]);
    assert.deepEqual(
      lost.map((l) => [l.runId, l.finished]),
      [[c.claim.runId, true]],
    );
    const report = await check();
    assert.equal(report.counts['lost-writes'], 1);
    assert.match(
      report.examples['lost-writes']![0]!,
      new RegExp(`first: outcome of run ${c.claim.runId}, attempt 1, token ${c.claim.token}$`),
    );
  });
});
