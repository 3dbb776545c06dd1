import { InvalidArgumentError, InvalidConfigError } from '../errors.js';
import type { WorkflowGraph } from '../ledger/workflow-graph.js';
import type { JobDefinition } from './define-job.js';
import { isWorkflow, type WorkflowDefinition } from './define-workflow.js';

/** A step of a workflow this replica defines, by its runs' job name. */
export interface RegisteredStep {
  readonly workflow: WorkflowDefinition<Record<string, unknown>>;
  readonly spec: WorkflowDefinition<Record<string, unknown>>['steps'][number];
}

/** Asked for a job that no replica defined (admin trigger of a typo, a run of a removed job). */
export class UnknownJobError extends InvalidArgumentError {
  constructor(readonly job: string) {
    super(`unknown job "${job}"`);
  }
}

/**
 * The jobs this replica knows, by name (workflows among them), and the steps of its workflows by
 * their runs' job names. Every replica must define the same set.
 */
export class JobRegistry {
  private readonly jobs = new Map<string, JobDefinition>();
  private readonly steps = new Map<string, RegisteredStep>();
  /** list()'s answer, kept until the next add: the leader asks often, and copying a million is not free. */
  private listed: readonly JobDefinition[] | undefined;

  constructor(jobs: JobDefinition[] = []) {
    for (const job of jobs) this.add(job);
    // Listed now, while constructing blocks nothing yet: not in the first tick of a running replica.
    this.list();
  }

  add(job: JobDefinition): void {
    if (this.jobs.has(job.name)) throw new InvalidConfigError('name', `job "${job.name}" is defined twice`);
    if (isWorkflow(job)) {
      if (job.steps.length === 0) throw new InvalidConfigError(`workflow "${job.name}"`, 'has no steps');
      for (const { jobName, spec } of job.stepJobs()) this.steps.set(jobName, { workflow: job, spec });
    }
    this.jobs.set(job.name, job);
    this.listed = undefined;
  }

  /** A workflow step's definition, by its runs' job name (`<workflow>@<fingerprint>:<step>`). */
  step(jobName: string): RegisteredStep | undefined {
    return this.steps.get(jobName);
  }

  /** The graph of `workflow` if this replica defines it with `fingerprint` (the one a run was started with). */
  workflowGraph(workflow: string, fingerprint: string): WorkflowGraph | undefined {
    const job = this.jobs.get(workflow);
    return isWorkflow(job) && job.graph.fingerprint === fingerprint ? job.graph : undefined;
  }

  /** Each workflow's pinned name (`<workflow>@<fingerprint>`), what its step runs' job names start with. */
  workflowVersions(): string[] {
    return this.list()
      .filter(isWorkflow)
      .map((w) => `${w.name}@${w.graph.fingerprint}`);
  }

  get(name: string): JobDefinition | undefined {
    return this.jobs.get(name);
  }

  require(name: string): JobDefinition {
    const job = this.jobs.get(name);
    if (!job) throw new UnknownJobError(name);
    return job;
  }

  list(): readonly JobDefinition[] {
    this.listed ??= Object.freeze([...this.jobs.values()]);
    return this.listed;
  }

  get size(): number {
    return this.jobs.size;
  }
}
