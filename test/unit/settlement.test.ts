/** Every row of the settlement table (src/jobs/settlement.ts): settle() and needsRunState(). */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { BackendUnavailableError, StaleTokenError, SupersededError } from '../../src/errors.js';
import type { HandlerOutcome, TransactionMark } from '../../src/jobs/attempt.js';
import { INTERRUPTED, messageOf, needsRunState, settle, type AttemptFacts } from '../../src/jobs/settlement.js';

const TOKEN = 42n;
const mine = { state: 'running', claimToken: TOKEN };
const boom = new Error('boom');
const unavailable = new BackendUnavailableError('postgres', 'connection refused');
const superseded = new SupersededError(
  'acct',
  new Date(Date.UTC(2026, 0, 1, 0, 0, 4)),
  new Date(Date.UTC(2026, 0, 1, 0, 0, 5)),
);
const stale = new StaleTokenError('run 1', TOKEN, TOKEN + 1n);

function facts(outcome: HandlerOutcome, more: Partial<AttemptFacts> = {}): AttemptFacts {
  return {
    outcome,
    transaction: 'none',
    stoppedByShutdown: false,
    finalAttempt: false,
    token: TOKEN,
    run: mine,
    ...more,
  };
}
const threw = (error: unknown): HandlerOutcome => ({ kind: 'threw', error });

describe('settle: the handler returned', () => {
  it('with its transaction committed: completed, nothing left to record', () => {
    assert.deepEqual(settle(facts({ kind: 'returned' }, { transaction: 'committed' })), {
      kind: 'settled',
      status: 'completed',
    });
  });
  it('with its transaction skipped (an earlier attempt completed the run): skipped', () => {
    assert.deepEqual(settle(facts({ kind: 'returned' }, { transaction: 'skipped' })), {
      kind: 'settled',
      status: 'skipped',
    });
  });
  it('without a transaction: record the completion', () => {
    assert.deepEqual(settle(facts({ kind: 'returned' })), { kind: 'complete' });
    assert.deepEqual(
      settle(facts({ kind: 'returned' }, { stoppedByShutdown: true, finalAttempt: true })),
      { kind: 'complete' },
      'a handler that finished is done, shutdown or not',
    );
  });
});

describe('settle: the handler was abandoned on shutdown', () => {
  it('after its transaction committed: completed', () => {
    assert.deepEqual(settle(facts({ kind: 'abandoned' }, { transaction: 'committed' })), {
      kind: 'settled',
      status: 'completed',
    });
  });
  it('after its transaction was skipped: skipped', () => {
    assert.deepEqual(settle(facts({ kind: 'abandoned' }, { transaction: 'skipped' })), {
      kind: 'settled',
      status: 'skipped',
    });
  });
  it('with nothing committed: interrupted, with the reason', () => {
    const s = settle(facts({ kind: 'abandoned' }, { finalAttempt: true }));
    assert.equal(s.kind, 'interrupt');
    assert.ok(
      s.kind === 'interrupt' && s.reason.startsWith(INTERRUPTED) && s.reason.includes('abandoned'),
      JSON.stringify(s),
    );
  });
});

describe('settle: the handler threw', () => {
  it('after its transaction committed: completed, flagged, whatever the error', () => {
    for (const error of [boom, unavailable, superseded, stale]) {
      assert.deepEqual(settle(facts(threw(error), { transaction: 'committed', run: undefined })), {
        kind: 'settled',
        status: 'completed',
        handlerFailedAfterCommit: true,
      });
    }
  });
  it('the ledger unavailable: nothing committed, deliver again (before any look at the run)', () => {
    assert.deepEqual(
      settle(facts(threw(unavailable), { run: undefined, stoppedByShutdown: true, finalAttempt: true })),
      { kind: 'unavailable', error: unavailable },
    );
  });
  it('the run cancelled meanwhile: cancelled, even when the error says superseded or stale', () => {
    for (const error of [boom, superseded, stale]) {
      assert.deepEqual(settle(facts(threw(error), { run: { state: 'cancelled', claimToken: TOKEN } })), {
        kind: 'settled',
        status: 'cancelled',
      });
    }
  });
  it('its transaction skipped: skipped', () => {
    assert.deepEqual(settle(facts(threw(boom), { transaction: 'skipped' })), { kind: 'settled', status: 'skipped' });
  });
  it('SupersededError (also one from another copy of the package, by name): superseded, not retried', () => {
    assert.deepEqual(settle(facts(threw(superseded), { finalAttempt: false })), {
      kind: 'supersede',
      error: superseded,
    });
    const copy = Object.assign(new Error('a later slot wrote'), { name: 'SupersededError' });
    assert.deepEqual(settle(facts(threw(copy))), { kind: 'supersede', error: copy });
    assert.deepEqual(
      settle(facts(threw(superseded), { run: { state: 'running', claimToken: TOKEN + 1n } })),
      { kind: 'supersede', error: superseded },
      'before the stale check',
    );
  });
  it('StaleTokenError: stale', () => {
    assert.deepEqual(settle(facts(threw(stale), { stoppedByShutdown: true })), { kind: 'stale', error: stale });
  });
  it('any error once a newer attempt holds the claim: stale', () => {
    assert.deepEqual(
      settle(facts(threw(boom), { run: { state: 'running', claimToken: TOKEN + 1n }, finalAttempt: true })),
      { kind: 'stale', error: boom },
    );
  });
  it('stopped by the shutdown: interrupted, with the error in the reason, even on the final attempt', () => {
    assert.deepEqual(settle(facts(threw(boom), { stoppedByShutdown: true, finalAttempt: true })), {
      kind: 'interrupt',
      reason: `${INTERRUPTED} (boom)`,
    });
  });
  it('otherwise: retrying while attempts remain, failed on the final one', () => {
    assert.deepEqual(settle(facts(threw(boom))), { kind: 'fail', outcome: 'retrying', error: boom });
    assert.deepEqual(settle(facts(threw(boom), { finalAttempt: true })), {
      kind: 'fail',
      outcome: 'failed',
      error: boom,
    });
    assert.deepEqual(
      settle(facts(threw('a string'), { run: null })),
      { kind: 'fail', outcome: 'retrying', error: 'a string' },
      'a run no longer there is no newer claim',
    );
  });
});

describe('needsRunState', () => {
  const rows: [HandlerOutcome, TransactionMark, boolean][] = [
    [{ kind: 'returned' }, 'none', false],
    [{ kind: 'returned' }, 'committed', false],
    [{ kind: 'abandoned' }, 'none', false],
    [{ kind: 'abandoned' }, 'skipped', false],
    [threw(boom), 'committed', false],
    [threw(unavailable), 'none', false],
    [threw(unavailable), 'skipped', false],
    [threw(boom), 'none', true],
    [threw(boom), 'skipped', true],
    [threw(superseded), 'none', true],
    [threw('not an error'), 'none', true],
  ];
  for (const [outcome, transaction, expected] of rows) {
    it(`${outcome.kind}${outcome.kind === 'threw' ? ` ${messageOf(outcome.error)}` : ''}, transaction ${transaction}: ${expected}`, () => {
      assert.equal(needsRunState(outcome, transaction), expected);
    });
  }
});

describe('messageOf', () => {
  it('the message of an Error, the string of anything else', () => {
    assert.equal(messageOf(boom), 'boom');
    assert.equal(messageOf(7), '7');
  });
});
