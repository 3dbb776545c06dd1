/**
 * Issue 26: a worker killed with SIGKILL in the middle of a delivered batch. Some of its runs had
 * committed, some were inside their transaction, some were claimed and waiting for a handler slot.
 * Every run of the batch ends completed once with its effect once, and the runs the dead worker
 * held are taken over once it stops beating (its liveness window), not after BullMQ's lock. Twice:
 * with the group's callbacks in turn, and pipelined (ctx.transaction(fn, { pipelined: true })).
 * And a worker killed and started again under its name (a supervisor's restart) well within its
 * window, whose row never stops beating: it claims its earlier start's runs again at its start.
 * And a worker killed holding many runs claimed ahead: another takes them over as many at a time as
 * it has places for, not a few a poll. And a worker killed holding deliveries whose runs it had not
 * claimed yet: another moves them back to the queue once the dead one's key in Redis runs out
 * (dead-deliveries.ts), not after BullMQ's lock, or, started again under its name, it moves them
 * back itself at its start.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { EventedChild } from '../support/evented-child.js';
import { effectDelivery, effectsSuite, runsInState } from '../support/effect-runs.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const fixture = fileURLToPath(new URL('../fixtures/worker-process.ts', import.meta.url));
/** BullMQ's lock: far longer than the liveness window, so its stalled check cannot be what rescues the runs. */
const LOCK_MS = 60_000;
const LIVENESS_MS = 1000;
const RUNS = 30;

describe('a worker killed mid-batch (real PostgreSQL, Redis, child processes)', () => {
  const env = effectsSuite();

  /** The worker fixture's settings, in a namespace of its own. */
  const settings = (namespace: string, livenessMs: number) => ({
    databaseUrl: env.db.url,
    redisUrl: SHARED_REDIS_URL,
    namespace,
    lockDurationMs: LOCK_MS,
    livenessMs,
    job: 'effect',
  });

  /** Polls until every run of `runIds` completed or `deadline` (epoch ms) passed; how many did. */
  async function completedBefore(runIds: bigint[], deadline: number): Promise<number> {
    let done = 0;
    while (Date.now() < deadline) {
      done = await runsInState(env.db.pool, runIds, 'completed');
      if (done === runIds.length) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    return done;
  }

  /** Every run of `runIds` has its effect, and none twice; the effects by run. */
  async function assertEffectsOnce(runIds: bigint[]) {
    const effects = await env.db.pool.query<{ run_id: string; n: string; attempt: number }>(
      'SELECT run_id, count(*) AS n, max(attempt) AS attempt FROM effects WHERE run_id = ANY($1::bigint[]) GROUP BY run_id',
      [runIds.map(String)],
    );
    assert.equal(effects.rows.length, runIds.length, 'every run has its effect');
    assert.ok(
      effects.rows.every((r) => Number(r.n) === 1),
      `no run has its effect twice: ${JSON.stringify(effects.rows.filter((r) => Number(r.n) !== 1))}`,
    );
    return effects.rows;
  }

  /** Polls (up to 20 s) until `n` runs of `runIds` are running; fails if they are not. */
  async function untilRunning(runIds: bigint[], n: number, what: string): Promise<void> {
    for (let t = Date.now() + 20_000; Date.now() < t;) {
      if ((await runsInState(env.db.pool, runIds, 'running')) === n) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(await runsInState(env.db.pool, runIds, 'running'), n, what);
  }

  /** Polls until the runs of `runIds` running (claimed) hold still for half a second; how many. */
  async function steadyRunning(runIds: bigint[]): Promise<number> {
    let running = -1;
    for (let stable = 0, t = Date.now() + 20_000; stable < 10 && Date.now() < t;) {
      await new Promise((r) => setTimeout(r, 50));
      const now = await runsInState(env.db.pool, runIds, 'running');
      stable = now === running && now > 0 ? stable + 1 : 0;
      running = now;
    }
    return running;
  }

  /**
   * Kill `a`, start the worker that takes over (`started` keeps it for the test's cleanup), and wait
   * up to `withinMs` from the kill for every run: each completed with its effect once. The ms from
   * the kill until then, and the effects by run.
   */
  async function killThenTakeOver(
    a: EventedChild,
    start: () => EventedChild,
    started: { b?: EventedChild },
    runIds: bigint[],
    withinMs = 60_000,
  ): Promise<{ settledMs: number; effects: Awaited<ReturnType<typeof assertEffectsOnce>> }> {
    const killedAt = Date.now();
    a.signal('SIGKILL');
    await a.exited;
    started.b = start();
    const done = await completedBefore(runIds, killedAt + withinMs);
    const settledMs = Date.now() - killedAt;
    assert.equal(
      done,
      runIds.length,
      `every run completed (${done} of ${runIds.length}) ${settledMs} ms after the kill`,
    );
    return { settledMs, effects: await assertEffectsOnce(runIds) };
  }

  type Settings = ReturnType<typeof settings> & Record<string, unknown>;

  /**
   * 20 runs at slots of `year` delivered to worker A with 1 handler slot, taught quick: of two
   * deliveries of 10, 1 running and up to 16 claimed ahead (how many follows how quick its first
   * runs were: claim-ahead.ts), the rest not claimed, their delivery active (locked by A).
   */
  async function holdingUnclaimed(queue: ReturnType<typeof effectDelivery>, year: number): Promise<bigint[]> {
    const runIds = await queue.deliverMany(20, new Date(Date.UTC(year, 0, 1)));
    const claimed = await steadyRunning(runIds);
    assert.ok(claimed > 1 && claimed < 20, `A claimed ${claimed}: 1 running, some ahead, not all`);
    assert.ok(
      (await queue.delivery.queue.getActiveCount()) >= 1,
      'A holds a delivery whose runs it has not all claimed',
    );
    return runIds;
  }

  /** Runs that teach worker A its handlers are quick, so it claims runs ahead of busy slots. */
  const TAUGHT = 2;
  let taughtYear = 2041; // each case's teaching runs at slots of their own (the cases share a ledger)

  /**
   * A case's frame: a namespace of its own and its delivery; worker A (mode 'slow', named
   * `A-<namespace>`, then `aSettings`) started on `base(namespace)`, ready, and taught quick (its
   * first TAUGHT runs quick: before any handler has ended, a worker claims only runs it can start);
   * `body`, with the index of A's first event after the teaching; then every worker killed and the
   * queue removed.
   */
  async function withWorkerA(
    base: (namespace: string) => Settings,
    aSettings: Record<string, unknown>,
    body: (f: {
      namespace: string;
      base: Settings;
      a: EventedChild;
      /** A's first event after the teaching. */
      since: number;
      started: { b?: EventedChild };
      queue: ReturnType<typeof effectDelivery>;
    }) => Promise<void>,
  ): Promise<void> {
    const namespace = `bk${randomUUID().slice(0, 8)}`;
    const queue = effectDelivery(env, namespace);
    const settingsOf = base(namespace);
    const a = EventedChild.fixture('A', fixture, {
      ...settingsOf,
      mode: 'slow',
      name: `A-${namespace}`,
      quickFirst: TAUGHT,
      ...aSettings,
    });
    const started: { b?: EventedChild } = {};
    try {
      await a.waitFor((e) => e.event === 'ready', 20_000);
      const taught = await queue.deliverMany(TAUGHT, new Date(Date.UTC(taughtYear++, 0, 1)));
      assert.equal(await completedBefore(taught, Date.now() + 20_000), TAUGHT, 'A ran its quick runs');
      await body({ namespace, base: settingsOf, a, since: a.events.length, started, queue });
    } finally {
      await a.kill();
      await started.b?.kill();
      await queue.close();
    }
  }

  for (const pipelined of [false, true])
    it(
      `every run of the batch ends once, with its effect once; the dead worker's runs are taken over after its liveness window${pipelined ? ' (pipelined ctx.transaction)' : ''}`,
      { timeout: 90_000 },
      () =>
        withWorkerA(
          (ns) => ({ ...settings(ns, LIVENESS_MS), pipelined }),
          {},
          async ({ namespace, base, a, since, started, queue }) => {
            // Pipelined, a group's callbacks run at once in one slot, up to 32 of them, two groups
            // at a time: more runs than that, so the kill at the first commit finds a batch mid-way.
            const runs = pipelined ? 100 : RUNS;
            // Slots of their own each round (the two share a ledger; runs are unique per slot).
            const runIds = await queue.deliverMany(runs, new Date(Date.UTC(pipelined ? 2027 : 2026, 0, 1)));
            // The first handlers commit after 1 s; kill A as the first commits: the rest of that
            // wave is inside its transaction, more runs are claimed and waiting for a slot, more
            // not claimed yet.
            await a.waitFor((e) => e.event === 'committed', 20_000, since);
            const { settledMs, effects } = await killThenTakeOver(
              a,
              () => EventedChild.fixture('B', fixture, { ...base, mode: 'plain', name: `B-${namespace}` }),
              started,
              runIds,
            );
            const committedByA = a.events.slice(since).filter((e) => e.event === 'committed').length;
            const ids = runIds.map(String);
            const byA = effects.filter((r) => r.attempt === 1).length;
            assert.ok(
              byA >= committedByA && byA < runs,
              `A committed ${byA} before it died, B the other ${runs - byA}`,
            );
            const attempts = await env.db.pool.query<{ worker: string; state: string; error: string | null }>(
              'SELECT worker, state, error FROM cw_run_attempts WHERE run_id = ANY($1::bigint[])',
              [ids],
            );
            const running = attempts.rows.filter((r) => r.state === 'running');
            assert.deepEqual(running, [], 'no attempt of a settled run is left running');
            const stale = attempts.rows.filter((r) => r.state === 'stale');
            assert.ok(stale.length > 0, "the dead worker's attempts are settled stale");
            assert.ok(
              stale.every((r) => r.worker === `A-${namespace}` && /stopped beating/.test(r.error ?? '')),
              JSON.stringify(stale.slice(0, 3)),
            );
            // B starts in a few seconds; the runs wait for A's window, not BullMQ's 60 s lock.
            assert.ok(settledMs < LOCK_MS / 2, `settled ${settledMs} ms after the kill`);
          },
        ),
    );

  it(
    "started again under its name within its liveness window: its earlier start's runs are claimed again at once, each once with its effect once",
    { timeout: 90_000 },
    () =>
      // A window longer than the test's wait: no other worker could see A's runs as orphans.
      withWorkerA(
        (ns) => ({ ...settings(ns, LOCK_MS), name: `A-${ns}` }),
        {},
        async ({ base, a, since, started, queue }) => {
          const { name } = base;
          const runIds = await queue.deliverMany(RUNS, new Date(Date.UTC(2028, 0, 1)));
          await a.waitFor((e) => e.event === 'committed', 20_000, since);
          const { settledMs } = await killThenTakeOver(
            a,
            () => EventedChild.fixture('A again', fixture, { ...base, mode: 'plain' }),
            started,
            runIds,
            30_000,
          );
          const ids = runIds.map(String);
          const stale = await env.db.pool.query<{ worker: string; error: string | null }>(
            "SELECT worker, error FROM cw_run_attempts WHERE run_id = ANY($1::bigint[]) AND state = 'stale'",
            [ids],
          );
          assert.ok(stale.rows.length > 0, "the earlier start's attempts are settled stale");
          assert.ok(
            stale.rows.every((r) => r.worker === name && /started again/.test(r.error ?? '')),
            JSON.stringify(stale.rows.slice(0, 3)),
          );
          // Well within the window (LOCK_MS): claimed again at the start, not as orphans.
          assert.ok(settledMs < LOCK_MS / 2, `settled ${settledMs} ms after the kill`);
        },
      ),
  );

  it(
    "a dead worker's runs claimed ahead are taken over a page of free places at a time, each once with its effect once",
    { timeout: 90_000 },
    () =>
      // A: 10 handler slots, taught quick, then runs working 1 s: 10 running and 80 claimed ahead.
      withWorkerA(
        (ns) => settings(ns, LIVENESS_MS),
        {},
        async ({ namespace, base, a, started, queue }) => {
          const held = 90;
          const runIds = await queue.deliverMany(held, new Date(Date.UTC(2029, 0, 1)));
          await untilRunning(runIds, held, 'A claimed every run');
          // B: 2 handler slots. Taking orphans a free handler slot at a time, a poll each half
          // second (the window's half), it would need 22.5 s (90 / 2 × 0.5 s) after the window.
          const { settledMs } = await killThenTakeOver(
            a,
            () =>
              EventedChild.fixture('B', fixture, { ...base, mode: 'plain', name: `B-${namespace}`, concurrency: 2 }),
            started,
            runIds,
          );
          // B's start (a few seconds), A's window (1 s), then pages of B's free places (2 before
          // its first handlers end, then up to 32), each claimed as soon as the last page's are.
          assert.ok(settledMs < 15_000, `settled ${settledMs} ms after the kill`);
        },
      ),
  );

  it(
    "a dead worker's deliveries it had not claimed all of go back to the queue after its liveness window, not its lock; each run once with its effect once",
    { timeout: 90_000 },
    () =>
      // A holds a delivery whose runs it has not all claimed (holdingUnclaimed), locked for LOCK_MS.
      withWorkerA(
        (ns) => settings(ns, LIVENESS_MS),
        { concurrency: 1 },
        async ({ namespace, base, a, started, queue }) => {
          const runIds = await holdingUnclaimed(queue, 2030);
          const { settledMs } = await killThenTakeOver(
            a,
            () => EventedChild.fixture('B', fixture, { ...base, mode: 'plain', name: `B-${namespace}` }),
            started,
            runIds,
          );
          // B's start (a few seconds), A's window (1 s), a poll: far from BullMQ's 60 s lock.
          assert.ok(settledMs < 15_000, `settled ${settledMs} ms after the kill`);
        },
      ),
  );

  it(
    "started again under its name, a worker moves back at once the deliveries its earlier start had not claimed all of, though that start's key lives on; each run once with its effect once",
    { timeout: 90_000 },
    () =>
      // A window as long as the lock: neither the sweep nor BullMQ's stalled check could be what
      // frees the delivery within the test's wait.
      withWorkerA(
        (ns) => ({ ...settings(ns, LOCK_MS), name: `A-${ns}` }),
        { concurrency: 1 },
        async ({ base, a, started, queue }) => {
          const runIds = await holdingUnclaimed(queue, 2031);
          const { settledMs } = await killThenTakeOver(
            a,
            () => EventedChild.fixture('A again', fixture, { ...base, mode: 'plain' }),
            started,
            runIds,
            LOCK_MS / 2,
          );
          assert.ok(settledMs < LOCK_MS / 2, `settled ${settledMs} ms after the kill`);
        },
      ),
  );
});
