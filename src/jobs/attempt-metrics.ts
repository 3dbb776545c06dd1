/**
 * The run-attempt metrics, counted in the process that ran the attempts, as each one ends: by job
 * and outcome with its duration, and for a workflow step's run by workflow and step with its
 * hand-off (the step made ready to its first attempt's start). Prometheus counters of a process,
 * as BullMQ's, River's and Oban's telemetry are: a restart starts them again at zero, which
 * `rate()` and `increase()` read as a reset.
 *
 * They used to be read from the ledger's attempt rows at each scrape, through an index of
 * (worker, finished_at) that only that read used: 88 B of WAL a run of about 1,000. The outcome
 * is the one the ledger records for the attempt (AttemptReport maps the executor's status).
 * The admin server (its own thread by default) asks for this registry's text at each scrape.
 */
import { Counter, Histogram, Registry } from 'prom-client';
import { handlerOf } from '../scheduler/schedules/runtime-schedules.js';
import { workflowOfStepJob } from '../ledger/workflow-graph.js';

/** One attempt as it ended here. */
export interface EndedAttempt {
  /** The run's job: a runtime schedule's run counts under its handler, a step's under its step job. */
  job: string;
  /** As the ledger records the attempt: completed, failed, retrying, skipped, stale, cancelled, superseded. */
  outcome: string;
  /** From its claim to its end. */
  seconds: number;
  attempt: number;
  /** A workflow step's run: its step, and (first attempt) seconds from the step made ready to the claim. */
  step?: { name: string; handOffSeconds?: number };
}

export class AttemptMetrics {
  readonly registry = new Registry();
  private readonly attempts: Counter<'job' | 'outcome'>;
  private readonly durations: Histogram<'job' | 'outcome'>;
  private readonly stepAttempts: Counter<'workflow' | 'step' | 'outcome'>;
  private readonly handOff: Histogram<'workflow'>;

  constructor(labels: { replica: string; namespace: string }) {
    const registers = [this.registry];
    this.registry.setDefaultLabels(labels);
    this.attempts = new Counter({
      name: 'cronwarden_run_attempts_total',
      help: 'Run attempts executed by this replica, by outcome (completed, failed, retrying, skipped, stale, cancelled)',
      labelNames: ['job', 'outcome'],
      registers,
    });
    this.durations = new Histogram({
      name: 'cronwarden_run_duration_seconds',
      help: 'Duration of run attempts executed by this replica',
      labelNames: ['job', 'outcome'],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800],
      registers,
    });
    this.stepAttempts = new Counter({
      name: 'cronwarden_workflow_step_attempts_total',
      help: 'Workflow step attempts executed by this replica, by workflow, step and outcome',
      labelNames: ['workflow', 'step', 'outcome'],
      registers,
    });
    this.handOff = new Histogram({
      name: 'cronwarden_workflow_step_handoff_seconds',
      help: "From a step's needs' commit (the step made ready) to its first attempt's start, on this replica",
      labelNames: ['workflow'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
  }

  ended(a: EndedAttempt): void {
    const labels = { job: handlerOf(a.job), outcome: a.outcome };
    this.attempts.inc(labels);
    this.durations.observe(labels, Math.max(0, a.seconds));
    if (!a.step) return;
    const workflow = workflowOfStepJob(a.job);
    this.stepAttempts.inc({ workflow, step: a.step.name, outcome: a.outcome });
    if (a.attempt === 1 && a.step.handOffSeconds !== undefined)
      this.handOff.observe({ workflow }, Math.max(0, a.step.handOffSeconds));
  }

  /** Prometheus text of these families. */
  text(): Promise<string> {
    return this.registry.metrics();
  }
}
