import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { idempotencyKey, parseIdempotencyKey } from '../../src/jobs/idempotency-key.js';
import { stepJobName } from '../../src/ledger/workflow-graph.js';

const at = new Date('2026-03-01T10:00:00.250Z');

describe('idempotency keys: one builder, and the admin side reads them back', () => {
  it('a run of a job, a one-off run and a step run each read back as what made them', () => {
    assert.equal(idempotencyKey({ job: 'report', scheduledAt: at }), 'report@2026-03-01T10:00:00.250Z');
    assert.deepEqual(parseIdempotencyKey('report@2026-03-01T10:00:00.250Z'), {
      kind: 'slot',
      job: 'report',
      scheduledAt: at,
    });
    // A one-off key may hold anything, "@<instant>" and "#once:" included.
    for (const onceKey of ['pay-1', 'a@2026-01-01T00:00:00.000Z', 'x#once:y', '']) {
      const key = idempotencyKey({ job: 'charges/acme', scheduledAt: at, onceKey });
      assert.equal(key, `charges/acme@2026-03-01T10:00:00.250Z#once:${onceKey}`);
      assert.deepEqual(parseIdempotencyKey(key), { kind: 'slot', job: 'charges/acme', scheduledAt: at, onceKey });
    }
    for (const item of [null, 0, 41]) {
      const key = idempotencyKey({
        job: stepJobName('nightly/run-etl@eu', 'f00d', 'load.v2'),
        scheduledAt: at,
        workflow: { runId: 1234n, step: 'load.v2', item },
      });
      assert.equal(key, `nightly/run-etl@eu/run-1234/load.v2${item === null ? '' : `[${item}]`}`);
      assert.deepEqual(parseIdempotencyKey(key), { kind: 'step', workflowRunId: 1234n, step: 'load.v2', item });
    }
  });

  it('anything else is no key', () => {
    for (const q of [
      'report',
      'report@yesterday',
      'report@2026-02-30T10:00:00.000Z', // no such day
      'report@2026-03-01T10:00:00Z', // not the handler's spelling (milliseconds)
      '@2026-03-01T10:00:00.000Z',
      'wf/run-0/step',
      'wf/run-99999999999999999999/step',
      'wf/run-1/bad step',
      'wf/run-1/step[01]',
    ])
      assert.equal(parseIdempotencyKey(q), undefined, q);
  });
});
