/**
 * Workflows in code: a scheduled graph of steps. `defineWorkflow` takes a job's schedule and
 * policies (every one of defineJob's but the handler's own: retries, backoff, timeout are per
 * step); `.step(...)` adds a step after the ones it needs, typed end to end (a step's input is its
 * needs' results; a mapped step's item is what its map returns). Each `.step` returns a new
 * definition; export the last one.
 *
 * A fire starts one workflow run per slot (the unique key and policies of a job). Each step (each
 * item of a mapped step) runs as a run of its own, with its own claim, attempts, retries and ctx;
 * its result (JSON) commits with its completion and with the steps that became ready.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { InvalidArgumentError, InvalidConfigError } from '../errors.js';
import type { WorkflowGraph, WorkflowStepShape } from '../ledger/workflow-graph.js';
import { stepJobName } from '../ledger/workflow-graph.js';
import { defineJob, type BackoffOptions, type JobDefinition, type JobOptions } from './define-job.js';
import type { JobContext, TransactionClient } from './job-context.js';

/** At most this many steps in one workflow. */
export const MAX_STEPS = 100;
/** At most this many items in one mapped step of one run (its fan-out width). */
export const MAX_FAN_OUT = 10_000;

/** What a step waiting for a signal received. */
export type ReceivedSignal =
  | { readonly name: string; readonly data: unknown; readonly timedOut: false }
  | { readonly name: string; readonly data: undefined; readonly timedOut: true };

/** What a step's handler receives: a job's context, and where it stands in its workflow run. */
export interface StepContext extends Omit<JobContext, 'transaction'> {
  /** The workflow run's id (cw_runs.id), stable for all its steps. */
  readonly workflowRunId: string;
  readonly step: string;
  /** A mapped step's item index (0-based); undefined for a step that is not mapped. */
  readonly item: number | undefined;
  /** What a step that waits for a signal received (or that it timed out); undefined otherwise. */
  readonly received: ReceivedSignal | undefined;
  /**
   * Run fn in one PostgreSQL transaction with the step's completion: fn's writes, the value it
   * returns (stored as the step's result) and the steps this completion makes ready commit
   * together, or not at all. Once per attempt. When an earlier attempt already completed the step,
   * fn is not called and StepAlreadyCompletedError ends this attempt (do not catch it).
   */
  transaction<T>(fn: (tx: TransactionClient) => Promise<T>): Promise<T>;
}

/** The workflow's own options: a job's schedule and policies; retries, backoff and timeout are per step. */
export type WorkflowOptions = Omit<
  JobOptions,
  'handler' | 'retries' | 'backoff' | 'timeoutMs' | 'concurrency' | 'rateLimit' | 'priority'
>;

/** A step's options besides what it runs. */
export interface StepOptions {
  /** Extra attempts after a failure. Default 0. */
  retries?: number;
  /** Delay between retries. Default exponential from 1 s. */
  backoff?: BackoffOptions;
  /** Abort the handler's signal after this long; 0 = no timeout. Default 0. */
  timeoutMs?: number;
  /** Start this long after its needs completed (a wait that holds no worker). Default 0. */
  afterMs?: number;
  /**
   * Also wait for a signal (sent with `cronwarden signal RUN NAME` or the API), at most `timeoutMs`:
   * then the workflow run fails ('fail', the default) or the step runs anyway ('continue'; its
   * ctx.received says it timed out). The wait holds no worker.
   */
  waitFor?: { signal: string; timeoutMs: number; onTimeout?: 'fail' | 'continue' };
  /**
   * At most `limit` runs of this step (and of every job and step naming the same key) run at once,
   * across replicas and workflow runs: a mapped step's items over the limit wait in the ledger.
   */
  concurrency?: { key: string; limit: number };
  /** At most `max` runs of this step (and of every job and step naming `key`) start per `perMs`. */
  rateLimit?: { key: string; max: number; perMs: number };
  /** Among runs waiting for a slot of the same concurrency key, higher first. Default 0. */
  priority?: number;
}

type Results = Record<string, unknown>;
type NeedsOf<R extends Results> = readonly (keyof R & string)[];
/** A step's input: the result of each step it needs (a mapped step's results as an array, in item order). */
export type StepInput<R extends Results, N extends NeedsOf<R>> = { readonly [K in N[number]]: R[K] };
type Add<R extends Results, Name extends string, T> = R & { [K in Name]: T };

interface StepSpec {
  readonly name: string;
  readonly needs: readonly string[];
  readonly map: ((input: Results) => readonly unknown[]) | undefined;
  readonly run: (ctx: StepContext, itemOrInput: unknown, input: Results) => unknown;
  readonly job: JobDefinition;
  readonly afterMs: number;
  readonly signal: WorkflowStepShape['signal'];
}

const stepNameRule = z
  .string()
  .min(1, 'must not be empty')
  .max(64, 'must be at most 64 characters')
  .regex(/^[A-Za-z0-9._-]+$/, 'may contain only letters, digits and . _ -');

const stepOptionsSchema = z.strictObject({
  needs: z.array(z.string()).optional(),
  map: z
    .custom<(input: Results) => readonly unknown[]>((v) => typeof v === 'function', 'must be a function')
    .optional(),
  run: z.custom<StepSpec['run']>((v) => typeof v === 'function', 'must be a function'),
  retries: z.number().optional(),
  backoff: z.unknown().optional(),
  timeoutMs: z.number().optional(),
  concurrency: z.unknown().optional(),
  rateLimit: z.unknown().optional(),
  priority: z.unknown().optional(),
  afterMs: z
    .number()
    .int()
    .min(0)
    .max(7 * 24 * 3600 * 1000, 'must be at most 7 days')
    .optional(),
  waitFor: z
    .strictObject({
      signal: stepNameRule,
      timeoutMs: z
        .number()
        .int()
        .min(1)
        .max(30 * 24 * 3600 * 1000, 'must be at most 30 days'),
      onTimeout: z.enum(['fail', 'continue']).optional(),
    })
    .optional(),
});

/**
 * A workflow as defined in code. It is the job that fires it (name, schedule, policies), with its
 * steps; each `.step` returns a new, longer definition.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- no step yet: no results to intersect with
export class WorkflowDefinition<R extends Results = {}> implements JobDefinition {
  readonly name: string;
  readonly schedule: JobDefinition['schedule'];
  readonly misfire: JobDefinition['misfire'];
  readonly overlap: JobDefinition['overlap'];
  readonly catchUpWindowMs: number;
  readonly misfireGraceMs: number;
  readonly maxCatchUp: number;
  readonly overlapQueueMax: number;
  readonly jitterMs: number;
  readonly timeoutMs: number;
  readonly retries: number;
  readonly backoff: Readonly<BackoffOptions>;
  readonly priority = 0;
  /** The graph the ledger makes progress with (fingerprinted). */
  readonly graph: WorkflowGraph;
  readonly steps: readonly StepSpec[];

  /** @internal Use defineWorkflow. */
  constructor(job: JobDefinition, steps: readonly StepSpec[]) {
    this.name = job.name;
    this.schedule = job.schedule;
    this.misfire = job.misfire;
    this.overlap = job.overlap;
    this.catchUpWindowMs = job.catchUpWindowMs;
    this.misfireGraceMs = job.misfireGraceMs;
    this.maxCatchUp = job.maxCatchUp;
    this.overlapQueueMax = job.overlapQueueMax;
    this.jitterMs = job.jitterMs;
    this.timeoutMs = 0;
    this.retries = 0;
    this.backoff = job.backoff;
    this.steps = steps;
    this.graph = graphOf(job.name, steps);
  }

  /** Its steps as the admin API lists them. */
  get workflowSteps(): readonly { name: string; needs: readonly string[]; mapped: boolean }[] {
    return this.graph.steps.map((s) => ({ name: s.name, needs: s.needs, mapped: s.mapped }));
  }

  /** A workflow run is started by its claim (the steps do the work), never by calling this. */
  handler(): never {
    throw new InvalidArgumentError(`workflow "${this.name}" is started by cronwarden, not called`);
  }

  /** The step `name`'s job definition (its retries, backoff, timeout), by its run's job name. */
  stepJobs(): readonly { jobName: string; spec: StepSpec }[] {
    return this.steps.map((spec) => ({
      jobName: stepJobName(this.name, this.graph.fingerprint, spec.name),
      spec,
    }));
  }

  /** A step that maps its needs' results to items: one run per item; its result is the array of theirs. */
  step<const Name extends string, const Needs extends NeedsOf<R>, Item, T>(
    name: Name,
    options: StepOptions & {
      needs: Needs;
      map: (input: StepInput<R, Needs>) => readonly Item[];
      run: (ctx: StepContext, item: Item, input: StepInput<R, Needs>) => T | Promise<T>;
    },
  ): WorkflowDefinition<Add<R, Name, Awaited<T>[]>>;
  /** A step after its needs (none: it starts the run); its input is their results. */
  step<const Name extends string, T, const Needs extends NeedsOf<R> = []>(
    name: Name,
    options: StepOptions & {
      needs?: Needs;
      map?: undefined;
      run: (ctx: StepContext, input: StepInput<R, Needs>) => T | Promise<T>;
    },
  ): WorkflowDefinition<Add<R, Name, Awaited<T>>>;
  /** A step that needs nothing: `step('extract', async (ctx) => …)`. */
  step<const Name extends string, T>(
    name: Name,
    run: (ctx: StepContext) => T | Promise<T>,
  ): WorkflowDefinition<Add<R, Name, Awaited<T>>>;
  step(name: string, optionsOrRun: unknown): WorkflowDefinition<Results> {
    const label = `workflow "${this.name}": step "${String(name)}"`;
    const named = stepNameRule.safeParse(name);
    if (!named.success)
      throw new InvalidConfigError(`workflow "${this.name}": step name`, named.error.issues[0]!.message);
    if (this.steps.some((s) => s.name === name)) throw new InvalidConfigError(label, 'is defined twice');
    if (this.steps.length >= MAX_STEPS)
      throw new InvalidConfigError(label, `a workflow has at most ${MAX_STEPS} steps`);
    const raw = typeof optionsOrRun === 'function' ? { run: optionsOrRun } : optionsOrRun;
    const parsed = stepOptionsSchema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const field = issue.path.join('.') || (issue.code === 'unrecognized_keys' ? issue.keys.join(', ') : 'options');
      throw new InvalidConfigError(`${label}: ${field}`, issue.message);
    }
    const o = parsed.data;
    const needs = o.needs ?? [];
    for (const need of needs) {
      if (need === name) throw new InvalidConfigError(`${label}: needs`, 'a step cannot need itself');
      if (!this.steps.some((s) => s.name === need))
        throw new InvalidConfigError(
          `${label}: needs`,
          `"${need}" is not a step defined before it (define a step after the steps it needs; that also rules out cycles)`,
        );
    }
    if (new Set(needs).size !== needs.length) throw new InvalidConfigError(`${label}: needs`, 'names a step twice');
    if (o.map && needs.length === 0)
      throw new InvalidConfigError(`${label}: map`, 'a mapped step needs at least one step');
    // The step's retries, backoff, timeout and flow control are checked as a job's are.
    const job = defineJob({
      name: `${this.name}.${name}`,
      schedule: '0 0 1 1 *',
      handler: () => undefined,
      ...(o.retries === undefined ? {} : { retries: o.retries }),
      ...(o.backoff === undefined ? {} : { backoff: o.backoff as BackoffOptions }),
      ...(o.timeoutMs === undefined ? {} : { timeoutMs: o.timeoutMs }),
      ...(o.concurrency === undefined ? {} : { concurrency: o.concurrency as StepOptions['concurrency'] & object }),
      ...(o.rateLimit === undefined ? {} : { rateLimit: o.rateLimit as StepOptions['rateLimit'] & object }),
      ...(o.priority === undefined ? {} : { priority: o.priority as number }),
    });
    const spec: StepSpec = {
      name,
      needs,
      map: o.map,
      run: o.run,
      job,
      afterMs: o.afterMs ?? 0,
      signal: o.waitFor
        ? { name: o.waitFor.signal, timeoutMs: o.waitFor.timeoutMs, onTimeout: o.waitFor.onTimeout ?? 'fail' }
        : undefined,
    };
    return new WorkflowDefinition<Results>(this.jobFields(), [...this.steps, spec]);
  }

  private jobFields(): JobDefinition {
    return this;
  }
}

/**
 * Define a workflow: its name, schedule and policies as for defineJob (without a handler); add
 * its steps with `.step(...)`. Checked at definition, each error naming the workflow and the step.
 */
export function defineWorkflow(options: WorkflowOptions): WorkflowDefinition {
  const job = defineJob({ ...options, handler: () => undefined });
  return new WorkflowDefinition(job, []);
}

/** Whether `job` is a workflow (its runs start steps instead of calling a handler). */
export function isWorkflow(job: unknown): job is WorkflowDefinition<Results> {
  return job instanceof WorkflowDefinition;
}

/** The ledger's view of the steps: edges, maps, waits, and a fingerprint of all of that. */
function graphOf(workflow: string, steps: readonly StepSpec[]): WorkflowGraph {
  const shapes: WorkflowStepShape[] = steps.map((s) => ({
    name: s.name,
    needs: s.needs,
    children: steps
      .filter((c) => c.needs.includes(s.name))
      .map((c) => c.name)
      .sort(),
    mapped: s.map !== undefined,
    afterMs: s.afterMs,
    ...(s.signal ? { signal: s.signal } : {}),
  }));
  const fingerprint = createHash('sha256')
    .update(
      JSON.stringify(
        shapes.map((s) => [s.name, s.needs, s.mapped, s.afterMs, s.signal?.name ?? null, s.signal?.onTimeout ?? null]),
      ),
    )
    .digest('hex')
    .slice(0, 10);
  return {
    workflow,
    fingerprint,
    steps: shapes,
    maxItems: MAX_FAN_OUT,
    items(step, input) {
      const spec = steps.find((s) => s.name === step);
      if (!spec?.map) throw new InvalidArgumentError(`step "${step}" of workflow "${workflow}" is not mapped`);
      let items: unknown;
      try {
        items = spec.map(input);
      } catch (err) {
        throw new InvalidArgumentError(`its map threw: ${(err as Error).message}`);
      }
      if (!Array.isArray(items)) throw new InvalidArgumentError(`its map returned ${typeof items}, not an array`);
      const list = items as readonly unknown[];
      if (list.length > MAX_FAN_OUT)
        throw new InvalidArgumentError(
          `its map returned ${list.length} items; a step fans out to at most ${MAX_FAN_OUT}`,
        );
      return list;
    },
  };
}
