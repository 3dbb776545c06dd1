/**
 * A handler slot lent while its run's ctx.transaction waits on its group's COMMIT (slot-loan.ts):
 * lent at the call while slots free quickly (the group's callbacks then run in one slot taken
 * back), else once the group's callbacks are done; taken back before the handler goes on, and
 * before a callback the group rolled back is run again; through a real BullMQ worker, no more
 * than `concurrency` handlers run code at once while more runs than that are in hand. Real
 * PostgreSQL and Redis.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { BullmqDelivery } from '../../src/jobs/bullmq-delivery.js';
import { LEND_WITHIN_MS, RunLedgerBatches } from '../../src/jobs/run-ledger-batches.js';
import type { SlotLoan } from '../../src/jobs/slot-loan.js';
import { StaleTokenError } from '../../src/errors.js';
import { Ledger } from '../../src/ledger/ledger.js';
import type { Claim } from '../../src/ledger/run-ledger.js';
import type { Queryable } from '../../src/ledger/transaction.js';
import { ManualClock } from '../support/manual-clock.js';
import {
  commitTestRun,
  effectRegistry,
  effectsSuite,
  effectTally,
  inProcessWorker,
  runsInState,
  writeEffect,
} from '../support/effect-runs.js';

describe('handler slots lent during a group commit (real PostgreSQL, Redis, BullMQ)', () => {
  const env = effectsSuite();
  let slot = 0;

  async function claimed(ledger: Ledger, n: number): Promise<Claim[]> {
    const claims: Claim[] = [];
    for (let i = 0; i < n; i++) {
      const run = await commitTestRun(ledger, 'effect', {
        scheduledAt: new Date(Date.UTC(2033, 0, 1, 0, slot++)),
        trigger: 'schedule',
      });
      const c = await ledger.runs.claim(run.runId, 'w');
      assert.equal(c.status, 'claimed');
      if (c.status === 'claimed') claims.push(c.claim);
    }
    return claims;
  }

  /** A loan that writes what happens to it into `events`. */
  const loanFor = (i: number, events: string[], atCall = false): SlotLoan => ({
    lendsAtCall: () => atCall,
    lend: () => void events.push(`lend ${i}`),
    takeBack: async () => {
      await sleep(5); // a slot that frees a little later: the answer must wait for it
      events.push(`back ${i}`);
    },
  });

  /** The run's effect, written in its transaction. */
  const insertEffect = (tx: Queryable, claim: Claim) =>
    tx.query('INSERT INTO effects (run_id, attempt, token) VALUES ($1, $2, $3)', [
      claim.runId.toString(),
      claim.attempt,
      claim.token.toString(),
    ]);

  const effectsOf = async (claims: Claim[]) =>
    (
      await env.db.pool.query<{ run_id: string; n: number }>(
        'SELECT run_id::text, count(*)::int AS n FROM effects WHERE run_id = ANY($1::bigint[]) GROUP BY effects.run_id ORDER BY effects.run_id',
        [claims.map((c) => c.runId.toString())],
      )
    ).rows;

  /**
   * Four claimed runs' ctx.transaction at once (one group), each with a loan lending at the call
   * or not; every run committed with its effect once, and had its slot back before its answer.
   */
  async function fourInOneGroup(atCall: boolean, pipelined = false): Promise<{ events: string[] }> {
    const ledger = new Ledger(env.db.pool);
    // Time stands still for the lending rule: the group is always within LEND_WITHIN_MS of its
    // calls (a cold first statement took longer once, and the group lent nothing; that rule has a
    // test of its own below).
    const batches = new RunLedgerBatches(ledger.runs, { clock: new ManualClock() });
    const claims = await claimed(ledger, 4);
    const events: string[] = [];
    const results = await Promise.all(
      claims.map((claim, i) =>
        batches
          .completeInTransaction(
            claim,
            async (tx) => {
              events.push(`fn ${i}`);
              await insertEffect(tx, claim);
              events.push(`wrote ${i}`);
            },
            { loan: loanFor(i, events, atCall), pipelined },
          )
          .then((r) => {
            events.push(`answer ${i}`);
            return r.status;
          }),
      ),
    );
    assert.deepEqual(results, ['committed', 'committed', 'committed', 'committed']);
    for (let i = 0; i < 4; i++)
      assert.ok(
        events.lastIndexOf(`back ${i}`) < events.indexOf(`answer ${i}`),
        `run ${i} answered before its slot was back`,
      );
    assert.deepEqual(
      await effectsOf(claims),
      claims.map((c) => ({ run_id: c.runId.toString(), n: 1 })),
    );
    return { events };
  }

  it('a grouped run lends its slot once every callback of its group is done, and has it back before it answers', async () => {
    const { events } = await fourInOneGroup(false);
    // One group: every callback ran before any slot was lent.
    assert.deepEqual(events.slice(0, 12), [
      ...['fn 0', 'wrote 0', 'fn 1', 'wrote 1', 'fn 2', 'wrote 2', 'fn 3', 'wrote 3'],
      ...['lend 0', 'lend 1', 'lend 2', 'lend 3'],
    ]);
  });

  it('while slots free quickly, each run lends as it calls, and the group runs its callbacks in one slot taken back before the first and lent after the last', async () => {
    const { events } = await fourInOneGroup(true);
    assert.deepEqual(events.slice(0, 14), [
      'lend 0',
      'lend 1',
      'lend 2',
      'lend 3',
      'back 0', // one slot for the group's callbacks, before any of them writes
      ...['fn 0', 'wrote 0', 'fn 1', 'wrote 1', 'fn 2', 'wrote 2', 'fn 3', 'wrote 3'],
      'lend 0',
    ]);
  });

  it('pipelined, while slots free quickly: each run lends as it calls, and the group runs its callbacks at once in one slot taken back', async () => {
    const { events } = await fourInOneGroup(true, true);
    assert.deepEqual(events.slice(0, 14), [
      ...['lend 0', 'lend 1', 'lend 2', 'lend 3'],
      'back 0', // one slot for the group, before any callback writes
      ...['fn 0', 'fn 1', 'fn 2', 'fn 3'], // at once: every callback called before any INSERT answered
      ...['wrote 0', 'wrote 1', 'wrote 2', 'wrote 3'],
      'lend 0',
    ]);
  });

  it('a run lent at the call and alone in its group has its slot back before its callback, and again before it answers', async () => {
    const ledger = new Ledger(env.db.pool);
    const batches = new RunLedgerBatches(ledger.runs);
    const [claim] = await claimed(ledger, 1);
    const events: string[] = [];
    const result = await batches.completeInTransaction(
      claim!,
      async (tx) => {
        events.push('fn 0');
        await insertEffect(tx, claim!);
      },
      { loan: loanFor(0, events, true) },
    );
    assert.equal(result.status, 'committed');
    assert.deepEqual(events, ['lend 0', 'back 0', 'fn 0', 'lend 0', 'back 0']);
  });

  it('a group slower than LEND_WITHIN_MS lends nothing: its runs would wait as long again for their slots', async () => {
    const ledger = new Ledger(env.db.pool);
    const batches = new RunLedgerBatches(ledger.runs);
    const claims = await claimed(ledger, 3);
    const events: string[] = [];
    const results = await Promise.all(
      claims.map((claim, i) =>
        batches.completeInTransaction(
          claim,
          async (tx) => {
            events.push(`fn ${i}`);
            await sleep(LEND_WITHIN_MS); // three of these: the group's callbacks take 3 × LEND_WITHIN_MS
            await insertEffect(tx, claim);
          },
          { loan: loanFor(i, events) },
        ),
      ),
    );
    assert.deepEqual(
      results.map((r) => r.status),
      ['committed', 'committed', 'committed'],
    );
    assert.deepEqual(events, ['fn 0', 'fn 1', 'fn 2'], 'no slot lent, none taken back');
  });

  it('a run whose group rolled back runs its callback again only once its slot is back, and its effect commits once', async () => {
    const ledger = new Ledger(env.db.pool);
    const batches = new RunLedgerBatches(ledger.runs);
    const claims = await claimed(ledger, 3);
    const events: string[] = [];
    let taken = false;
    const outcomes = await Promise.allSettled(
      claims.map((claim, i) =>
        batches.completeInTransaction(
          claim,
          async (tx) => {
            events.push(`fn ${i}`);
            if (!taken) {
              // Another replica takes run 2 over while the group runs: its completion is refused,
              // so the whole group rolls back.
              taken = true;
              await env.db.pool.query('UPDATE cw_runs SET claim_token = claim_token + 1000 WHERE id = $1', [
                claims[2]!.runId.toString(),
              ]);
            }
            await insertEffect(tx, claim);
          },
          { loan: loanFor(i, events) },
        ),
      ),
    );
    assert.deepEqual(
      outcomes.slice(0, 2).map((o) => o.status === 'fulfilled' && o.value.status),
      ['committed', 'committed'],
    );
    assert.equal(outcomes[2]!.status, 'rejected');
    assert.ok((outcomes[2] as PromiseRejectedResult).reason instanceof StaleTokenError);
    for (const i of [0, 1]) {
      const second = events.lastIndexOf(`fn ${i}`);
      assert.notEqual(second, events.indexOf(`fn ${i}`), `run ${i} was redone alone`);
      assert.ok(events.indexOf(`back ${i}`) < second, `run ${i}'s callback ran again before its slot was back`);
    }
    assert.equal(events.filter((e) => e === 'fn 2').length, 1, 'the stale run is not called again');
    assert.deepEqual(await effectsOf(claims), [
      { run_id: claims[0]!.runId.toString(), n: 1 },
      { run_id: claims[1]!.runId.toString(), n: 1 },
    ]);
  });

  /**
   * `runs` runs through a real BullMQ worker with `concurrency` handlers, each sleeping `beforeMs`,
   * writing its effect in ctx.transaction, then sleeping `afterMs` (long enough to overlap others,
   * were its slot not back). Counted: handlers in their own code at once, handlers in hand, and
   * handlers that called ctx.transaction whose callback has not started (each holds its slot
   * unless it lent it at the call). Pipelined, a group's callbacks (told apart by their
   * connection) count as one handler running code, and `callbacks` is the most at once.
   */
  async function throughWorker(o: {
    concurrency: number;
    runs: number;
    beforeMs: number;
    afterMs: number;
    pipelined?: boolean;
  }) {
    const most = { running: 0, inHand: 0, waitingForGroup: 0, callbacks: 0 };
    const now = { running: 0, inHand: 0, waitingForGroup: 0, callbacks: 0 };
    /** Pipelined callbacks running, by their group's connection. */
    const groups = new Map<number, number>();
    const add = (k: keyof typeof most, d: number) => {
      now[k] += d;
      most[k] = Math.max(most[k], now[k]);
      most.running = Math.max(most.running, now.running + groups.size);
    };
    const inGroup = (pid: number, d: number) => {
      const n = (groups.get(pid) ?? 0) + d;
      if (n === 0) groups.delete(pid);
      else groups.set(pid, n);
      add('callbacks', d);
    };
    const registry = effectRegistry(async (ctx) => {
      add('inHand', 1);
      add('running', 1);
      if (o.beforeMs > 0) await sleep(o.beforeMs);
      add('running', -1);
      add('waitingForGroup', 1);
      await ctx.transaction(
        async (tx) => {
          add('waitingForGroup', -1);
          if (!o.pipelined) {
            add('running', 1);
            await writeEffect(tx, ctx);
            add('running', -1);
            return;
          }
          const { rows } = await tx.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
          inGroup(rows[0]!.pid, 1);
          await writeEffect(tx, ctx);
          inGroup(rows[0]!.pid, -1);
        },
        { pipelined: o.pipelined === true },
      );
      add('running', 1);
      await sleep(o.afterMs);
      add('running', -1);
      add('inHand', -1);
    });
    const ledger = new Ledger(env.db.pool);
    const namespace = `sl${randomUUID().slice(0, 8)}`;
    const delivery = new BullmqDelivery({ connection: env.redis, namespace, registry, ledger });
    const ids: bigint[] = [];
    for (let i = 0; i < o.runs; i++) {
      const run = await commitTestRun(ledger, 'effect', {
        scheduledAt: new Date(Date.UTC(2034, 0, 1, 0, slot++)),
        trigger: 'schedule',
      });
      ids.push(run.runId);
      await delivery.enqueue([run]);
    }
    const worker = inProcessWorker({ namespace, registry, ledger, concurrency: o.concurrency });
    await worker.start();
    const done = () => runsInState(env.db.pool, ids, 'completed');
    try {
      const deadline = Date.now() + 45_000;
      while ((await done()) < o.runs && Date.now() < deadline) await sleep(50);
    } finally {
      await worker.close(1000);
      await delivery.queue.obliterate({ force: true }).catch(() => undefined);
      await delivery.close();
    }
    assert.equal(await done(), o.runs);
    assert.deepEqual(await effectTally(env.db.pool, ids), { n: o.runs, runs: o.runs }, 'one effect per run');
    assert.ok(
      most.running <= o.concurrency,
      `${most.running} handlers ran code at once (concurrency ${o.concurrency})`,
    );
    return most;
  }

  it(
    'through a BullMQ worker: more runs than its concurrency in hand, never more than its concurrency running code, each effect once',
    { timeout: 60_000 },
    async () => {
      const most = await throughWorker({ concurrency: 3, runs: 60, beforeMs: 2, afterMs: 10 });
      assert.ok(most.inHand > 3, `slots were lent: at most ${most.inHand} handlers in hand at once`);
    },
  );

  it(
    'through a BullMQ worker with quick handlers: slots lent at the call, so more runs than its concurrency wait on one group, never more than its concurrency running code',
    { timeout: 60_000 },
    async () => {
      const most = await throughWorker({ concurrency: 3, runs: 90, beforeMs: 0, afterMs: 2 });
      assert.ok(
        most.waitingForGroup > 3,
        `lent at the call: at most ${most.waitingForGroup} handlers waited on a group at once (each holding a slot, 3 at most)`,
      );
    },
  );

  it(
    "through a BullMQ worker with quick pipelined handlers: lent at the call, a group's callbacks at once in one slot, never more than its concurrency running code",
    { timeout: 60_000 },
    async () => {
      const most = await throughWorker({ concurrency: 3, runs: 90, beforeMs: 0, afterMs: 2, pipelined: true });
      assert.ok(
        most.waitingForGroup > 3,
        `lent at the call: at most ${most.waitingForGroup} waited on a group at once`,
      );
      assert.ok(most.callbacks > 3, `groups larger than the slots: at most ${most.callbacks} callbacks at once`);
    },
  );

  it(
    'through a BullMQ worker with slow handlers: slots lent only once the callbacks are done',
    { timeout: 60_000 },
    async () => {
      // A handler holds its slot 200 ms: with 3 slots one frees every ~67 ms, past LEND_AT_CALL_WITHIN_MS.
      const most = await throughWorker({ concurrency: 3, runs: 12, beforeMs: 100, afterMs: 100 });
      assert.ok(most.waitingForGroup <= 3, `${most.waitingForGroup} handlers waited on a group at once`);
    },
  );
});
