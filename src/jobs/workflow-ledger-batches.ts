/**
 * The workers' workflow ledger with concurrent step completions of the same workflow run gathered
 * into one transaction (completeStepsOfRun): the items of a fan-out finish at about the same time,
 * and one by one each would wait on the workflow run's row lock through the previous one's commit.
 * Each completion still gets its own answer (the runs it made, or null when refused). Everything
 * else goes straight to the ledger.
 */
import type { ReadyStepRun, StepCompletion, StepRunRef, WorkflowLedger } from '../ledger/workflow-ledger.js';
import type { WorkflowGraph } from '../ledger/workflow-graph.js';
import { MicroBatcher, flushByGroup } from './micro-batcher.js';
import type { WorkerWorkflowLedger } from './workflow-step.js';

type BatchableWorkflowLedger = WorkerWorkflowLedger & Pick<WorkflowLedger, 'completeMany'>;

/** Most completions in one transaction. */
const MAX_GROUP = 32;

export class WorkflowLedgerBatches implements WorkerWorkflowLedger {
  private readonly completions: MicroBatcher<StepCompletion, ReadyStepRun[] | null>;

  constructor(private readonly ledger: BatchableWorkflowLedger) {
    this.completions = new MicroBatcher(
      async (items) => {
        // One transaction per workflow run among them, the runs' transactions side by side.
        const outcomes = await flushByGroup(
          items,
          (item) => item.ref.workflowRunId,
          (group) => this.ledger.completeMany(group),
          { parallel: true },
        );
        return outcomes.map((o) => (o.ok ? { ok: true, value: o.made } : { ok: false, error: o.error }));
      },
      { maxBatch: MAX_GROUP, maxInFlight: 2 },
    );
  }

  complete(graph: WorkflowGraph, ref: StepRunRef, result: unknown): Promise<ReadyStepRun[] | null> {
    return this.completions.submit({ graph, ref, result });
  }

  start: WorkerWorkflowLedger['start'] = (claim, graph) => this.ledger.start(claim, graph);
  input: WorkerWorkflowLedger['input'] = (graph, id, step) => this.ledger.input(graph, id, step);
  received: WorkerWorkflowLedger['received'] = (id, name) => this.ledger.received(id, name);
  open: WorkerWorkflowLedger['open'] = (ref) => this.ledger.open(ref);
  commitHeld: WorkerWorkflowLedger['commitHeld'] = (tx, graph, ref, result) =>
    this.ledger.commitHeld(tx, graph, ref, result);
  fail: WorkerWorkflowLedger['fail'] = (ref, error) => this.ledger.fail(ref, error);
}
