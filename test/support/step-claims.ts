/** A claimed step run's place, as a worker's step completion names it (StepRunRef). */
import type { Claim } from '../../src/ledger/run-ledger.js';
import type { StepRunRef } from '../../src/ledger/workflow-ledger.js';

export function stepRefOf(c: Claim): StepRunRef {
  return {
    runId: c.runId,
    token: c.token,
    attempt: c.attempt,
    workflowRunId: c.workflow!.runId,
    step: c.workflow!.step,
  };
}
