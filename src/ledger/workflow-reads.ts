/**
 * A workflow run as the console and the CLI show it: its steps (from the definition it was started
 * with, kept on the run), each step's gate and runs, and the signals it received.
 */
import type { Tables } from '../db/tables.js';
import type { Queryable } from './transaction.js';

export interface WorkflowStepView {
  name: string;
  needs: string[];
  mapped: boolean;
  afterMs?: number;
  signal?: { name: string; timeoutMs: number; onTimeout: string };
  /** waiting | ready | completed | failed | cancelled; 'waiting' too for a run not started yet. */
  state: string;
  needsLeft: number | null;
  itemsTotal: number | null;
  itemsLeft: number | null;
  waitsFor: string | null;
  timeoutAt: string | null;
  reason: string | null;
  readyAt: string | null;
  completedAt: string | null;
  runs: {
    id: string;
    item: number | null;
    state: string;
    attempts: number;
    startedAt: string | null;
    finishedAt: string | null;
    error: string | null;
    /** The result's JSON, cut to 1,000 characters. */
    result: string | null;
  }[];
}

export interface WorkflowRunView {
  id: string;
  workflow: string;
  /** The definition's fingerprint; null until the run started. */
  definition: string | null;
  state: string;
  scheduledAt: string;
  createdAt: string;
  finishedAt: string | null;
  error: string | null;
  steps: WorkflowStepView[];
  signals: { name: string; sentBy: string; sentAt: string }[];
}

const RESULT_PREVIEW = 1000;

/** Workflow run `id` with its steps; undefined when there is no such run or it is no workflow run. */
export async function workflowRunView(db: Queryable, t: Tables, id: bigint): Promise<WorkflowRunView | undefined> {
  const run = await db.query<{
    id: string;
    job: string;
    kind: string;
    state: string;
    scheduled_at: Date;
    created_at: Date;
    finished_at: Date | null;
    error: string | null;
    result: { definition?: string; steps?: Omit<WorkflowStepView, 'state'>[] } | null;
  }>(`SELECT id, job, kind, state, scheduled_at, created_at, finished_at, error, result FROM ${t.runs} WHERE id = $1`, [
    id.toString(),
  ]);
  const r = run.rows[0];
  if (!r || r.kind !== 'workflow') return undefined;
  const [gates, runs, signals] = await Promise.all([
    db.query<{
      step: string;
      state: string;
      needs_left: number;
      items_total: number | null;
      items_left: number | null;
      waits_for: string | null;
      timeout_at: Date | null;
      reason: string | null;
      ready_at: Date | null;
      completed_at: Date | null;
    }>(`SELECT * FROM ${t.workflowSteps} WHERE workflow_run_id = $1`, [r.id]),
    db.query<{
      id: string;
      step: string;
      item: number | null;
      state: string;
      attempts: number;
      started_at: Date | null;
      finished_at: Date | null;
      error: string | null;
      result: string | null;
    }>(
      `SELECT id, step, item, state, attempts, started_at, finished_at, error, left(result::text, ${RESULT_PREVIEW}) AS result
       FROM ${t.runs} WHERE workflow_run_id = $1 ORDER BY step, COALESCE(item, -1)`,
      [r.id],
    ),
    db.query<{ name: string; sent_by: string; sent_at: Date }>(
      `SELECT name, sent_by, sent_at FROM ${t.signals} WHERE workflow_run_id = $1 ORDER BY sent_at`,
      [r.id],
    ),
  ]);
  const iso = (d: Date | null) => (d ? d.toISOString() : null);
  const steps = (r.result?.steps ?? []).map((shape): WorkflowStepView => {
    const g = gates.rows.find((x) => x.step === shape.name);
    return {
      name: shape.name,
      needs: shape.needs,
      mapped: shape.mapped,
      ...(shape.afterMs ? { afterMs: shape.afterMs } : {}),
      ...(shape.signal ? { signal: shape.signal } : {}),
      state: g?.state ?? 'waiting',
      needsLeft: g?.needs_left ?? null,
      itemsTotal: g?.items_total ?? null,
      itemsLeft: g?.items_left ?? null,
      waitsFor: g?.waits_for ?? null,
      timeoutAt: iso(g?.timeout_at ?? null),
      reason: g?.reason ?? null,
      readyAt: iso(g?.ready_at ?? null),
      completedAt: iso(g?.completed_at ?? null),
      runs: runs.rows
        .filter((x) => x.step === shape.name)
        .map((x) => ({
          id: x.id,
          item: x.item,
          state: x.state,
          attempts: x.attempts,
          startedAt: iso(x.started_at),
          finishedAt: iso(x.finished_at),
          error: x.error,
          result: x.result,
        })),
    };
  });
  return {
    id: r.id,
    workflow: r.job,
    definition: r.result?.definition ?? null,
    state: r.state,
    scheduledAt: r.scheduled_at.toISOString(),
    createdAt: r.created_at.toISOString(),
    finishedAt: iso(r.finished_at),
    error: r.error,
    steps,
    signals: signals.rows.map((s) => ({ name: s.name, sentBy: s.sent_by, sentAt: s.sent_at.toISOString() })),
  };
}
