/**
 * Concurrency limits against a real ledger (PostgreSQL), executors in-process, no queue: a key's
 * runs over its limit wait in the ledger in order and are woken as slots free; a run taken over
 * from a dead worker keeps its slot; a slot whose worker died after its run settled is free; the
 * re-delivery sweep hands over a waiting run only when a slot is free for it.
 */
import { after, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { pino } from 'pino';
import { defineJob } from '../../src/jobs/define-job.js';
import { JobRegistry } from '../../src/jobs/job-registry.js';
import { RunExecutor, type ExecutionResult } from '../../src/jobs/run-executor.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { commitTestRun } from '../support/effect-runs.js';
import { WorkerLiveness } from '../../src/jobs/worker-liveness.js';
import { ManualClock } from '../support/manual-clock.js';

/** A handler that holds until its run's gate opens. */
class Gates {
  private readonly open = new Map<string, () => void>();
  readonly entered: string[] = [];
  wait(runId: string): Promise<void> {
    this.entered.push(runId);
    return new Promise((resolve) => this.open.set(runId, resolve));
  }
  release(runId: bigint): void {
    const r = this.open.get(runId.toString());
    assert.ok(r, `run ${runId} is in its handler`);
    r();
  }
}

describe('concurrency limits (real PostgreSQL ledger)', () => {
  let db: TestDatabase;
  let ledger: Ledger;
  let gates: Gates;
  let woken: bigint[];
  let minute = 0;

  const registry = () =>
    new JobRegistry([
      defineJob({
        name: 'sync-a',
        schedule: '0 0 1 1 *',
        concurrency: { key: 'crm-api', limit: 2 },
        handler: (ctx) => gates.wait(ctx.runId),
      }),
      defineJob({
        name: 'sync-b',
        schedule: '0 0 1 1 *',
        concurrency: { key: 'crm-api', limit: 2 },
        handler: (ctx) => gates.wait(ctx.runId),
      }),
    ]);
  const executor = (replicaId: string) =>
    new RunExecutor({
      ledger: ledger.runs,
      limits: ledger.runs,
      registry: registry(),
      replicaId,
      logger: pino({ level: 'silent' }),
      redeliver: async (run) => {
        woken.push(run.runId);
      },
    });

  before(async () => {
    db = await createTestDatabase();
    ledger = new Ledger(db.pool);
  });
  after(async () => {
    await db.drop();
  });
  beforeEach(async () => {
    gates = new Gates();
    woken = [];
    await db.pool.query('DELETE FROM cw_limit_slots');
    await db.pool.query(`UPDATE cw_runs SET state = 'completed' WHERE state <> 'completed'`);
  });

  async function fire(job = 'sync-a'): Promise<bigint> {
    return (await commitTestRun(ledger, job, { scheduledAt: new Date(Date.UTC(2030, 0, 1, 0, minute++)) })).runId;
  }
  async function run(runId: bigint) {
    return (
      await db.pool.query<{ state: string; error: string | null; limit_key: string | null }>(
        'SELECT state, error, limit_key FROM cw_runs WHERE id = $1',
        [runId.toString()],
      )
    ).rows[0]!;
  }
  /** The slot rows of key 'crm-api', in slot order. */
  async function slotRows() {
    return (
      await db.pool.query<{ slot: number; run_id: string | null; worker: string | null }>(
        'SELECT slot, run_id::text, worker FROM cw_limit_slots WHERE key = $1 ORDER BY slot',
        ['crm-api'],
      )
    ).rows;
  }
  /** Start a run's attempt and wait until it holds a slot (in its handler) or was sent back to wait. */
  async function start(ex: RunExecutor, runId: bigint): Promise<{ done: Promise<ExecutionResult> }> {
    const done = ex.execute(runId, {});
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      if (gates.entered.includes(runId.toString())) return { done };
      const r = await Promise.race([done, new Promise<undefined>((res) => setTimeout(res, 20))]);
      if (r) return { done };
    }
    throw new Error(`run ${runId} neither started nor waited`);
  }

  it('over the limit, runs of every job naming the key wait in the ledger with the reason, and go on in order as slots free', async () => {
    const a = executor('a');
    const b = executor('b');
    const ids = [await fire('sync-a'), await fire('sync-b'), await fire('sync-a'), await fire('sync-b')];
    const first = await start(a, ids[0]!);
    const second = await start(b, ids[1]!);
    assert.deepEqual(gates.entered, [ids[0]!.toString(), ids[1]!.toString()], 'two handlers run');

    const third = await start(a, ids[2]!);
    assert.equal((await third.done).status, 'waiting');
    const fourth = await start(b, ids[3]!);
    assert.equal((await fourth.done).status, 'waiting');
    const waiting = await run(ids[2]!);
    assert.equal(waiting.state, 'pending');
    assert.equal(waiting.limit_key, 'crm-api');
    assert.match(waiting.error ?? '', /waiting for a slot of concurrency key "crm-api" \(limit 2\): every slot taken/);
    assert.match((await run(ids[3]!)).error ?? '', /1 older run of it waiting/);
    assert.equal(gates.entered.length, 2, 'no third handler started');

    gates.release(ids[0]!);
    assert.equal((await first.done).status, 'completed');
    assert.deepEqual(woken, [ids[2]], 'the oldest waiting run is woken for the freed slot');
    // The newer run, delivered before the older one took the slot: it waits, and wakes the older one.
    woken = [];
    const early = await start(b, ids[3]!);
    assert.equal((await early.done).status, 'waiting');
    assert.match((await run(ids[3]!)).error ?? '', /1 older run of it waiting/);
    assert.deepEqual(woken, [ids[2]]);
    const thirdAgain = await start(a, ids[2]!);
    assert.equal(gates.entered.at(-1), ids[2]!.toString(), 'the older run took the slot');

    gates.release(ids[1]!);
    await second.done;
    const fourthAgain = await start(b, ids[3]!);
    assert.equal(gates.entered.at(-1), ids[3]!.toString());
    gates.release(ids[2]!);
    gates.release(ids[3]!);
    assert.equal((await thirdAgain.done).status, 'completed');
    assert.equal((await fourthAgain.done).status, 'completed');
    const attempts = await db.pool.query<{ state: string; n: number }>(
      'SELECT state, count(*)::int AS n FROM cw_run_attempts WHERE run_id = ANY($1) GROUP BY state ORDER BY state',
      [ids.map(String)],
    );
    assert.deepEqual(
      attempts.rows.map((r) => [r.state, r.n]),
      [
        ['completed', 4],
        ['skipped', 3],
      ],
      'each wait is an attempt recorded skipped with its reason',
    );
  });

  it('a key computed from the run limits each value apart', async () => {
    const perCustomer = new RunExecutor({
      ledger: ledger.runs,
      limits: ledger.runs,
      registry: new JobRegistry([
        defineJob({
          name: 'report',
          schedule: '0 0 1 1 *',
          concurrency: { key: (r) => `customer-${(r.payload as { customer: string }).customer}`, limit: 1 },
          handler: (ctx) => gates.wait(ctx.runId),
        }),
      ]),
      replicaId: 'c',
      logger: pino({ level: 'silent' }),
      redeliver: async (r) => {
        woken.push(r.runId);
      },
    });
    // One-off runs with a payload, as `cronwarden once` commits them.
    const once = async (customer: string, key: string) => {
      const res = await db.pool.query<{ id: string }>(
        `INSERT INTO cw_runs (job, scheduled_at, trigger, leader_token, leader_id, payload, once_key)
         VALUES ('report', now(), 'once', 1, 'test', $1, $2) RETURNING id`,
        [JSON.stringify({ customer }), key],
      );
      return BigInt(res.rows[0]!.id);
    };
    const acme1 = await once('acme', 'acme-1');
    const acme2 = await once('acme', 'acme-2');
    const globex = await once('globex', 'globex-1');
    const r1 = await start(perCustomer, acme1);
    const r2 = await start(perCustomer, acme2);
    const r3 = await start(perCustomer, globex);
    assert.equal((await r2.done).status, 'waiting');
    assert.deepEqual(gates.entered, [acme1.toString(), globex.toString()]);
    assert.equal((await run(acme2)).limit_key, 'customer-acme');
    gates.release(acme1);
    gates.release(globex);
    await r1.done;
    await r3.done;
    assert.deepEqual(woken, [acme2]);
  });

  it('a key function that throws or gives a bad key fails the run with the reason', async () => {
    const ex = new RunExecutor({
      ledger: ledger.runs,
      limits: ledger.runs,
      registry: new JobRegistry([
        defineJob({
          name: 'bad-key',
          schedule: '0 0 1 1 *',
          concurrency: {
            key: (r) => (r.scheduledAt.getUTCMinutes() % 2 === 0 ? 'has space' : JSON.parse('{')),
            limit: 1,
          },
          handler: () => assert.fail('the handler never runs'),
        }),
      ]),
      replicaId: 'k',
      logger: pino({ level: 'silent' }),
    });
    minute += minute % 2; // an even minute first
    const spaced = await fire('bad-key');
    const threw = await fire('bad-key');
    await assert.rejects(ex.execute(spaced, {}), /concurrency key of run \d+: must be printable ASCII without spaces/);
    await assert.rejects(ex.execute(threw, {}), /concurrency key of run \d+: the key function threw: .*JSON/);
    for (const id of [spaced, threw]) {
      const r = await run(id);
      assert.equal(r.state, 'failed');
      assert.match(r.error ?? '', /concurrency key of run/);
    }
  });

  it('a run taken over from a dead worker keeps its slot; a settled run of a dead worker frees its slot', async () => {
    const dead = executor('dead');
    const live = executor('live');
    const [x, y, z] = [await fire(), await fire(), await fire()];
    await start(dead, x);
    await start(dead, y);
    const before = await slotRows();
    // 'dead' never beat (no cw_workers row): its runs are orphans; 'live' takes x over.
    await ledger.runs.beat('live');
    gates.entered.length = 0;
    const takeover = await start(live, x);
    assert.deepEqual(gates.entered, [x.toString()], 'the taken-over run runs again');
    const after = await slotRows();
    assert.deepEqual(
      after.map((s) => [s.slot, s.run_id, s.worker]),
      before.map((s) => [s.slot, s.run_id, s.run_id === x.toString() ? 'live' : s.worker]),
      'x kept its slot, now on the live worker',
    );
    const third = await start(live, z);
    assert.equal((await third.done).status, 'waiting', 'y still holds the other slot (its run is running)');

    // y's run settles while its handler's worker is dead and never released it: the slot is free.
    await db.pool.query(`UPDATE cw_runs SET state = 'completed' WHERE id = $1`, [y.toString()]);
    const zAgain = await start(live, z);
    assert.equal(gates.entered.at(-1), z.toString(), 'z took the slot y left');
    gates.release(x);
    gates.release(z);
    await takeover.done;
    await zAgain.done;
  });

  it('a slot of a live worker whose run settled stays held until the handler returns', async () => {
    const ex = executor('w1');
    await ledger.runs.beat('w1');
    const [x, y, z] = [await fire(), await fire(), await fire()];
    const rx = await start(ex, x);
    const ry = await start(ex, y);
    // The run is completed by its ctx.transaction while the handler goes on: still its slot.
    await db.pool.query(`UPDATE cw_runs SET state = 'completed' WHERE id = $1`, [x.toString()]);
    const rz = await start(ex, z);
    assert.equal((await rz.done).status, 'waiting');
    gates.release(x);
    await rx.done;
    assert.deepEqual(woken, [z]);
    gates.release(y);
    await ry.done;
  });

  it('a worker started again under its name frees the slots its earlier start held for runs that ended', async () => {
    // Found from outside: killed after a run's ctx.transaction committed, before its handler
    // returned, and started again under its name within the window, a replica kept that slot for
    // good (its row never stopped beating); a key of limit 2 stalled after two such kills.
    const earlier = executor('w2');
    await ledger.runs.beat('w2');
    const [x, y, z] = [await fire(), await fire(), await fire()];
    const rx = await start(earlier, x);
    const ry = await start(earlier, y);
    // x's run completed by its transaction, then the process died: its handler never returns.
    await db.pool.query(`UPDATE cw_runs SET state = 'completed' WHERE id = $1`, [x.toString()]);
    const slotsOf = async () => (await slotRows()).map((r) => [r.run_id, r.worker]);
    assert.deepEqual(await slotsOf(), [
      [x.toString(), 'w2'],
      [y.toString(), 'w2'],
    ]);
    const redelivered: bigint[] = [];
    let claimedAgain!: () => void;
    const firstClaimAgain = new Promise<void>((resolve) => (claimedAgain = resolve));
    const clock = new ManualClock();
    const liveness = new WorkerLiveness({
      ledger: ledger.runs,
      worker: 'w2',
      clock,
      logger: pino({ level: 'silent' }),
      freePlaces: () => 10,
      deliver: (runId) => {
        redelivered.push(runId);
        claimedAgain();
        return Promise.resolve(false);
      },
    });
    await liveness.start(); // the slots freed; the runs asked for beside the first deliveries
    assert.deepEqual(
      await slotsOf(),
      [
        [null, null],
        [y.toString(), 'w2'],
      ],
      "x's slot is free; y, still running, keeps its slot for its claim again",
    );
    await Promise.race([firstClaimAgain, sleep(10_000, undefined, { ref: false })]);
    assert.deepEqual(redelivered, [y], 'the run left running is claimed again');
    const later = executor('w2');
    const rz = await start(later, z);
    assert.equal(gates.entered.at(-1), z.toString(), 'z took the freed slot');
    await liveness.stop();
    for (const id of [x, y, z]) gates.release(id);
    await Promise.all([rx.done, ry.done, rz.done]);
  });

  it('priority: the waiting run of the higher priority takes the freed slot first', async () => {
    const prio = (name: string, priority: number) =>
      defineJob({
        name,
        schedule: '0 0 1 1 *',
        concurrency: { key: 'warehouse', limit: 1 },
        priority,
        handler: (ctx) => gates.wait(ctx.runId),
      });
    const ex = new RunExecutor({
      ledger: ledger.runs,
      limits: ledger.runs,
      registry: new JobRegistry([prio('load-low', -5), prio('load-high', 10)]),
      replicaId: 'p',
      logger: pino({ level: 'silent' }),
      redeliver: async (r) => {
        woken.push(r.runId);
      },
    });
    const holder = await fire('load-low');
    const olderLow = await fire('load-low');
    const newerHigh = await fire('load-high');
    const h = await start(ex, holder);
    assert.equal((await (await start(ex, olderLow)).done).status, 'waiting');
    assert.equal((await (await start(ex, newerHigh)).done).status, 'waiting');
    gates.release(holder);
    await h.done;
    assert.deepEqual(woken, [newerHigh], 'the high-priority run goes first, though newer');
    assert.equal((await (await start(ex, olderLow)).done).status, 'waiting', 'the low one waits behind it');
    const high = await start(ex, newerHigh);
    assert.equal(gates.entered.at(-1), newerHigh.toString());
    gates.release(newerHigh);
    await high.done;
    const low = await start(ex, olderLow);
    gates.release(olderLow);
    assert.equal((await low.done).status, 'completed');
  });

  it('a rate limit: at most max starts per window; the rest reserve their turns in order and start on them', async () => {
    const starts: { id: string; at: number }[] = [];
    const delays: { id: bigint; delayMs: number }[] = [];
    const ex = new RunExecutor({
      ledger: ledger.runs,
      limits: ledger.runs,
      registry: new JobRegistry([
        defineJob({
          name: 'mail',
          schedule: '0 0 1 1 *',
          rateLimit: { key: 'smtp', max: 2, perMs: 600 },
          handler: (ctx) => {
            starts.push({ id: ctx.runId, at: Date.now() });
          },
        }),
      ]),
      replicaId: 'm',
      logger: pino({ level: 'silent' }),
      redeliver: async (r, delayMs) => {
        delays.push({ id: r.runId, delayMs });
      },
    });
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await fire('mail'));
    const first = [];
    for (const id of ids) first.push(await ex.execute(id, {})); // in the order they come
    assert.deepEqual(
      first.map((r) => r.status),
      ['completed', 'completed', 'waiting', 'waiting', 'waiting'],
    );
    assert.match(
      (await run(ids[2]!)).error ?? '',
      /waiting for its turn under rate limit "smtp" \(2 per 600 ms\): starts at /,
    );
    // Their turns: the third and fourth one window after the first two, the fifth a window later.
    assert.deepEqual(
      delays.map((d) => d.id),
      ids.slice(2),
    );
    const [d3, d4, d5] = delays.map((d) => d.delayMs);
    assert.ok(d3! > 400 && d3! <= 600 && d4! > 400 && d4! <= 600, `turns ${d3}, ${d4}`);
    assert.ok(d5! > 1000 && d5! <= 1200, `turn ${d5}`);
    // Delivered before its turn: not claimed ('early'), nothing recorded.
    assert.equal((await ex.execute(ids[4]!, {})).status, 'early');
    for (const d of delays) setTimeout(() => void ex.execute(d.id, {}), d.delayMs);
    const deadline = Date.now() + 10_000;
    while (starts.length < 5 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(starts.length, 5, 'every run started on its turn');
    // The admitted instants (what the limit counts): any two starts apart are a window apart.
    const admitted = (
      await db.pool.query<{ run_id: string; at: Date }>(
        `SELECT run_id::text, at FROM cw_rate_starts WHERE key = 'smtp' AND used ORDER BY at`,
      )
    ).rows;
    assert.equal(admitted.length, 5);
    for (let i = 2; i < admitted.length; i++) {
      const gap = admitted[i]!.at.getTime() - admitted[i - 2]!.at.getTime();
      assert.ok(gap >= 600, `admissions ${i - 2} and ${i} are a window apart: ${gap} ms`);
    }
    // No handler started before its admitted instant.
    for (const a of admitted) {
      const started = starts.find((x) => x.id === a.run_id)!.at;
      assert.ok(started >= a.at.getTime() - 5, `run ${a.run_id} started ${a.at.getTime() - started} ms early`);
    }
  });

  it('the re-delivery sweep hands over a waiting run only when it heads its key and a slot may be free', async () => {
    const ex = executor('w2');
    const [x, y, z] = [await fire(), await fire(), await fire()];
    const rx = await start(ex, x);
    const ry = await start(ex, y);
    assert.equal((await (await start(ex, z)).done).status, 'waiting');
    await db.pool.query(`UPDATE cw_runs SET delivery_checked_at = now() - interval '1 hour' WHERE id = $1`, [
      z.toString(),
    ]);
    const swept = async () => (await ledger.fires.deliveriesToCheck(1000, 100)).map((r) => r.runId);
    assert.deepEqual(await swept(), [], 'both slots held: nothing to hand over');
    gates.release(x);
    await rx.done;
    // The wake-up was lost: the sweep finds z.
    await db.pool.query(`UPDATE cw_runs SET delivery_checked_at = now() - interval '1 hour' WHERE id = $1`, [
      z.toString(),
    ]);
    assert.deepEqual(await swept(), [z]);
    gates.release(y);
    await ry.done;
  });
});
