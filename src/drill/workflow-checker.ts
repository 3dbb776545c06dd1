/**
 * The checker's part for workflows (I7 and exactly once per step): for every workflow run of the
 * window, read from the ledger and the steps' effect table, each step of the definition the run was
 * started with has its runs (one, or one per item of a mapped step), each completed step run has
 * exactly one effect and no other step run has any, no step run started before every run of each
 * step it needs finished (I7), and the run and all its step runs settled (I6). Pure over a
 * WorkflowHistory, so tests can plant a violation; readWorkflowHistory() loads one.
 */
import type pg from 'pg';
import type { Tables } from '../db/tables.js';
import { stepsStartedEarly } from '../ledger/invariant-checks.js';

export interface StepRunRecord {
  id: bigint;
  step: string;
  item: number | null;
  state: string;
  startedAt: number | null;
  finishedAt: number | null;
}

export interface WorkflowRunRecord {
  id: bigint;
  workflow: string;
  scheduledAt: number;
  state: string;
  /** The definition it started with (null: it never started). */
  steps: { name: string; needs: string[]; mapped: boolean }[] | null;
  /** Its gates: items_total per step made ready. */
  itemsTotal: Map<string, number | null>;
  stepRuns: StepRunRecord[];
}

export interface WorkflowHistory {
  runs: WorkflowRunRecord[];
  /** Effect rows per step run id. */
  effects: Map<bigint, number>;
}

export interface WorkflowViolation {
  invariant: 'I2' | 'I7' | 'I6' | 'effect' | 'structure';
  message: string;
}

export interface WorkflowReport {
  workflowRuns: number;
  /** Workflow slots expected in the window that have no workflow run (I2). */
  missed: number;
  stepRuns: number;
  byState: Record<string, number>;
  effectsDuplicated: number;
  effectsMissing: number;
  /** Effects of step runs that did not complete (a stale or refused write that landed). */
  strayEffects: number;
  /** Step runs started before a run of a step they need finished. */
  startedEarly: number;
  unsettled: number;
  violations: WorkflowViolation[];
  ok: boolean;
}

const ACTIVE = new Set(['pending', 'running', 'retrying']);

/** `expected`: each workflow's slots in the window (epoch ms), each of which must have a workflow run. */
export function checkWorkflows(h: WorkflowHistory, expected: Map<string, number[]> = new Map()): WorkflowReport {
  const violations: WorkflowViolation[] = [];
  const byState: Record<string, number> = {};
  let stepRuns = 0;
  let effectsDuplicated = 0;
  let effectsMissing = 0;
  let strayEffects = 0;
  let startedEarly = 0;
  let unsettled = 0;
  const add = (v: WorkflowViolation) => {
    if (violations.length < 50) violations.push(v);
  };
  let missed = 0;
  const fired = new Set(h.runs.map((r) => `${r.workflow}@${r.scheduledAt}`));
  for (const [workflow, times] of expected)
    for (const at of times)
      if (!fired.has(`${workflow}@${at}`)) {
        missed++;
        add({ invariant: 'I2', message: `${workflow}@${new Date(at).toISOString()} never fired` });
      }
  for (const run of h.runs) {
    byState[run.state] = (byState[run.state] ?? 0) + 1;
    const label = `${run.workflow}@${new Date(run.scheduledAt).toISOString()} (run ${run.id})`;
    if (ACTIVE.has(run.state)) {
      unsettled++;
      add({ invariant: 'I6', message: `${label} did not settle (${run.state})` });
    }
    for (const s of run.stepRuns) {
      stepRuns++;
      const n = h.effects.get(s.id) ?? 0;
      const where = `${label} step ${s.step}${s.item === null ? '' : `[${s.item}]`} (run ${s.id})`;
      if (ACTIVE.has(s.state)) {
        unsettled++;
        add({ invariant: 'I6', message: `${where} did not settle (${s.state})` });
      }
      if (s.state === 'completed' && n === 0) {
        effectsMissing++;
        add({ invariant: 'effect', message: `${where} completed without its effect` });
      } else if (n > 1) {
        effectsDuplicated += n - 1;
        add({ invariant: 'effect', message: `${where} has its effect ${n} times` });
      } else if (n === 1 && s.state !== 'completed') {
        strayEffects++;
        add({ invariant: 'effect', message: `${where} is ${s.state} but its effect landed` });
      }
    }
    if (!run.steps) continue;
    for (const step of run.steps) {
      const mine = run.stepRuns.filter((s) => s.step === step.name);
      const total = run.itemsTotal.get(step.name);
      if (run.state === 'completed') {
        const want = step.mapped ? total : 1;
        if (want === null || want === undefined || mine.length !== want)
          add({
            invariant: 'structure',
            message: `${label} completed with ${mine.length} run(s) of step ${step.name} (expected ${want ?? '?'})`,
          });
        if (new Set(mine.map((s) => s.item)).size !== mine.length)
          add({ invariant: 'structure', message: `${label} has an item of step ${step.name} twice` });
      }
    }
    for (const { stepRun: s, need } of stepsStartedEarly(run)) {
      startedEarly++;
      add({
        invariant: 'I7',
        message: `${label} step ${s.step}${s.item === null ? '' : `[${s.item}]`} started before its need ${need} completed`,
      });
    }
  }
  const ok =
    missed === 0 &&
    effectsDuplicated === 0 &&
    effectsMissing === 0 &&
    strayEffects === 0 &&
    startedEarly === 0 &&
    unsettled === 0 &&
    !violations.some((v) => v.invariant === 'structure');
  return {
    workflowRuns: h.runs.length,
    missed,
    stepRuns,
    byState,
    effectsDuplicated,
    effectsMissing,
    strayEffects,
    startedEarly,
    unsettled,
    violations,
    ok,
  };
}

/** The workflow runs scheduled in [from, to] with their step runs, and the step effect counts. */
export async function readWorkflowHistory(
  pool: Pick<pg.Pool, 'query'>,
  t: Tables,
  effectsTable: string,
  from: Date,
  to: Date,
): Promise<WorkflowHistory> {
  const runs = await pool.query<{
    id: string;
    job: string;
    scheduled_at: Date;
    state: string;
    kind: string;
    result: { steps?: { name: string; needs: string[]; mapped: boolean }[] } | null;
  }>(
    `SELECT id, job, scheduled_at, state, kind, result FROM ${t.runs}
     WHERE scheduled_at BETWEEN $1 AND $2 AND job = ANY($3::text[]) AND trigger <> 'step'`,
    [from, to, ['drill-diamond', 'drill-fanout', 'drill-wait']],
  );
  const ids = runs.rows.map((r) => r.id);
  const [steps, gates, effects] = await Promise.all([
    pool.query<{
      id: string;
      workflow_run_id: string;
      step: string;
      item: number | null;
      state: string;
      started_at: Date | null;
      finished_at: Date | null;
    }>(
      `SELECT id, workflow_run_id, step, item, state, started_at, finished_at FROM ${t.runs}
       WHERE workflow_run_id = ANY($1::bigint[])`,
      [ids],
    ),
    pool.query<{ workflow_run_id: string; step: string; items_total: number | null }>(
      `SELECT workflow_run_id, step, items_total FROM ${t.workflowSteps} WHERE workflow_run_id = ANY($1::bigint[])`,
      [ids],
    ),
    pool.query<{ step_run_id: string; n: number }>(
      `SELECT step_run_id, count(*)::int AS n FROM ${effectsTable} WHERE workflow_run_id = ANY($1::bigint[]) GROUP BY step_run_id`,
      [ids],
    ),
  ]);
  return {
    runs: runs.rows.map((r) => ({
      id: BigInt(r.id),
      workflow: r.job,
      scheduledAt: r.scheduled_at.getTime(),
      state: r.state,
      steps: r.kind === 'workflow' ? (r.result?.steps ?? null) : null,
      itemsTotal: new Map(gates.rows.filter((g) => g.workflow_run_id === r.id).map((g) => [g.step, g.items_total])),
      stepRuns: steps.rows
        .filter((s) => s.workflow_run_id === r.id)
        .map((s) => ({
          id: BigInt(s.id),
          step: s.step,
          item: s.item,
          state: s.state,
          startedAt: s.started_at?.getTime() ?? null,
          finishedAt: s.finished_at?.getTime() ?? null,
        })),
    })),
    effects: new Map(effects.rows.map((e) => [BigInt(e.step_run_id), e.n])),
  };
}
