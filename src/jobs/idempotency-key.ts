/**
 * The idempotency key a handler gets (ctx.idempotencyKey), built and read here only: the admin
 * API shows a run's key and finds a run by it, so it must spell the key as the handler saw it (a
 * key sent to a payment API has to lead back to its run).
 *
 * - a run of a job: `<job>@<scheduled instant>`, stable across attempts, unique across runs; a
 *   one-off run adds `#once:<its key>`, since two one-off runs may share an instant;
 * - a step run of a workflow: `<workflow>/run-<workflow run id>/<step>`, and `[<item>]` for an item
 *   of a mapped step.
 */
import { workflowOfStepJob } from '../ledger/workflow-graph.js';

export interface KeyedRun {
  job: string;
  scheduledAt: Date;
  onceKey?: string | null;
  /** A step run's place: its workflow run, step and (mapped) item. */
  workflow?: { runId: bigint | string; step: string; item: number | null } | null;
}

export type ParsedKey =
  | { kind: 'slot'; job: string; scheduledAt: Date; onceKey?: string }
  | { kind: 'step'; workflowRunId: bigint; step: string; item: number | null };

const ONCE = '#once:';
// Lazy job: a one-off key may itself hold "@<instant>"; a job name holding one would be perverse.
const SLOT_KEY = /^(.+?)@(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z)(?:#once:([\s\S]*))?$/;
// Greedy workflow: its name may hold "/run-"; step names are letters, digits and . _ - only.
const STEP_KEY = /^(.+)\/run-([1-9][0-9]{0,18})\/([A-Za-z0-9._-]+)(?:\[(0|[1-9][0-9]{0,9})\])?$/;

export function idempotencyKey(run: KeyedRun): string {
  const w = run.workflow;
  if (w) return `${workflowOfStepJob(run.job)}/run-${w.runId}/${w.step}${w.item === null ? '' : `[${w.item}]`}`;
  const key = `${run.job}@${run.scheduledAt.toISOString()}`;
  return run.onceKey === undefined || run.onceKey === null ? key : `${key}${ONCE}${run.onceKey}`;
}

/** What `key` names, or undefined when it is no idempotency key cronwarden makes. */
export function parseIdempotencyKey(key: string): ParsedKey | undefined {
  const slot = SLOT_KEY.exec(key);
  if (slot) {
    const scheduledAt = new Date(slot[2]!);
    if (Number.isNaN(scheduledAt.getTime()) || scheduledAt.toISOString() !== slot[2]) return undefined;
    return { kind: 'slot', job: slot[1]!, scheduledAt, ...(slot[3] === undefined ? {} : { onceKey: slot[3] }) };
  }
  const step = STEP_KEY.exec(key);
  if (!step) return undefined;
  const workflowRunId = BigInt(step[2]!);
  if (workflowRunId > 9_223_372_036_854_775_807n) return undefined;
  return { kind: 'step', workflowRunId, step: step[3]!, item: step[4] === undefined ? null : Number(step[4]) };
}
