/**
 * The invariant checks over run records, defined once: the drill's checker (src/drill/checker.ts)
 * applies them to a drill's whole history, the live ledger check (src/scheduler/chores/ledger-check.ts)
 * to what ledger-check.ts reads of the last window. Pure, so tests can plant a duplicate, a token
 * out of order or a stranded run and expect it to be caught.
 */
import type { RunHistoryRow } from './history-reads.js';

/** A run as the checks see it: the ledger's history row, the commit instant optional for planted histories. */
export interface RunRecord extends Omit<RunHistoryRow, 'committedAt' | 'trigger'> {
  /** Why it was committed ('standin': by a follower); unknown in hand-made histories. */
  trigger?: string;
  /** When the ledger committed the fire (database clock), if known. */
  committedAt?: number;
}

export interface Violation {
  invariant: 'I1' | 'I2' | 'I3' | 'I4' | 'I6' | 'completion' | 'early';
  message: string;
}

export interface Settlement {
  completed: number;
  superseded: number;
  skipped: number;
  failed: number;
  cancelled: number;
  unsettled: number;
  unsettledByState: Record<string, number>;
}

const MAX_LISTED = 20;

/** The states in which a run is settled for good (I6); 'superseded' is a completion without an effect. */
export const settledStates = ['completed', 'superseded', 'skipped', 'failed', 'cancelled'] as const;

/** Collects violations, listing at most `maxListed` per invariant (the counts stay exact). */
export class Notes {
  readonly violations: Violation[] = [];
  constructor(private readonly maxListed = MAX_LISTED) {}
  add(v: Violation): void {
    if (this.violations.filter((x) => x.invariant === v.invariant).length < this.maxListed) this.violations.push(v);
  }
}

export const slotKey = (job: string, at: number) => `${job}@${at}`;
export const iso = (t: number) => new Date(t).toISOString();

export function runsBySlot(runs: readonly RunRecord[]): Map<string, RunRecord[]> {
  const bySlot = new Map<string, RunRecord[]>();
  for (const run of runs) {
    const key = slotKey(run.job, run.scheduledAt);
    bySlot.set(key, [...(bySlot.get(key) ?? []), run]);
  }
  return bySlot;
}

/** I1: at most one run per (job, scheduled time). Returns the runs beyond the first of each slot. */
export function checkDuplicates(bySlot: Map<string, RunRecord[]>, notes: Notes): number {
  let duplicated = 0;
  for (const [key, runs] of bySlot) {
    if (runs.length > 1) {
      duplicated += runs.length - 1;
      notes.add({
        invariant: 'I1',
        message: `${key} fired ${runs.length} times (runs ${runs.map((r) => r.id).join(', ')})`,
      });
    }
  }
  return duplicated;
}

/** What the token order needs of a run: its id (commit order), job and leader token. */
export type TokenedRun = Pick<RunRecord, 'id' | 'job' | 'leaderToken'>;

/** A run committed with a leader token lower than one its shard had already committed. */
export interface TokenRegression<R extends TokenedRun> {
  run: R;
  /** The highest token of its shard committed before it. */
  after: bigint;
  shard: number;
}

/**
 * I3: leader tokens never decrease in commit order, per shard (`shardOf` maps a job to its shard;
 * every fire carries its own shard's lease token). `runs` in commit order.
 */
export function tokenRegressions<R extends TokenedRun>(
  runs: readonly R[],
  shardOf: (job: string) => number,
): TokenRegression<R>[] {
  const regressions: TokenRegression<R>[] = [];
  const highest = new Map<number, bigint>();
  for (const run of runs) {
    const shard = shardOf(run.job);
    const top = highest.get(shard) ?? -1n;
    if (run.leaderToken < top) regressions.push({ run, after: top, shard });
    if (run.leaderToken > top) highest.set(shard, run.leaderToken);
  }
  return regressions;
}

/** I3 with a note per run out of order; with more than one shard (`shards`) the notes name it. */
export function checkTokenOrder(
  runs: readonly RunRecord[],
  notes: Notes,
  shardOf: (job: string) => number,
  shards: number,
): number {
  const regressions = tokenRegressions(runs, shardOf);
  for (const { run, after, shard } of regressions)
    notes.add({
      invariant: 'I3',
      message: `run ${run.id}${shards > 1 ? ` (${run.job}, shard ${shard})` : ''} committed with leader token ${run.leaderToken} after token ${after}`,
    });
  return regressions.length;
}

/**
 * I6: every committed run is settled at the end: completed, superseded (completed without its
 * effect because a later slot wrote first), skipped or cancelled by policy, or failed by its own
 * handler. A run still pending, running or retrying was lost on the way (e.g. by the queue) and
 * nothing brought it back.
 */
export function checkSettled(runs: readonly RunRecord[], notes: Notes): Settlement {
  const settlement: Settlement = {
    completed: 0,
    superseded: 0,
    skipped: 0,
    failed: 0,
    cancelled: 0,
    unsettled: 0,
    unsettledByState: {},
  };
  for (const run of runs) {
    if ((settledStates as readonly string[]).includes(run.state)) {
      settlement[run.state as (typeof settledStates)[number]]++;
      continue;
    }
    settlement.unsettled++;
    settlement.unsettledByState[run.state] = (settlement.unsettledByState[run.state] ?? 0) + 1;
    notes.add({
      invariant: 'I6',
      message: `run ${run.id} (${run.job}@${iso(run.scheduledAt)}) is still ${run.state} at the end`,
    });
  }
  return settlement;
}

/** What I7 needs of a workflow run: the steps it was started with, and its step runs. */
export interface StepsOfRun {
  steps: readonly { name: string; needs: readonly string[] }[] | null;
  stepRuns: readonly {
    id: bigint;
    step: string;
    item: number | null;
    startedAt: number | null;
    finishedAt: number | null;
  }[];
}

/**
 * I7: the step runs that started before every run of each step they need had finished (or while
 * a step they need had no run at all), with the need. A step run not started yet is not judged.
 */
export function stepsStartedEarly<R extends StepsOfRun>(run: R): { stepRun: R['stepRuns'][number]; need: string }[] {
  const early: { stepRun: R['stepRuns'][number]; need: string }[] = [];
  for (const step of run.steps ?? []) {
    const mine = run.stepRuns.filter((s) => s.step === step.name);
    for (const need of step.needs) {
      const needRuns = run.stepRuns.filter((s) => s.step === need);
      const lastNeed = Math.max(...needRuns.map((s) => s.finishedAt ?? Infinity));
      for (const s of mine) {
        if (s.startedAt === null) continue;
        if (needRuns.length === 0 || s.startedAt < lastNeed) early.push({ stepRun: s, need });
      }
    }
  }
  return early;
}
