/**
 * The exactly-once checker: reads what the ledger, the effect table and the independent attempt
 * log say happened and checks the invariants of DESIGN.md. Pure over a History, so tests can plant
 * a duplicate, a gap or a stale write and expect it to be caught; readHistory() loads a History
 * from PostgreSQL.
 */
import type pg from 'pg';
import { attemptLogInWindow, effectsInWindow, runsInWindow } from '../ledger/history-reads.js';
import { tablesIn } from '../db/tables.js';
import type { AttemptOutcome } from './attempt-log.js';

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

/**
 * One row of the attempt log: what one attempt's fenced write did, appended outside (after) its
 * transaction, so a refused attempt leaves a row although its transaction rolled back.
 */
export interface AttemptLogRecord {
  runId: bigint;
  /** The attempt's execution token. */
  token: bigint;
  outcome: AttemptOutcome;
}

export interface History {
  /** In commit order (the fence serialises fire commits, so id order is commit order). */
  runs: RunRecord[];
  /** Rows of the effect table (written inside the run's transaction: exactly once per run), if the workload keeps one. */
  effects?: EffectRecord[];
  /** Rows of the independent attempt log (written outside the transaction), if the workload keeps one. */
  attemptLog?: AttemptLogRecord[];
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
  /** The attempt log's rows by outcome (null: no attempt log). staleSkipped: 'skipped' rows of an attempt older than the one that completed the run. */
  attemptLog: { attempts: number; committed: number; refused: number; skipped: number; staleSkipped: number; failed: number } | null;
  /**
   * Stale fenced writes refused, from the attempt log: 'refused' rows (the fence or the claim check
   * threw) plus stale 'skipped' rows (the attempt woke after a newer one had completed the run).
   */
  staleWritesRefused: number;
  /** 'committed' log rows whose token is not the one that completed the run: a stale write that landed (I4). */
  staleWritesLanded: number;
  /** Extra 'committed' log rows of a run beyond its first: its write committed more than once (I4). */
  writesCommittedTwice: number;
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

  // I4 from the independent attempt log: a committed write must be the completing attempt's, once
  // per run; refused and stale-skipped attempts are the stale writes the fence turned away.
  let attemptLog: CheckReport['attemptLog'] = null;
  let staleWritesLanded = 0;
  let writesCommittedTwice = 0;
  if (history.attemptLog) {
    const runsById = new Map(history.runs.map((r) => [r.id, r]));
    const counts = { attempts: 0, committed: 0, refused: 0, skipped: 0, staleSkipped: 0, failed: 0 };
    const committedByRun = new Map<bigint, bigint[]>();
    for (const row of history.attemptLog) {
      counts.attempts++;
      const run = runsById.get(row.runId);
      switch (row.outcome) {
        case 'committed': {
          counts.committed++;
          committedByRun.set(row.runId, [...(committedByRun.get(row.runId) ?? []), row.token]);
          if (run && run.completedToken !== row.token) {
            staleWritesLanded++;
            note({
              invariant: 'I4',
              message: `run ${row.runId}: the attempt log has a write committed with token ${row.token}, but ${run.completedToken === null ? 'no attempt completed the run' : `token ${run.completedToken} completed the run`}`,
            });
          }
          break;
        }
        case 'refused':
          counts.refused++;
          break;
        case 'skipped':
          counts.skipped++;
          if (run?.completedToken != null && row.token < run.completedToken) counts.staleSkipped++;
          break;
        default:
          counts.failed++;
      }
    }
    for (const [runId, tokens] of committedByRun) {
      if (tokens.length > 1) {
        writesCommittedTwice += tokens.length - 1;
        note({ invariant: 'I4', message: `run ${runId}: the attempt log has ${tokens.length} committed writes (tokens ${tokens.join(', ')})` });
      }
    }
    attemptLog = counts;
  }
  const staleWritesRefused = attemptLog ? attemptLog.refused + attemptLog.staleSkipped : 0;

  const committed = history.runs.length;
  const ok =
    duplicated === 0 &&
    missed === 0 &&
    early === 0 &&
    incomplete === 0 &&
    tokenRegressions === 0 &&
    effectsDuplicated === 0 &&
    effectsMissing === 0 &&
    staleEffects === 0 &&
    staleWritesLanded === 0 &&
    writesCommittedTwice === 0;
  return {
    expected,
    committed,
    duplicated,
    missed,
    early,
    incomplete,
    tokenRegressions,
    effectsDuplicated,
    effectsMissing,
    staleEffects,
    attemptLog,
    staleWritesRefused,
    staleWritesLanded,
    writesCommittedTwice,
    violations,
    ok,
  };
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

/**
 * Load the ledger for a window, and if named the effect table (run_id and token columns) and the
 * attempt log (run_id, token and outcome columns, see attempt-log.ts). `schema`: where the
 * ledger lives (default "cronwarden").
 */
export async function readHistory(
  pool: pg.Pool,
  options: { from: Date; to: Date; effectsTable?: string; attemptLogTable?: string; jobPrefix?: string; schema?: string },
): Promise<History> {
  const { from, to } = options;
  const t = tablesIn(options.schema);
  const history: History = { runs: await runsInWindow(pool, t, from, to, options.jobPrefix) };
  if (options.effectsTable) history.effects = await effectsInWindow(pool, t, options.effectsTable, from, to);
  if (options.attemptLogTable) {
    const rows = await attemptLogInWindow(pool, t, options.attemptLogTable, from, to);
    history.attemptLog = rows.map((l) => ({ ...l, outcome: l.outcome as AttemptOutcome }));
  }
  return history;
}
