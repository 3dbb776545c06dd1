/**
 * What the ledger needs to know of a workflow's definition to make progress on its runs: the steps
 * and their edges, and how a mapped step's items come from its needs' results. The definition
 * itself is code (src/jobs/define-workflow.ts); a run is pinned to the definition it was started
 * with by the fingerprint in its step runs' job names, so a step is only ever run, and its
 * children only ever made, by a replica with the same graph.
 */
export interface WorkflowStepShape {
  readonly name: string;
  /** Steps that must complete before this one starts (I7). */
  readonly needs: readonly string[];
  /** Steps that need this one, in name order (the order their gates are locked in). */
  readonly children: readonly string[];
  /** One run per item of `items(...)`, instead of one run. */
  readonly mapped: boolean;
  /** Start this long after its needs completed. */
  readonly afterMs: number;
  /** Also wait for this signal (sent through the API or the CLI), at most this long. */
  readonly signal?: { readonly name: string; readonly timeoutMs: number; readonly onTimeout: 'fail' | 'continue' };
}

export interface WorkflowGraph {
  readonly workflow: string;
  /** A hash of the steps, their needs, maps and waits: what pins a run to its definition. */
  readonly fingerprint: string;
  /** In definition order (every step after its needs). */
  readonly steps: readonly WorkflowStepShape[];
  /** Runs made when a step becomes ready, at most (its fan-out width). */
  readonly maxItems: number;
  /**
   * The items of a mapped step from its needs' results (by need name). Throws a clear error when
   * the map does not return an array, or one wider than `maxItems`.
   */
  items(step: string, input: Readonly<Record<string, unknown>>): readonly unknown[];
}

/**
 * The job name a step's runs carry: `<workflow>@<fingerprint>:<step>`. The '@' never appears in a
 * job's name from code, and there is no '/', so it is never taken for a runtime schedule's run.
 */
export function stepJobName(workflow: string, fingerprint: string, step: string): string {
  return `${workflow}@${fingerprint}:${step}`;
}

/** The workflow of a step run's job name (stepJobName): neither fingerprint nor step holds an "@". */
export function workflowOfStepJob(job: string): string {
  return job.slice(0, job.lastIndexOf('@'));
}

/** The step a workflow graph has under `name`; throws when it has none. */
export function stepOf(graph: WorkflowGraph, name: string): WorkflowStepShape {
  const step = graph.steps.find((s) => s.name === name);
  if (!step) throw new Error(`workflow "${graph.workflow}" has no step "${name}"`);
  return step;
}
