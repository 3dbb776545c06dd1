/**
 * Step runs of a workflow, claimed on a real ledger, and the place of each as a completion names it
 * (the StepRunRef a worker's step completion carries).
 */
import assert from 'node:assert/strict';
import type { Ledger } from '../../src/ledger/ledger.js';
import type { Claim } from '../../src/ledger/run-ledger.js';
import type { StepRunRef } from '../../src/ledger/workflow-ledger.js';

/** Claim runs `ids` for worker w1; each must be claimed. */
export async function claimedAll(ledger: Ledger, ids: bigint[]): Promise<Claim[]> {
  return (await ledger.runs.claimMany(ids, 'w1')).map((r) => {
    assert.equal(r.status, 'claimed');
    return (r as { claim: Claim }).claim;
  });
}

/** A claimed step run's reference, as its completion gives it. */
export function stepRefOf(c: Claim): StepRunRef {
  return {
    runId: c.runId,
    token: c.token,
    attempt: c.attempt,
    workflowRunId: c.workflow!.runId,
    step: c.workflow!.step,
  };
}
