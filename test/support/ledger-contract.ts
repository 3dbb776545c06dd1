/**
 * The ledger contract: one list of scenarios, written once against LedgerUnderTest, that the
 * in-memory fakes (test/unit/ledger-contract.test.ts) and the real Ledger on PostgreSQL
 * (test/integration/ledger-contract.test.ts) must both pass. The fakes stand in for the ledger
 * in the fire loop's and the executor's unit tests; this is what keeps them honest.
 *
 * Scenarios share one ledger and keep out of each other's way by name: every job and resource
 * carries the scenario's namespace.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { StaleTokenError, SupersededError } from '../../src/errors.js';
import { slotOwner } from '../../src/cron/job-names.js';
import type { ExecutorLedger } from '../../src/jobs/run-executor.js';
import type { FireBatchResult, FireRequest } from '../../src/ledger/fire-batch.js';
import type { Claim, ClaimResult, FireLedger } from '../../src/ledger/ledger.js';
import { slotToken } from '../../src/ledger/slot-token.js';
import { MAX_ERROR_MESSAGE } from '../../src/ledger/stored-text.js';

export type ContractFireLedger = Pick<
  FireLedger,
  | 'advanceFence'
  | 'fenceToken'
  | 'commitFires'
  | 'markEnqueued'
  | 'unenqueued'
  | 'lastFired'
  | 'pausedJobs'
  | 'setPaused'
  | 'pauses'
  | 'pause'
  | 'expirePauses'
  | 'activeJobs'
>;

/** A run as the ledger records it: its state and the book of its attempts. */
export interface RunView {
  state: string;
  attempts: number;
  skippedAttempts: number;
  completedAttempt: number | null;
  error: string | null;
  attemptRows: { attempt: number; state: string; error: string | null }[];
}

export interface LedgerUnderTest {
  fires: ContractFireLedger;
  runs: ExecutorLedger;
  /** Notes of the committed `INSERT INTO contract_effects (run_id, note)` of a run, in order. */
  effects(runId: bigint): Promise<string[]>;
  view(runId: bigint): Promise<RunView | null>;
}

/** What each scenario gets: the ledger and names of its own. */
interface Ctx {
  l: LedgerUnderTest;
  ns: string;
  job(name?: string): string;
  resource(name: string): string;
}

interface Scenario {
  name: string;
  run(c: Ctx): Promise<void>;
}

const at = (s: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, s));

function leader(c: Ctx, token: bigint, stillLeading = true) {
  return {
    fenceResource: c.resource('scheduler'),
    token,
    replicaId: `leader-${token}`,
    stillLeading: () => stillLeading,
  };
}

function commit(c: Ctx, fires: FireRequest[], token = 7n): Promise<FireBatchResult> {
  return c.l.fires.commitFires(fires, leader(c, token));
}

/** One run of `job` at second `s`, committed as a leader would; its id. */
async function fireOne(
  c: Ctx,
  s: number,
  job = c.job(),
  trigger: FireRequest['trigger'] = 'schedule',
): Promise<bigint> {
  const { committed } = await commit(c, [{ job, scheduledAt: at(s), trigger }]);
  assert.equal(committed.length, 1, `the run of ${job} at ${s}s commits`);
  return committed[0]!.runId;
}

function claimed(result: ClaimResult): Claim {
  if (result.status !== 'claimed') assert.fail(`expected a claim, got ${JSON.stringify(result)}`);
  return result.claim;
}

async function claim(c: Ctx, runId: bigint, worker = 'w'): Promise<Claim> {
  return claimed(await c.l.runs.claim(runId, worker));
}

function effect(tx: pg.PoolClient, runId: bigint, note: string): Promise<unknown> {
  return tx.query('INSERT INTO contract_effects (run_id, note) VALUES ($1, $2)', [runId.toString(), note]);
}

async function view(c: Ctx, runId: bigint): Promise<RunView> {
  const v = await c.l.view(runId);
  assert.ok(v, `run ${runId} exists`);
  return v;
}

const attemptStates = async (c: Ctx, runId: bigint) =>
  (await view(c, runId)).attemptRows.map((a) => [a.attempt, a.state]);

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (value) => assert.fail(`expected a rejection, got ${String(value)}`),
    (err: unknown) => err,
  );
}

const runSide: Scenario[] = [
  {
    name: 'claims give ever-higher execution tokens, across runs, and count attempts',
    async run(c) {
      const a = await fireOne(c, 1);
      const b = await fireOne(c, 2);
      const a1 = await claim(c, a);
      const b1 = await claim(c, b);
      const a2 = await claim(c, a);
      assert.ok(a1.token < b1.token && b1.token < a2.token, `tokens ${a1.token}, ${b1.token}, ${a2.token}`);
      assert.deepEqual([a1.attempt, b1.attempt, a2.attempt], [1, 1, 2]);
      assert.equal(a2.job, c.job());
      assert.equal(a2.scheduledAt.getTime(), at(1).getTime());
      assert.deepEqual(await c.l.runs.runState(a), { state: 'running', claimToken: a2.token });
      // The older attempt is settled by the newer claim, with the reason (never left 'running').
      assert.deepEqual(
        (await view(c, a)).attemptRows.map((r) => [r.attempt, r.state, r.error]),
        [
          [
            1,
            'stale',
            'its outcome was never recorded (its worker was started again, or lost the ledger); the run was claimed again',
          ],
          [2, 'running', null],
        ],
      );
    },
  },
  {
    name: 'a finished run is not claimed: the delivery is a skipped attempt; a retrying run is claimed again',
    async run(c) {
      const done = await fireOne(c, 1);
      const first = await claim(c, done);
      assert.equal(await c.l.runs.finish(first, 'completed'), true);
      assert.deepEqual(await c.l.runs.claim(done, 'w2'), { status: 'finished', state: 'completed', job: c.job() });
      const v = await view(c, done);
      assert.deepEqual([v.state, v.attempts, v.skippedAttempts, v.completedAttempt], ['completed', 1, 1, 1]);
      assert.deepEqual(
        v.attemptRows.map((a) => [a.attempt, a.state, a.error]),
        [
          [1, 'completed', null],
          [2, 'skipped', 'run already completed'],
        ],
      );

      const failed = await fireOne(c, 2);
      assert.equal(await c.l.runs.finish(await claim(c, failed), 'failed', 'boom'), true);
      assert.deepEqual(await c.l.runs.claim(failed, 'w2'), { status: 'finished', state: 'failed', job: c.job() });

      const retried = await fireOne(c, 3);
      const r1 = await claim(c, retried);
      assert.equal(await c.l.runs.finish(r1, 'retrying', 'try again'), true);
      assert.deepEqual(await c.l.runs.runState(retried), { state: 'retrying', claimToken: r1.token });
      const r2 = await claim(c, retried);
      assert.equal(r2.attempt, 2);
      assert.ok(r2.token > r1.token);
    },
  },
  {
    name: 'a run the ledger does not have is not claimed',
    async run(c) {
      assert.deepEqual(await c.l.runs.claim(987_654_321n, 'w'), { status: 'finished', state: 'unknown' });
      assert.equal(await c.l.runs.runState(987_654_321n), null);
    },
  },
  {
    name: 'a stale attempt cannot record its outcome; the newest claim can, once',
    async run(c) {
      const runId = await fireOne(c, 1);
      const first = await claim(c, runId, 'w1');
      const second = await claim(c, runId, 'w2');
      assert.equal(await c.l.runs.finish(first, 'completed'), false, 'the older attempt is refused');
      assert.deepEqual(
        await c.l.runs.runState(runId),
        { state: 'running', claimToken: second.token },
        'and changed nothing',
      );
      assert.equal(await c.l.runs.finish(second, 'failed', 'boom'), true);
      assert.equal(await c.l.runs.finish(second, 'completed'), false, 'a finished run takes no second outcome');
      const v = await view(c, runId);
      assert.deepEqual([v.state, v.error, v.completedAttempt], ['failed', 'boom', null]);
      assert.deepEqual(
        v.attemptRows,
        [
          { attempt: 1, state: 'stale', error: 'worker w1 stopped beating; the run was handed to w2' },
          { attempt: 2, state: 'failed', error: 'boom' },
        ],
        'a refused late outcome does not overwrite the record of an attempt that already ended',
      );
    },
  },
  {
    name: 'an error with NUL characters and megabytes of text is recorded bounded and sanitised',
    async run(c) {
      const runId = await fireOne(c, 1);
      const attempt = await claim(c, runId);
      assert.equal(await c.l.runs.finish(attempt, 'failed', new Error('x\u0000' + 'y'.repeat(5_000_000))), true);
      const v = await view(c, runId);
      assert.equal(v.state, 'failed');
      const error = v.error ?? '';
      assert.ok(error.startsWith('x\\0yyy'), error.slice(0, 20));
      assert.ok(error.length <= MAX_ERROR_MESSAGE, `${error.length} characters`);
      assert.equal(v.attemptRows[0]?.error, error);
    },
  },
  {
    name: 'fences: a newer attempt of the run wins, whatever the write order; equal tokens pass',
    async run(c) {
      const runId = await fireOne(c, 6);
      const first = await claim(c, runId, 'w1');
      await c.l.runs.fenceRun(c.resource('account/1'), first);
      await c.l.runs.fenceRun(c.resource('account/1'), first); // one attempt writes many times
      const second = await claim(c, runId, 'w2');
      const refused = await rejection(c.l.runs.fenceRun(c.resource('account/1'), first));
      assert.ok(refused instanceof StaleTokenError, String(refused));
      assert.equal(refused.resource, `run ${runId}`, 'refused on the claim, before the resource');
      assert.equal(refused.highest, second.token);
      await assert.rejects(
        c.l.runs.fenceRun(c.resource('account/2'), first),
        StaleTokenError,
        'even on a resource the newer attempt never wrote',
      );
      assert.equal(await c.l.fires.fenceToken(c.resource('account/2')), null, 'and wrote nothing there');
      await c.l.runs.fenceRun(c.resource('account/1'), second);
      assert.equal(
        await c.l.fires.fenceToken(c.resource('account/1')),
        slotToken(at(6), 2),
        'the fence holds the slot token',
      );
    },
  },
  {
    name: 'fences: an earlier slot after a later one is superseded, whatever the claim order',
    async run(c) {
      const { committed } = await commit(c, [
        { job: c.job(), scheduledAt: at(4), trigger: 'catchup' },
        { job: c.job(), scheduledAt: at(5), trigger: 'catchup' },
      ]);
      const [early, late] = committed.map((r) => r.runId);
      const lateClaim = await claim(c, late!);
      const earlyClaim = await claim(c, early!);
      assert.ok(earlyClaim.token > lateClaim.token, 'the earlier slot holds the newer claim');
      await c.l.runs.fenceRun(c.resource('r'), lateClaim);
      const refused = await rejection(c.l.runs.fenceRun(c.resource('r'), earlyClaim));
      assert.ok(refused instanceof SupersededError, String(refused));
      assert.equal(refused.scheduledAt.getTime(), at(4).getTime());
      assert.equal(refused.newerScheduledAt?.getTime(), at(5).getTime());
      assert.equal(await c.l.runs.finish(earlyClaim, 'superseded', refused), true);
      assert.equal((await c.l.runs.runState(early!))?.state, 'superseded');
      assert.equal(await c.l.fires.fenceToken(c.resource('r')), slotToken(at(5), 1), 'the later slot keeps the fence');
    },
  },
  {
    name: 'fences: an older attempt of the same slot is stale, not superseded',
    async run(c) {
      // A scheduled run and a manual trigger of the same instant: one slot, two runs.
      const scheduled = await fireOne(c, 9, c.job(), 'schedule');
      const manual = await fireOne(c, 9, c.job(), 'manual');
      const s1 = await claim(c, scheduled);
      assert.equal(await c.l.runs.finish(s1, 'retrying', 'again'), true);
      const s2 = await claim(c, scheduled);
      const m1 = await claim(c, manual);
      await c.l.runs.fenceRun(c.resource('r'), s2);
      const refused = await rejection(c.l.runs.fenceRun(c.resource('r'), m1));
      assert.ok(refused instanceof StaleTokenError && !(refused instanceof SupersededError), String(refused));
      assert.equal(refused.resource, c.resource('r'), 'refused on the resource: its claim is the newest');
      assert.equal(refused.token, slotToken(at(9), 1));
      assert.equal(refused.highest, slotToken(at(9), 2));
    },
  },
  {
    name: 'completeInTransaction commits the effect with the completion; a later attempt is skipped without calling fn',
    async run(c) {
      const runId = await fireOne(c, 1);
      const first = await claim(c, runId, 'w1');
      const done = await c.l.runs.completeInTransaction(first, async (tx) => {
        await effect(tx, runId, 'first');
        return 'value';
      });
      assert.deepEqual(done, { status: 'committed', value: 'value' });
      const v = await view(c, runId);
      assert.deepEqual([v.state, v.completedAttempt], ['completed', 1]);
      assert.deepEqual(await c.l.effects(runId), ['first']);
      assert.equal(
        await c.l.runs.finish(first, 'retrying', 'interrupted'),
        false,
        'a late interrupt of the same attempt is refused',
      );
      assert.deepEqual(await attemptStates(c, runId), [[1, 'completed']], 'and leaves the completed attempt as it was');
      let called = false;
      const again = await c.l.runs.completeInTransaction(first, async () => {
        called = true;
      });
      assert.deepEqual(again, { status: 'skipped' });
      assert.equal(called, false);
      assert.equal((await view(c, runId)).skippedAttempts, 1);
      assert.deepEqual(await attemptStates(c, runId), [[1, 'skipped']]);
    },
  },
  {
    name: 'completeInTransaction of an attempt that is no longer the newest claim: StaleTokenError, fn not called',
    async run(c) {
      const runId = await fireOne(c, 1);
      const first = await claim(c, runId, 'w1');
      const second = await claim(c, runId, 'w2');
      let called = false;
      const refused = await rejection(
        c.l.runs.completeInTransaction(first, async () => {
          called = true;
        }),
      );
      assert.ok(refused instanceof StaleTokenError, String(refused));
      assert.equal(refused.highest, second.token);
      assert.equal(called, false);
      assert.deepEqual(await c.l.runs.runState(runId), { state: 'running', claimToken: second.token });
    },
  },
  {
    name: 'completeInTransaction rolls back when a newer claim comes in while fn runs, fences written through tx included',
    async run(c) {
      const runId = await fireOne(c, 1);
      const first = await claim(c, runId, 'w1');
      let second: Claim | undefined;
      const refused = await rejection(
        c.l.runs.completeInTransaction(first, async (tx) => {
          await c.l.runs.fenceRun(c.resource('r'), first, tx);
          await effect(tx, runId, 'first');
          second = await claim(c, runId, 'w2');
        }),
      );
      assert.ok(refused instanceof StaleTokenError, String(refused));
      assert.ok(second);
      assert.deepEqual(await c.l.effects(runId), [], 'the effect rolled back');
      assert.equal(await c.l.fires.fenceToken(c.resource('r')), null, 'the fence rolled back');
      assert.deepEqual(await c.l.runs.runState(runId), { state: 'running', claimToken: second.token });
      assert.deepEqual(await attemptStates(c, runId), [
        [1, 'stale'],
        [2, 'running'],
      ]);
      const done = await c.l.runs.completeInTransaction(second, (tx) => effect(tx, runId, 'second'));
      assert.equal(done.status, 'committed');
      assert.deepEqual(await c.l.effects(runId), ['second']);
    },
  },
  {
    name: 'completeInTransaction overtaken by a newer attempt that completed: rolled back, recorded skipped',
    async run(c) {
      const runId = await fireOne(c, 1);
      const first = await claim(c, runId, 'w1');
      const refused = await rejection(
        c.l.runs.completeInTransaction(first, async (tx) => {
          await effect(tx, runId, 'first');
          const second = await claim(c, runId, 'w2');
          assert.equal(
            (await c.l.runs.completeInTransaction(second, (tx2) => effect(tx2, runId, 'second'))).status,
            'committed',
          );
        }),
      );
      assert.ok(refused instanceof StaleTokenError, String(refused));
      assert.deepEqual(await c.l.effects(runId), ['second']);
      const v = await view(c, runId);
      assert.deepEqual([v.state, v.completedAttempt, v.skippedAttempts], ['completed', 2, 1]);
      assert.deepEqual(
        v.attemptRows.map((a) => [a.attempt, a.state]),
        [
          [1, 'skipped'],
          [2, 'completed'],
        ],
      );
    },
  },
  {
    name: 'completeInTransaction whose fn throws commits nothing and leaves the claim in place',
    async run(c) {
      const runId = await fireOne(c, 1);
      const first = await claim(c, runId);
      const boom = new Error('handler failed');
      const thrown = await rejection(
        c.l.runs.completeInTransaction(first, async (tx) => {
          await c.l.runs.fenceRun(c.resource('r'), first, tx);
          await effect(tx, runId, 'lost');
          throw boom;
        }),
      );
      assert.equal(thrown, boom);
      assert.deepEqual(await c.l.effects(runId), []);
      assert.equal(await c.l.fires.fenceToken(c.resource('r')), null);
      assert.deepEqual(await c.l.runs.runState(runId), { state: 'running', claimToken: first.token });
      assert.equal(await c.l.runs.finish(first, 'retrying', boom), true, 'the attempt can still record its failure');
    },
  },
  {
    name: "a run cancelled by overlap 'replace' takes no outcome from its attempt and is not claimed again",
    async run(c) {
      const running = await fireOne(c, 1);
      const attempt = await claim(c, running);
      const res = await commit(c, [{ job: c.job(), scheduledAt: at(2), trigger: 'schedule', replace: true }]);
      assert.deepEqual(res.cancelled, [running]);
      assert.equal(await c.l.runs.finish(attempt, 'completed'), false);
      assert.equal(
        (await rejection(c.l.runs.completeInTransaction(attempt, (tx) => effect(tx, running, 'late')))) instanceof
          StaleTokenError,
        true,
      );
      assert.deepEqual(await c.l.effects(running), []);
      const v = await view(c, running);
      assert.equal(v.state, 'cancelled');
      assert.equal(v.error, `replaced by the fire of ${at(2).toISOString()}`);
      assert.deepEqual(await c.l.runs.claim(running, 'w2'), { status: 'finished', state: 'cancelled', job: c.job() });
    },
  },
];

const fireSide: Scenario[] = [
  {
    name: "overlap 'coalesce': the waiting run stands for the skipped slots, or the oldest of them becomes it",
    async run(c) {
      const active = await fireOne(c, 1);
      await c.l.fires.markEnqueued([active]);
      const held = await commit(c, [{ job: c.job(), scheduledAt: at(2), trigger: 'schedule', hold: true }]);
      const waiting = held.committed[0]!.runId;
      const skip = (s: number): FireRequest => ({
        job: c.job(),
        scheduledAt: at(s),
        trigger: 'schedule',
        state: 'skipped',
        error: 'overlap "coalesce": the waiting run stands for it',
        coalesce: true,
      });
      const res = await commit(c, [skip(3), skip(4)]);
      assert.deepEqual(
        res.committed.map((f) => [f.state, f.hold]),
        [
          ['skipped', false],
          ['skipped', false],
        ],
      );
      for (const f of res.committed)
        assert.equal((await view(c, f.runId)).error, `overlap "coalesce": run ${waiting} stands for it`);
      assert.deepEqual(claimed(await c.l.runs.claim(waiting, 'w')).coalesced, { count: 2, until: at(4) });

      // No run waits any more (it was claimed): the oldest slot becomes the waiting run.
      const again = await commit(c, [skip(5), skip(6), skip(7)]);
      const [five, six, seven] = again.committed;
      assert.deepEqual(
        again.committed.map((f) => [f.state, f.hold]),
        [
          ['pending', true],
          ['skipped', false],
          ['skipped', false],
        ],
      );
      assert.equal((await view(c, five!.runId)).state, 'pending');
      assert.equal((await view(c, five!.runId)).error, null);
      for (const f of [six!, seven!])
        assert.equal((await view(c, f.runId)).error, `overlap "coalesce": run ${five!.runId} stands for it`);
      assert.deepEqual(claimed(await c.l.runs.claim(five!.runId, 'w')).coalesced, { count: 2, until: at(7) });
    },
  },
  {
    name: 'the fence refuses a leader token lower than one already committed, and commits nothing',
    async run(c) {
      await commit(c, [{ job: c.job(), scheduledAt: at(2), trigger: 'schedule' }], 7n);
      const refused = await rejection(commit(c, [{ job: c.job(), scheduledAt: at(3), trigger: 'schedule' }], 6n));
      assert.ok(refused instanceof StaleTokenError && refused.highest === 7n, String(refused));
      assert.equal((await c.l.fires.activeJobs([c.job()])).get(c.job())?.ids.length, 1);
      assert.equal((await c.l.fires.lastFired()).get(c.job())?.getTime(), at(2).getTime());
      await c.l.fires.advanceFence(c.resource('scheduler'), 7n); // equal passes
      await assert.rejects(c.l.fires.advanceFence(c.resource('scheduler'), 6n), StaleTokenError);
      await c.l.fires.advanceFence(c.resource('scheduler'), 8n);
      assert.equal(await c.l.fires.fenceToken(c.resource('scheduler')), 8n);
    },
  },
  {
    name: "a batch past the leader's deadline rolls back whole, the fence's advance included",
    async run(c) {
      await commit(c, [{ job: c.job(), scheduledAt: at(1), trigger: 'schedule' }], 7n);
      const late = await c.l.fires.commitFires(
        [{ job: c.job(), scheduledAt: at(2), trigger: 'schedule', replace: true }],
        leader(c, 9n, false),
      );
      assert.deepEqual(late, { committed: [], duplicates: 0, cancelled: [] });
      assert.equal(await c.l.fires.fenceToken(c.resource('scheduler')), 7n);
      assert.equal((await c.l.fires.lastFired()).get(c.job())?.getTime(), at(1).getTime());
      assert.equal(
        (await c.l.fires.activeJobs([c.job()])).get(c.job())?.ids.length,
        1,
        'nothing cancelled, nothing inserted',
      );
      const after = await commit(c, [{ job: c.job(), scheduledAt: at(2), trigger: 'schedule' }], 8n);
      assert.equal(after.committed.length, 1, 'a token between the committed and the rolled-back one still commits');
    },
  },
  {
    name: 'an empty batch commits nothing and checks no fence',
    async run(c) {
      await commit(c, [{ job: c.job(), scheduledAt: at(1), trigger: 'schedule' }], 7n);
      assert.deepEqual(await commit(c, [], 3n), { committed: [], duplicates: 0, cancelled: [] });
      assert.equal(await c.l.fires.fenceToken(c.resource('scheduler')), 7n);
    },
  },
  {
    name: 'the unique (job, scheduled_at) key refuses a fire committed before, from any leader',
    async run(c) {
      const fires: FireRequest[] = [
        { job: c.job('a'), scheduledAt: at(1), trigger: 'schedule' },
        { job: c.job('b'), scheduledAt: at(1), trigger: 'schedule', state: 'skipped', error: 'paused' },
      ];
      const first = await commit(c, fires, 5n);
      assert.deepEqual(
        first.committed.map((r) => [r.job, r.state, r.trigger]),
        [
          [c.job('a'), 'pending', 'schedule'],
          [c.job('b'), 'skipped', 'schedule'],
        ],
      );
      assert.equal(first.duplicates, 0);
      const again = await commit(c, [...fires, { job: c.job('a'), scheduledAt: at(2), trigger: 'catchup' }], 6n);
      assert.deepEqual(
        again.committed.map((r) => [r.job, r.scheduledAt.getTime()]),
        [[c.job('a'), at(2).getTime()]],
      );
      assert.equal(again.duplicates, 2);
      const catchup = await commit(c, [{ job: c.job('a'), scheduledAt: at(1), trigger: 'catchup' }], 6n);
      assert.equal(catchup.duplicates, 1, 'a catch-up of a scheduled instant is the same slot');
    },
  },
  {
    name: 'manual triggers are outside the key: each is its own run, and none takes a scheduled slot',
    async run(c) {
      const job = c.job();
      const manual = await commit(c, [{ job, scheduledAt: at(40), trigger: 'manual' }]);
      assert.equal(manual.committed.length, 1);
      const scheduled = await commit(c, [{ job, scheduledAt: at(40), trigger: 'schedule' }]);
      assert.equal(scheduled.committed.length, 1, 'the scheduled fire at the same instant commits');
      const secondManual = await commit(c, [{ job, scheduledAt: at(40), trigger: 'manual' }]);
      assert.equal(secondManual.committed.length, 1, 'each trigger is its own run');
      assert.equal((await commit(c, [{ job, scheduledAt: at(40), trigger: 'catchup' }])).duplicates, 1);
      const later = await commit(c, [{ job, scheduledAt: at(50), trigger: 'manual' }]);
      assert.equal(later.committed.length, 1);
      assert.equal(
        (await c.l.fires.lastFired()).get(job)?.getTime(),
        at(40).getTime(),
        'manual triggers do not move lastFired',
      );
      assert.equal((await c.l.fires.activeJobs([job])).get(job)?.ids.length, 4);
    },
  },
  {
    name: "a runtime schedule's slot is one slot under any handler's name, and its last fire is the schedule's",
    async run(c) {
      // "report/<id>", then updated to handler "tick", then back (issue 25 #1).
      const id = c.job('s');
      const [report, tick] = [`report/${id}`, `tick/${id}`];
      const fire = (job: string, s: number, trigger: FireRequest['trigger'] = 'schedule'): FireRequest => ({
        job,
        scheduledAt: at(s),
        trigger,
      });
      assert.equal((await commit(c, [fire(report, 1), fire(report, 2)])).committed.length, 2);
      const renamed = await commit(c, [fire(tick, 1, 'backfill'), fire(tick, 2, 'catchup'), fire(tick, 3)]);
      assert.deepEqual(
        renamed.committed.map((r) => [r.job, r.scheduledAt.getTime()]),
        [[tick, at(3).getTime()]],
        'slots 1 and 2 ran as report/<id>: taken',
      );
      assert.equal(renamed.duplicates, 2);
      const back = await commit(c, [fire(report, 3, 'catchup'), fire(report, 4)]);
      assert.deepEqual(
        back.committed.map((r) => [r.job, r.scheduledAt.getTime()]),
        [[report, at(4).getTime()]],
      );
      // The schedule's last fire, under whichever name; a job from code with the id's name is another job.
      await commit(c, [fire(tick, 5)]);
      assert.equal((await commit(c, [fire(id, 5)])).committed.length, 1);
      const last = await c.l.fires.lastFired();
      assert.equal(last.get(slotOwner(report))?.getTime(), at(5).getTime());
      assert.equal(last.get(slotOwner(tick))?.getTime(), at(5).getTime());
      assert.equal(last.get(id)?.getTime(), at(5).getTime());
      assert.notEqual(slotOwner(report), slotOwner(id));
      // Manual triggers stay outside the key, under any name.
      assert.equal((await commit(c, [fire(tick, 4, 'manual')])).committed.length, 1);
    },
  },
  {
    name: 'lastFired moves forward, never back, and counts skipped fires',
    async run(c) {
      const [a, b] = [c.job('a'), c.job('b')];
      await commit(c, [{ job: a, scheduledAt: at(5), trigger: 'schedule' }]);
      await commit(c, [{ job: a, scheduledAt: at(3), trigger: 'catchup' }]);
      await commit(c, [{ job: b, scheduledAt: at(7), trigger: 'schedule', state: 'skipped', error: 'overlap' }]);
      const last = await c.l.fires.lastFired();
      assert.equal(last.get(a)?.getTime(), at(5).getTime());
      assert.equal(last.get(b)?.getTime(), at(7).getTime());
      assert.equal(last.has(c.job('never')), false);
    },
  },
  {
    name: 'the outbox lists committed pending runs in commit order until they are marked enqueued',
    async run(c) {
      const { committed } = await commit(c, [
        { job: c.job('a'), scheduledAt: at(2), trigger: 'schedule' },
        { job: c.job('a'), scheduledAt: at(1), trigger: 'catchup' },
        { job: c.job('b'), scheduledAt: at(1), trigger: 'schedule', state: 'skipped', error: 'paused' },
      ]);
      const mine = async () =>
        (await c.l.fires.unenqueued(10_000, [])).filter((r) => r.job.startsWith(c.ns)).map((r) => r.runId);
      assert.deepEqual(await mine(), [committed[0]!.runId, committed[1]!.runId], 'a skipped fire is never delivered');
      await c.l.fires.markEnqueued([committed[0]!.runId]);
      assert.deepEqual(await mine(), [committed[1]!.runId]);
      await c.l.fires.markEnqueued([committed[1]!.runId, committed[0]!.runId]);
      assert.deepEqual(await mine(), []);
    },
  },
  {
    name: "the outbox holds a queued job's run while an earlier delivered run is active",
    async run(c) {
      const job = c.job();
      const { committed } = await commit(c, [
        { job, scheduledAt: at(10), trigger: 'schedule' },
        { job, scheduledAt: at(11), trigger: 'schedule', hold: true },
      ]);
      assert.deepEqual(
        committed.map((r) => r.hold),
        [false, true],
      );
      const [first, second] = committed.map((r) => r.runId);
      await c.l.fires.markEnqueued([first!]);
      const ofJob = async (queued: string[]) =>
        (await c.l.fires.unenqueued(10_000, queued)).filter((r) => r.job === job).map((r) => r.runId);
      assert.deepEqual(await ofJob([job]), [], 'held while the first run is active');
      assert.deepEqual(await ofJob([]), [second], 'a job not queued is not held');
      const attempt = await claim(c, first!);
      assert.equal(await c.l.runs.finish(attempt, 'retrying', 'again'), true);
      assert.deepEqual(await ofJob([job]), [], 'still held: retrying is active');
      assert.equal(await c.l.runs.finish(await claim(c, first!), 'completed'), true);
      assert.deepEqual(await ofJob([job]), [second], 'released once the job is idle');
    },
  },
  {
    name: 'paused jobs: set, listed, unset',
    async run(c) {
      const [a, b] = [c.job('a'), c.job('b')];
      const mine = async () => [...(await c.l.fires.pausedJobs())].filter((j) => j.startsWith(c.ns)).sort();
      assert.deepEqual(await mine(), []);
      await c.l.fires.setPaused(a, true);
      await c.l.fires.setPaused(b, true);
      await c.l.fires.setPaused(a, true);
      assert.deepEqual(await mine(), [a, b]);
      await c.l.fires.setPaused(a, false);
      assert.deepEqual(await mine(), [b]);
    },
  },
  {
    name: 'pauses: reason, who and until kept; expired ones lifted under the fence, exactly once',
    async run(c) {
      const [a, b, forever] = [c.job('a'), c.job('b'), c.job('forever')];
      const mine = async () =>
        [...(await c.l.fires.pauses()).values()]
          .filter((p) => p.job.startsWith(c.ns))
          .sort((x, y) => x.job.localeCompare(y.job));
      const stored = await c.l.fires.pause(a, { reason: 'migration', by: 'admin (ops)', until: at(30) });
      assert.deepEqual(
        [stored.job, stored.reason, stored.by, stored.until?.toISOString()],
        [a, 'migration', 'admin (ops)', at(30).toISOString()],
      );
      assert.ok(stored.at instanceof Date);
      await c.l.fires.pause(b, { reason: null, by: 'admin', until: at(60) });
      await c.l.fires.pause(forever, { reason: 'broken', by: 'admin', until: null });
      assert.deepEqual(
        (await mine()).map((p) => [p.job, p.until?.toISOString() ?? null]),
        [
          [a, at(30).toISOString()],
          [b, at(60).toISOString()],
          [forever, null],
        ],
      );
      assert.deepEqual([...(await c.l.fires.pausedJobs())].filter((j) => j.startsWith(c.ns)).sort(), [a, b, forever]);
      const fence = { resource: c.resource('scheduler'), token: 7n };
      const lifted = (await c.l.fires.expirePauses(at(30).getTime(), fence)).filter((p) => p.job.startsWith(c.ns));
      assert.deepEqual(
        lifted.map((p) => [p.job, p.reason, p.by]),
        [[a, 'migration', 'admin (ops)']],
        'until is inclusive',
      );
      assert.deepEqual(
        (await c.l.fires.expirePauses(at(30).getTime(), fence)).filter((p) => p.job.startsWith(c.ns)),
        [],
        'once',
      );
      await c.l.fires.advanceFence(fence.resource, 8n);
      assert.ok((await rejection(c.l.fires.expirePauses(at(90).getTime(), fence))) instanceof StaleTokenError);
      assert.deepEqual(
        (await mine()).map((p) => p.job),
        [b, forever],
        'a refused leader lifts nothing',
      );
      await c.l.fires.setPaused(forever, false);
      await c.l.fires.setPaused(b, true); // a plain pause drops the earlier reason and expiry
      assert.deepEqual(
        (await mine()).map((p) => [p.job, p.reason, p.until]),
        [[b, null, null]],
      );
    },
  },
  {
    name: "a queued job's waiting runs are released one at a time, oldest first",
    async run(c) {
      const job = c.job();
      const { committed } = await commit(c, [
        { job, scheduledAt: at(20), trigger: 'schedule' },
        { job, scheduledAt: at(21), trigger: 'schedule', hold: true },
        { job, scheduledAt: at(22), trigger: 'schedule', hold: true },
      ]);
      const [first, second, third] = committed.map((r) => r.runId);
      await c.l.fires.markEnqueued([first!]);
      const released = async () =>
        (await c.l.fires.unenqueued(10_000, [job])).filter((r) => r.job === job).map((r) => r.runId);
      assert.deepEqual(await released(), []);
      assert.equal(await c.l.runs.finish(await claim(c, first!), 'completed'), true);
      assert.deepEqual(await released(), [second], 'only the oldest waiting run');
      await c.l.fires.markEnqueued([second!]);
      assert.deepEqual(await released(), []);
      const late = await claim(c, second!);
      assert.equal(late.trigger, 'schedule');
      assert.ok(late.claimedAt instanceof Date);
      assert.equal(await c.l.runs.finish(late, 'completed'), true);
      assert.deepEqual(await released(), [third]);
    },
  },
  {
    name: 'activeJobs: the active runs of the jobs asked for, and how many wait undelivered',
    async run(c) {
      const [a, b, idle] = [c.job('a'), c.job('b'), c.job('idle')];
      const { committed } = await commit(c, [
        { job: a, scheduledAt: at(1), trigger: 'schedule' },
        { job: a, scheduledAt: at(2), trigger: 'schedule' },
        { job: a, scheduledAt: at(3), trigger: 'schedule' },
        { job: b, scheduledAt: at(1), trigger: 'schedule' },
        { job: a, scheduledAt: at(4), trigger: 'schedule', state: 'skipped', error: 'overlap' },
        { job: idle, scheduledAt: at(1), trigger: 'schedule' },
        { job: a, scheduledAt: at(5), trigger: 'schedule', hold: true },
      ]);
      // By job and instant: the commit returns its runs in lock order, not in the order asked.
      const run = (job: string, s: number) =>
        committed.find((f) => f.job === job && f.scheduledAt.getTime() === at(s).getTime())!.runId;
      const ids = [run(a, 1), run(a, 2), run(a, 3), run(b, 1), run(a, 4), run(idle, 1), run(a, 5)];
      const id = (i: number) => ids[i]!;
      await c.l.fires.markEnqueued([id(0), id(1), id(5)]);
      assert.equal(await c.l.runs.finish(await claim(c, id(0)), 'retrying', 'again'), true);
      assert.equal(await c.l.runs.finish(await claim(c, id(1)), 'completed'), true);
      assert.equal(await c.l.runs.finish(await claim(c, id(5)), 'failed', 'boom'), true);
      const active = await c.l.fires.activeJobs([a, idle, c.job('none')]);
      assert.deepEqual([...active.keys()].sort(), [a], 'only jobs with active runs, only those asked for');
      assert.deepEqual(
        [...active.get(a)!.ids].sort((x, y) => (x < y ? -1 : 1)),
        [id(0), id(2), id(6)],
      );
      // id(2) was released to the queue at its commit, its hand-over not yet confirmed: not held.
      assert.equal(active.get(a)!.held, 1, 'the run its overlap policy held back');
      assert.equal((await c.l.fires.activeJobs([])).size, 0);
    },
  },
  {
    name: "overlap 'replace': an inserted fire cancels its job's other active runs; the same fire again cancels nothing",
    async run(c) {
      const [job, other] = [c.job(), c.job('other')];
      const { committed } = await commit(c, [
        { job, scheduledAt: at(20), trigger: 'schedule' },
        { job, scheduledAt: at(21), trigger: 'schedule' },
        { job: other, scheduledAt: at(20), trigger: 'schedule' },
      ]);
      await claim(c, committed[0]!.runId);
      const res = await commit(c, [{ job, scheduledAt: at(22), trigger: 'schedule', replace: true }], 8n);
      assert.equal(res.committed.length, 1);
      assert.deepEqual(
        [...res.cancelled].sort((x, y) => (x < y ? -1 : 1)),
        [committed[0]!.runId, committed[1]!.runId],
      );
      assert.equal((await c.l.runs.runState(committed[2]!.runId))?.state, 'pending', "another job's run is untouched");
      const again = await commit(c, [{ job, scheduledAt: at(22), trigger: 'schedule', replace: true }], 8n);
      assert.deepEqual(again, { committed: [], duplicates: 1, cancelled: [] });
      assert.equal((await c.l.runs.runState(res.committed[0]!.runId))?.state, 'pending');
    },
  },
  {
    name: "overlap 'replace' from a stale leader cancels nothing",
    async run(c) {
      const running = await fireOne(c, 20);
      await claim(c, running);
      await assert.rejects(
        c.l.fires.commitFires(
          [{ job: c.job(), scheduledAt: at(21), trigger: 'schedule', replace: true }],
          leader(c, 6n),
        ),
        (err: Error) => err instanceof StaleTokenError && err.highest === 7n,
      );
      assert.equal((await c.l.runs.runState(running))?.state, 'running');
    },
  },
];

/** Every scenario of the contract, the workers' side first. */
export const ledgerScenarios: readonly Scenario[] = [...runSide, ...fireSide];

export interface ContractTarget {
  /** Open the ledger once for the suite (a scratch database with `contract_effects`, or the fakes). */
  open(): Promise<LedgerUnderTest>;
  close?(): Promise<void>;
  /** Checks over everything the scenarios left in the ledger, run after the last of them. */
  invariants?: Record<string, () => Promise<void>>;
}

/** Run every scenario on `target`, one test each. */
export function ledgerContract(label: string, target: ContractTarget): void {
  describe(`ledger contract: ${label}`, () => {
    let ledger: LedgerUnderTest;
    before(async () => {
      ledger = await target.open();
    });
    after(async () => {
      await target.close?.();
    });
    ledgerScenarios.forEach((scenario, i) => {
      it(scenario.name, async () => {
        const ns = `c${i}`;
        await scenario.run({
          l: ledger,
          ns,
          job: (name = 'job') => `${ns}-${name}`,
          resource: (name) => `${ns}/${name}`,
        });
      });
    });
    for (const [name, check] of Object.entries(target.invariants ?? {})) it(`after every scenario: ${name}`, check);
  });
}
