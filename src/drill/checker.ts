/**
 * The exactly-once checker: reads what the ledger and an effect log say happened and checks the
 * invariants of DESIGN.md. Pure over a History, so tests can plant a duplicate, a gap or a stale
 * write and expect it to be caught; readHistory() loads a History from PostgreSQL.
 */
import type pg from 'pg';

export interface RunRecord {
  id: bigint;
  job: string;
  scheduledAt: number;
  leaderToken: bigint;
  state: string;
  /** Token of the attempt that completed the run, if any. */
  completedToken: bigint | null;
  /** When the ledger committed the fire (database clock), if known. */
  committedAt?: number;
}

export interface EffectRecord {
  runId: bigint;
  token: bigint;
}

export interface History {
  /** In commit order (the fence serialises fire commits, so id order is commit order). */
  runs: RunRecord[];
  /** Rows of the independent effect log, if the workload keeps one. */
  effects?: EffectRecord[];
}

export interface Expectation {
  /** Scheduled instants (epoch ms) every job must have fired in the window. */
  expected: Map<string, number[]>;
  /** Runs in these states count as fired (a 'skipped' run is a fire the overlap/pause policy dropped on record). */
  firedStates?: string[];
  /** Require every expected run to be completed (and its effect present once). */
  requireCompleted?: boolean;
  /**
   * A fire committed more than this before its scheduled time (database clock) fired early: a
   * leader that trusted a wall clock running fast. Default 500 ms.
   */
  earlyToleranceMs?: number;
}

export interface Violation {
  invariant: 'I1' | 'I2' | 'I3' | 'I4' | 'completion' | 'early';
  message: string;
}

export interface CheckReport {
  expected: number;
  committed: number;
  duplicated: number;
  missed: number;
  /** Fires committed before their scheduled time. */
  early: number;
  incomplete: number;
  tokenRegressions: number;
  effectsDuplicated: number;
  effectsMissing: number;
  staleEffects: number;
  violations: Violation[];
  ok: boolean;
}

const MAX_LISTED = 20;

export function checkHistory(history: History, expectation: Expectation): CheckReport {
  const violations: Violation[] = [];
  const note = (v: Violation) => {
    if (violations.filter((x) => x.invariant === v.invariant).length < MAX_LISTED) violations.push(v);
  };
  const fired = new Set(expectation.firedStates ?? ['pending', 'running', 'retrying', 'completed', 'failed', 'skipped', 'cancelled']);

  // I1: at most one run per (job, scheduled time).
  const bySlot = new Map<string, RunRecord[]>();
  for (const run of history.runs) {
    const key = `${run.job}@${run.scheduledAt}`;
    bySlot.set(key, [...(bySlot.get(key) ?? []), run]);
  }
  let duplicated = 0;
  for (const [key, runs] of bySlot) {
    if (runs.length > 1) {
      duplicated += runs.length - 1;
      note({ invariant: 'I1', message: `${key} fired ${runs.length} times (runs ${runs.map((r) => r.id).join(', ')})` });
    }
  }

  // I2: every expected time fired.
  let expected = 0;
  let missed = 0;
  let incomplete = 0;
  for (const [job, times] of expectation.expected) {
    for (const at of times) {
      expected++;
      const runs = (bySlot.get(`${job}@${at}`) ?? []).filter((r) => fired.has(r.state));
      if (runs.length === 0) {
        missed++;
        note({ invariant: 'I2', message: `${job}@${new Date(at).toISOString()} never fired` });
      } else if (expectation.requireCompleted && !runs.some((r) => r.state === 'completed')) {
        incomplete++;
        note({ invariant: 'completion', message: `${job}@${new Date(at).toISOString()} fired but did not complete (${runs[0]!.state})` });
      }
    }
  }

  // On time: nothing fires before it is due, whatever a replica's wall clock says.
  let early = 0;
  const tolerance = expectation.earlyToleranceMs ?? 500;
  for (const run of history.runs) {
    if (run.committedAt !== undefined && run.committedAt < run.scheduledAt - tolerance) {
      early++;
      note({ invariant: 'early', message: `${run.job}@${new Date(run.scheduledAt).toISOString()} committed ${run.scheduledAt - run.committedAt} ms before it was due (run ${run.id})` });
    }
  }

  // I3: leader tokens never decrease in commit order.
  let tokenRegressions = 0;
  let highest = -1n;
  for (const run of history.runs) {
    if (run.leaderToken < highest) {
      tokenRegressions++;
      note({ invariant: 'I3', message: `run ${run.id} committed with leader token ${run.leaderToken} after token ${highest}` });
    }
    if (run.leaderToken > highest) highest = run.leaderToken;
  }

  // I4: each run's effect exactly once, written by the attempt that completed the run.
  let effectsDuplicated = 0;
  let effectsMissing = 0;
  let staleEffects = 0;
  if (history.effects) {
    const effectsByRun = new Map<bigint, EffectRecord[]>();
    for (const e of history.effects) effectsByRun.set(e.runId, [...(effectsByRun.get(e.runId) ?? []), e]);
    const expectedRuns = new Set<bigint>();
    for (const [job, times] of expectation.expected) {
      for (const at of times) for (const r of bySlot.get(`${job}@${at}`) ?? []) if (r.state === 'completed') expectedRuns.add(r.id);
    }
    const runsById = new Map(history.runs.map((r) => [r.id, r]));
    for (const [runId, effects] of effectsByRun) {
      if (effects.length > 1) {
        effectsDuplicated += effects.length - 1;
        note({ invariant: 'I4', message: `run ${runId} has ${effects.length} effects (tokens ${effects.map((e) => e.token).join(', ')})` });
      }
      const run = runsById.get(runId);
      for (const e of effects) {
        if (run?.completedToken != null && e.token !== run.completedToken) {
          staleEffects++;
          note({ invariant: 'I4', message: `run ${runId}: effect written with token ${e.token}, but token ${run.completedToken} completed the run` });
        }
      }
    }
    for (const runId of expectedRuns) {
      if (!effectsByRun.has(runId)) {
        effectsMissing++;
        note({ invariant: 'I4', message: `run ${runId} completed without its effect` });
      }
    }
  }

  const committed = history.runs.length;
  const ok = duplicated === 0 && missed === 0 && early === 0 && incomplete === 0 && tokenRegressions === 0 && effectsDuplicated === 0 && effectsMissing === 0 && staleEffects === 0;
  return { expected, committed, duplicated, missed, early, incomplete, tokenRegressions, effectsDuplicated, effectsMissing, staleEffects, violations, ok };
}

export interface WindowCounts {
  expected: number;
  committed: number;
  duplicated: number;
  missed: number;
}

/** The fire counts of scheduled times in [from, to): what one fault's stretch of a drill did. */
export function countWindow(history: History, expectation: Pick<Expectation, 'expected'>, from: number, to: number): WindowCounts {
  const inWindow = (t: number) => t >= from && t < to;
  const runs = history.runs.filter((r) => inWindow(r.scheduledAt));
  const slots = new Set(runs.map((r) => `${r.job}@${r.scheduledAt}`));
  let expected = 0;
  let missed = 0;
  for (const [job, times] of expectation.expected) {
    for (const t of times) {
      if (!inWindow(t)) continue;
      expected++;
      if (!slots.has(`${job}@${t}`)) missed++;
    }
  }
  return { expected, committed: runs.length, duplicated: runs.length - slots.size, missed };
}

/** Load the ledger (and an effect log table with run_id and token columns, if named) for a window. */
export async function readHistory(
  pool: pg.Pool,
  options: { from: Date; to: Date; effectsTable?: string; jobPrefix?: string },
): Promise<History> {
  const runs = await pool.query<{ id: string; job: string; scheduled_at: Date; leader_token: string; state: string; completed_token: string | null; created_at: Date }>(
    `SELECT r.id, r.job, r.scheduled_at, r.leader_token, r.state, r.created_at,
            (SELECT a.token FROM cw_run_attempts a WHERE a.run_id = r.id AND a.state = 'completed' ORDER BY a.attempt DESC LIMIT 1) AS completed_token
     FROM cw_runs r
     -- Committed in the window but scheduled after it: fired early, which the checker must see.
     WHERE (r.scheduled_at BETWEEN $1 AND $2 OR r.created_at BETWEEN $1 AND $2) AND r.trigger <> 'manual' AND r.job LIKE $3
     ORDER BY r.id`,
    [options.from, options.to, `${options.jobPrefix ?? ''}%`],
  );
  const history: History = {
    runs: runs.rows.map((r) => ({
      id: BigInt(r.id),
      job: r.job,
      scheduledAt: r.scheduled_at.getTime(),
      leaderToken: BigInt(r.leader_token),
      state: r.state,
      completedToken: r.completed_token === null ? null : BigInt(r.completed_token),
      committedAt: r.created_at.getTime(),
    })),
  };
  if (options.effectsTable) {
    if (!/^[a-z_][a-z0-9_]*$/.test(options.effectsTable)) throw new Error(`bad effects table name ${options.effectsTable}`);
    const effects = await pool.query<{ run_id: string; token: string }>(
      `SELECT e.run_id, e.token FROM ${options.effectsTable} e JOIN cw_runs r ON r.id = e.run_id WHERE r.scheduled_at BETWEEN $1 AND $2`,
      [options.from, options.to],
    );
    history.effects = effects.rows.map((e) => ({ runId: BigInt(e.run_id), token: BigInt(e.token) }));
  }
  return history;
}
