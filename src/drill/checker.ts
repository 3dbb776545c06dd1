/**
 * The exactly-once checker: reads what the ledger, the effect table and the independent attempt
 * log say happened and checks the invariants of DESIGN.md. Pure over a History, so tests can plant
 * a duplicate, a gap or a stale write and expect it to be caught; readHistory() loads a History
 * from PostgreSQL.
 */
import type pg from 'pg';
import { effectsInWindow, runsInWindow } from '../ledger/history-reads.js';
import { tablesIn } from '../db/tables.js';
import { shardOf } from '../scheduler/shards/shard-map.js';
import { readAttemptLog, type AttemptOutcome } from './attempt-log.js';
import {
  checkDuplicates,
  checkSettled,
  checkTokenOrder,
  iso,
  Notes,
  runsBySlot,
  settledStates,
  slotKey,
  type RunRecord,
  type Settlement,
  type Violation,
} from '../ledger/invariant-checks.js';

export {
  checkDuplicates,
  checkSettled,
  checkTokenOrder,
  Notes,
  settledStates,
  type RunRecord,
  type Settlement,
  type Violation,
};

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
  /** The run's job and scheduled time as the attempt saw them (the drill's log keeps them, so a run the ledger lost is still recognised). */
  job?: string;
  scheduledAt?: number;
  /** When the row was logged (database clock): for 'committed', just after the effect committed. */
  loggedAt?: number;
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
  /**
   * Sharded leadership: each shard's fires carry its own lease's tokens, so I3 holds per shard
   * (jobs grouped by shardOf). Default 1: one order for every fire.
   */
  shards?: number;
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
  attemptLog: {
    attempts: number;
    committed: number;
    refused: number;
    skipped: number;
    staleSkipped: number;
    failed: number;
  } | null;
  /**
   * Stale fenced writes refused, from the attempt log: 'refused' rows (the fence or the claim check
   * threw) plus stale 'skipped' rows (the attempt woke after a newer one had completed the run).
   */
  staleWritesRefused: number;
  /** 'committed' log rows whose token is not the one that completed the run: a stale write that landed (I4). */
  staleWritesLanded: number;
  /** Extra 'committed' log rows of a run beyond its first: its write committed more than once (I4). */
  writesCommittedTwice: number;
  /** 'committed' log rows (kept outside the ledger) whose run the ledger no longer has: a completion the ledger lost (I4). */
  writesLostByLedger: number;
  /** I6: the window's runs by final state; unsettled ones (pending, running, retrying) are violations. */
  settlement: Settlement;
  violations: Violation[];
  ok: boolean;
}

/** States that count as "the slot's work is done" for the completion check. */
const doneStates = new Set(['completed', 'superseded']);

export function checkHistory(history: History, expectation: Expectation): CheckReport {
  const notes = new Notes();
  const bySlot = runsBySlot(history.runs);
  const duplicated = checkDuplicates(bySlot, notes);
  const { expected, missed, incomplete } = checkMissed(bySlot, expectation, notes);
  const early = checkEarly(history.runs, expectation.earlyToleranceMs ?? 500, notes);
  const shards = expectation.shards ?? 1;
  const tokenRegressions = checkTokenOrder(history.runs, notes, (job) => shardOf(job, shards), shards);
  const effects = checkEffects(history, bySlot, expectation, notes);
  const log = checkAttemptLog(history, notes);
  const settlement = checkSettled(history.runs, notes);
  const ok =
    duplicated === 0 &&
    missed === 0 &&
    early === 0 &&
    incomplete === 0 &&
    tokenRegressions === 0 &&
    effects.effectsDuplicated === 0 &&
    effects.effectsMissing === 0 &&
    effects.staleEffects === 0 &&
    log.staleWritesLanded === 0 &&
    log.writesCommittedTwice === 0 &&
    log.writesLostByLedger === 0 &&
    settlement.unsettled === 0;
  return {
    expected,
    committed: history.runs.length,
    duplicated,
    missed,
    early,
    incomplete,
    tokenRegressions,
    ...effects,
    ...log,
    settlement,
    violations: notes.violations,
    ok,
  };
}

/** I2: every expected time fired; with requireCompleted, each of them also completed (or was superseded). */
export function checkMissed(
  bySlot: Map<string, RunRecord[]>,
  expectation: Expectation,
  notes: Notes,
): { expected: number; missed: number; incomplete: number } {
  const fired = new Set(expectation.firedStates ?? ['pending', 'running', 'retrying', ...settledStates]);
  let expected = 0;
  let missed = 0;
  let incomplete = 0;
  for (const [job, times] of expectation.expected) {
    for (const at of times) {
      expected++;
      const runs = (bySlot.get(slotKey(job, at)) ?? []).filter((r) => fired.has(r.state));
      if (runs.length === 0) {
        missed++;
        notes.add({ invariant: 'I2', message: `${job}@${iso(at)} never fired` });
      } else if (expectation.requireCompleted && !runs.some((r) => doneStates.has(r.state))) {
        incomplete++;
        notes.add({
          invariant: 'completion',
          message: `${job}@${iso(at)} fired but did not complete (${runs[0]!.state})`,
        });
      }
    }
  }
  return { expected, missed, incomplete };
}

/** On time: nothing fires before it is due, whatever a replica's wall clock says. */
export function checkEarly(runs: RunRecord[], toleranceMs: number, notes: Notes): number {
  let early = 0;
  for (const run of runs) {
    if (run.committedAt !== undefined && run.committedAt < run.scheduledAt - toleranceMs) {
      early++;
      notes.add({
        invariant: 'early',
        message: `${run.job}@${iso(run.scheduledAt)} committed ${run.scheduledAt - run.committedAt} ms before it was due (run ${run.id})`,
      });
    }
  }
  return early;
}

/** I4 from the effect table: each completed run's effect exactly once, written by the attempt that completed it. */
export function checkEffects(
  history: History,
  bySlot: Map<string, RunRecord[]>,
  expectation: Expectation,
  notes: Notes,
): { effectsDuplicated: number; effectsMissing: number; staleEffects: number } {
  const counts = { effectsDuplicated: 0, effectsMissing: 0, staleEffects: 0 };
  if (!history.effects) return counts;
  const effectsByRun = new Map<bigint, EffectRecord[]>();
  for (const e of history.effects) effectsByRun.set(e.runId, [...(effectsByRun.get(e.runId) ?? []), e]);
  const runsById = new Map(history.runs.map((r) => [r.id, r]));
  for (const [runId, effects] of effectsByRun) {
    if (effects.length > 1) {
      counts.effectsDuplicated += effects.length - 1;
      notes.add({
        invariant: 'I4',
        message: `run ${runId} has ${effects.length} effects (tokens ${effects.map((e) => e.token).join(', ')})`,
      });
    }
    const run = runsById.get(runId);
    for (const e of effects) {
      if (run?.completedToken != null && e.token !== run.completedToken) {
        counts.staleEffects++;
        notes.add({
          invariant: 'I4',
          message: `run ${runId}: effect written with token ${e.token}, but token ${run.completedToken} completed the run`,
        });
      }
    }
  }
  for (const [job, times] of expectation.expected) {
    for (const at of times) {
      for (const r of bySlot.get(slotKey(job, at)) ?? []) {
        if (r.state !== 'completed' || effectsByRun.has(r.id)) continue;
        counts.effectsMissing++;
        notes.add({ invariant: 'I4', message: `run ${r.id} completed without its effect` });
      }
    }
  }
  return counts;
}

type AttemptCounts = NonNullable<CheckReport['attemptLog']>;
type LogFindings = Pick<
  CheckReport,
  'attemptLog' | 'staleWritesRefused' | 'staleWritesLanded' | 'writesCommittedTwice' | 'writesLostByLedger'
>;

/**
 * I4 from the independent attempt log: a committed write must be the completing attempt's, once
 * per run and once per slot; refused and stale-skipped attempts are the stale writes the fence
 * turned away. Where the log lives outside the ledger (ledger faults), it also sees writes whose
 * run the ledger no longer knows: a completion the ledger lost (an asynchronous standby promoted).
 */
export function checkAttemptLog(history: History, notes: Notes): LogFindings {
  if (!history.attemptLog)
    return {
      attemptLog: null,
      staleWritesRefused: 0,
      staleWritesLanded: 0,
      writesCommittedTwice: 0,
      writesLostByLedger: 0,
    };
  const runsById = new Map(history.runs.map((r) => [r.id, r]));
  const counts: AttemptCounts = { attempts: 0, committed: 0, refused: 0, skipped: 0, staleSkipped: 0, failed: 0 };
  const committed: AttemptLogRecord[] = [];
  for (const row of history.attemptLog) {
    counts.attempts++;
    const run = runsById.get(row.runId);
    if (row.outcome === 'committed') {
      counts.committed++;
      committed.push(row);
    } else if (row.outcome === 'refused') counts.refused++;
    else if (row.outcome === 'skipped') {
      counts.skipped++;
      if (run?.completedToken != null && row.token < run.completedToken) counts.staleSkipped++;
    } else counts.failed++;
  }
  return {
    attemptLog: counts,
    staleWritesRefused: counts.refused + counts.staleSkipped,
    ...committedWrites(committed, runsById, notes),
  };
}

function committedWrites(
  committed: AttemptLogRecord[],
  runsById: Map<bigint, RunRecord>,
  notes: Notes,
): Pick<LogFindings, 'staleWritesLanded' | 'writesCommittedTwice' | 'writesLostByLedger'> {
  let staleWritesLanded = 0;
  let writesLostByLedger = 0;
  const byRun = new Map<bigint, bigint[]>();
  const bySlot = new Map<string, bigint[]>(); // keyed by job@ISO time, for the message
  for (const row of committed) {
    byRun.set(row.runId, [...(byRun.get(row.runId) ?? []), row.token]);
    if (row.job !== undefined && row.scheduledAt !== undefined) {
      const key = `${row.job}@${iso(row.scheduledAt)}`;
      bySlot.set(key, [...(bySlot.get(key) ?? []), row.runId]);
    }
    const run = runsById.get(row.runId);
    if (row.job !== undefined && (run === undefined || run.job !== row.job || run.scheduledAt !== row.scheduledAt)) {
      writesLostByLedger++;
      const now =
        run === undefined ? 'it has no such run' : `its run ${row.runId} is now ${run.job}@${iso(run.scheduledAt)}`;
      notes.add({
        invariant: 'I4',
        message: `run ${row.runId} (${row.job}@${iso(row.scheduledAt!)}): a write committed with token ${row.token}, but the ledger forgot it: ${now}`,
      });
    } else if (run && run.completedToken !== row.token) {
      staleWritesLanded++;
      const by =
        run.completedToken === null ? 'no attempt completed the run' : `token ${run.completedToken} completed the run`;
      notes.add({
        invariant: 'I4',
        message: `run ${row.runId}: the attempt log has a write committed with token ${row.token}, but ${by}`,
      });
    }
  }
  let writesCommittedTwice = 0;
  for (const [runId, tokens] of byRun) {
    if (tokens.length < 2) continue;
    writesCommittedTwice += tokens.length - 1;
    notes.add({
      invariant: 'I4',
      message: `run ${runId}: the attempt log has ${tokens.length} committed writes (tokens ${tokens.join(', ')})`,
    });
  }
  for (const [key, runIds] of bySlot) {
    const distinct = new Set(runIds);
    if (distinct.size < 2) continue;
    writesCommittedTwice += distinct.size - 1;
    notes.add({
      invariant: 'I4',
      message: `${key}: the attempt log has committed writes of ${distinct.size} different runs (${[...distinct].join(', ')}): its effect happened twice`,
    });
  }
  return { staleWritesLanded, writesCommittedTwice, writesLostByLedger };
}

export interface WindowCounts {
  expected: number;
  committed: number;
  duplicated: number;
  missed: number;
  /** Runs completed without their effect because a later slot wrote first. */
  superseded: number;
  /** Runs still pending, running or retrying at the end (I6). */
  unsettled: number;
  /** Completed runs whose effect is in the effect table exactly once (null: no effect table). */
  writtenOnce: number | null;
  /** Runs a follower committed for a silent leader (trigger 'standin'). */
  standIn: number;
  /** Commit minus scheduled instant, p50 / p99 / max in ms (null: no run). */
  commitLateMs: Percentiles | null;
  /** First committed effect (the attempt log) minus scheduled instant (null: no attempt log or none). */
  firstEffectLateMs: Percentiles | null;
}

export interface Percentiles {
  p50: number;
  p99: number;
  max: number;
}

/** Nearest-rank percentiles of `values` (null when empty). */
export function percentiles(values: number[]): Percentiles | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
  return { p50: at(0.5), p99: at(0.99), max: sorted[sorted.length - 1]! };
}

/** Per slot, the first committed effect's lateness, from the attempt log's times. */
function firstEffectLateness(history: History, inWindow: (t: number) => boolean): number[] {
  const first = new Map<string, number>();
  for (const l of history.attemptLog ?? []) {
    if (l.outcome !== 'committed' || l.scheduledAt === undefined || l.loggedAt === undefined) continue;
    if (!inWindow(l.scheduledAt)) continue;
    const key = `${l.job}@${l.scheduledAt}`;
    const late = l.loggedAt - l.scheduledAt;
    if (!first.has(key) || late < first.get(key)!) first.set(key, late);
  }
  return [...first.values()];
}

/** The fire counts of scheduled times in [from, to): what one fault's stretch of a drill did. */
export function countWindow(
  history: History,
  expectation: Pick<Expectation, 'expected'>,
  from: number,
  to: number,
): WindowCounts {
  const inWindow = (t: number) => t >= from && t < to;
  // The expected jobs' fires (a drill's workflow runs are judged on their own: workflow-checker.ts).
  const runs = history.runs.filter((r) => inWindow(r.scheduledAt) && expectation.expected.has(r.job));
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
  const superseded = runs.filter((r) => r.state === 'superseded').length;
  const unsettled = runs.filter((r) => !(settledStates as readonly string[]).includes(r.state)).length;
  let writtenOnce: number | null = null;
  if (history.effects) {
    const effects = new Map<bigint, number>();
    for (const e of history.effects) effects.set(e.runId, (effects.get(e.runId) ?? 0) + 1);
    writtenOnce = runs.filter((r) => r.state === 'completed' && effects.get(r.id) === 1).length;
  }
  const committedAt = runs.filter((r) => r.committedAt !== undefined).map((r) => r.committedAt! - r.scheduledAt);
  return {
    expected,
    committed: runs.length,
    duplicated: runs.length - slots.size,
    missed,
    superseded,
    unsettled,
    writtenOnce,
    standIn: runs.filter((r) => r.trigger === 'standin').length,
    commitLateMs: percentiles(committedAt),
    firstEffectLateMs: percentiles(firstEffectLateness(history, inWindow)),
  };
}

/**
 * Load the ledger for a window, and if named the effect table (run_id and token columns) and the
 * drill's attempt log (see attempt-log.ts), which may live in another database than the ledger.
 * `schema`: where the ledger lives (default "cronwarden").
 */
export async function readHistory(
  pool: pg.Pool,
  options: {
    from: Date;
    to: Date;
    effectsTable?: string;
    attemptLogDb?: Pick<pg.Pool, 'query'>;
    jobPrefix?: string;
    schema?: string;
  },
): Promise<History> {
  const { from, to } = options;
  const t = tablesIn(options.schema);
  const history: History = { runs: await runsInWindow(pool, t, from, to, options.jobPrefix) };
  if (options.effectsTable) history.effects = await effectsInWindow(pool, t, options.effectsTable, from, to);
  if (options.attemptLogDb) history.attemptLog = await readAttemptLog(options.attemptLogDb, from, to);
  return history;
}
