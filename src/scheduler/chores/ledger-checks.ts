/**
 * The live ledger check's checks (ledger-check.ts runs them): the drill's invariant checks
 * (ledger/invariant-checks.ts) over what ledger/ledger-check.ts reads of the last window, and the
 * claims the replicas saw commit that the ledger lost (ledger/commit-witness.ts). Each is a
 * LedgerCheck; another check joins by being added to the chore's list.
 */
import type { Queryable } from '../../ledger/transaction.js';
import type { Tables } from '../../db/tables.js';
import {
  checkDuplicates,
  iso,
  Notes,
  runsBySlot,
  stepsStartedEarly,
  tokenRegressions,
  type RunRecord,
  type TokenedRun,
} from '../../ledger/invariant-checks.js';
import {
  readWindow,
  unsettledRuns,
  workflowRunsTouched,
  type CheckWindow,
  type TokenPair,
  type UnsettledBounds,
} from '../../ledger/ledger-check.js';
import { membersWithLostWrites } from '../../ledger/members.js';
import { accountedJobs, countUnanswered } from '../../ledger/occurrence-reads.js';
import type { Ledger as FullLedger } from '../../ledger/ledger.js';
import { shardOf } from '../shards/shard-map.js';
import { SWEEP_DEFAULTS } from './delivery-sweeper.js';
import type { Finding, LedgerCheck } from './ledger-check.js';

interface Ledger {
  db: Queryable;
  tables: Tables;
}

/**
 * Transactions still open at a round's read may commit runs stamped (created_at: their start)
 * before it: the next round reads from this far before the last read. Fire commits take
 * milliseconds; a late run it misses still meets its slot's other run in the late runs' probe.
 */
const READ_SLACK_MS = 10_000;

/**
 * I1 and I3 over the last window, from one statement a round: slots with two counted runs, and
 * fires committed with a leader token lower than one their shard had already committed. The first
 * round reads the whole window; each later one only what was committed since the last (and the
 * slack), and the (job, token) pairs and doubled slots of the window are kept between rounds, so
 * the report still covers the window while each run is read about once.
 */
export function windowChecks(
  l: Ledger,
  w: Pick<CheckWindow, 'windowMs' | 'maxRows'>,
  shardOfJob: (job: string) => number,
): LedgerCheck {
  const pairs = new Map<string, TokenPair>();
  const doubled = new Map<string, RunRecord[]>();
  let since: Date | null = null;
  return {
    checks: ['duplicate-slots', 'token-order'],
    async find(examples) {
      const read = await readWindow(l.db, l.tables, { ...w, since, lateAfterMs: READ_SLACK_MS }, examples);
      since = new Date(read.readAt.getTime() - READ_SLACK_MS);
      const from = read.readAt.getTime() - w.windowMs;
      for (const p of read.pairs) {
        const key = `${p.job}\n${p.leaderToken}`;
        const kept = pairs.get(key);
        if (!kept) pairs.set(key, p);
        else {
          if (p.firstId < kept.firstId) kept.firstId = p.firstId;
          if (p.lastId > kept.lastId) [kept.lastId, kept.lastAt] = [p.lastId, p.lastAt];
        }
      }
      for (const [key, p] of pairs) if (p.lastAt <= from) pairs.delete(key);
      for (const [slot, runs] of runsBySlot(read.duplicateRuns)) doubled.set(slot, runs);
      for (const [slot, runs] of doubled)
        if (Math.max(...runs.map((r) => r.committedAt ?? 0)) <= from) doubled.delete(slot);

      const notes = new Notes(examples);
      const duplicated = checkDuplicates(doubled, notes);
      // One finding per (job, token) pair out of order: the pair's last run stands for it.
      const regressions = tokenRegressions(pairEnds(pairs.values()), shardOfJob);
      const outOfOrder = new Map(regressions.map((r) => [`${r.run.job}\n${r.run.leaderToken}`, r]));
      const findings: Finding[] = [
        {
          check: 'duplicate-slots',
          invariant: 'I1',
          count: duplicated,
          examples: notes.violations.map((v) => v.message),
        },
        {
          check: 'token-order',
          invariant: 'I3',
          count: outOfOrder.size,
          examples: [...outOfOrder.values()].map(
            (r) =>
              `${r.run.job}: run ${r.run.id} committed with leader token ${r.run.leaderToken} after token ${r.after}${r.shard > 0 ? ` (shard ${r.shard})` : ''}`,
          ),
        },
      ];
      return { findings, window: { ms: w.windowMs, runs: read.runs, capped: read.capped } };
    },
  };
}

/** Each pair as a run for its first id and one for its last, in id order. */
function pairEnds(pairs: Iterable<TokenPair>): TokenedRun[] {
  const ends: TokenedRun[] = [];
  for (const p of pairs) {
    ends.push({ id: p.firstId, job: p.job, leaderToken: p.leaderToken });
    if (p.lastId !== p.firstId) ends.push({ id: p.lastId, job: p.job, leaderToken: p.leaderToken });
  }
  return ends.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * I7 over the workflow runs whose steps were made since the last round (the whole window at the
 * first): a step run started before every run of a step it needs had finished. Findings are kept
 * for the window, as the window's checks keep theirs.
 */
export function workflowCheck(l: Ledger, w: Pick<CheckWindow, 'windowMs'>, limit = 10_000): LedgerCheck {
  const found = new Map<bigint, { message: string; at: number }>();
  let since: Date | null = null;
  return {
    checks: ['workflow-order'],
    async find() {
      const { readAt, runs } = await workflowRunsTouched(l.db, l.tables, { windowMs: w.windowMs, since }, limit);
      const at = readAt.getTime();
      since = new Date(at - READ_SLACK_MS);
      for (const run of runs)
        for (const { stepRun: s, need } of stepsStartedEarly(run))
          found.set(s.id, {
            message: `${run.workflow}@${iso(run.scheduledAt)} (run ${run.id}): step ${s.step}${s.item === null ? '' : `[${s.item}]`} (run ${s.id}) started before its need ${need} completed`,
            at,
          });
      for (const [id, f] of found) if (f.at <= at - w.windowMs) found.delete(id);
      return {
        findings: [
          {
            check: 'workflow-order',
            invariant: 'I7',
            count: found.size,
            examples: [...found.values()].map((f) => f.message),
          },
        ],
      };
    },
  };
}

/** I6: unfinished runs no one is on past their bound (a run waiting by policy is not one). */
export function unsettledCheck(l: Ledger, bounds: () => UnsettledBounds): LedgerCheck {
  return {
    checks: ['unsettled'],
    async find(examples) {
      const { count, runs } = await unsettledRuns(l.db, l.tables, bounds(), examples);
      const why = {
        'worker-dead': 'its worker stopped beating and no one took it over',
        'past-timeout': "still running past its job's timeout",
        'not-delivered': 'due, and neither handed to a worker nor looked for in the queue',
      };
      return {
        findings: [
          {
            check: 'unsettled',
            invariant: 'I6',
            count,
            examples: runs.map(
              (r) =>
                `run ${r.id} (${r.job}@${iso(r.scheduledAt)}) ${r.state} for ${Math.round(r.forMs / 1000)} s: ${why[r.why]}`,
            ),
          },
        ],
      };
    },
  };
}

/** Claims the replicas saw commit that the ledger no longer has (a lossy failover of the ledger). */
export function lostWritesCheck(l: Ledger, windowMs: number): LedgerCheck {
  return {
    checks: ['lost-writes'],
    async find() {
      const members = await membersWithLostWrites(l.db, l.tables, windowMs);
      return {
        findings: [
          {
            check: 'lost-writes',
            invariant: 'I4',
            count: members.reduce((n, m) => n + m.lostWrites, 0),
            examples: members.map(
              (m) =>
                `replica ${m.replicaId} saw ${m.lostWrites} claim(s) or outcome(s) commit that the ledger no longer has${m.example ? `, first: ${m.example}` : ''}`,
            ),
          },
        ],
      };
    },
  };
}

/**
 * Instants this recent are left to the next round: a catch-up may still be committing older slots
 * behind a newer fire (the watermark), which would read as unanswered for a moment.
 */
const UNANSWERED_LAG_MS = 60_000;
/** Jobs a round asks about: each costs a few indexed reads (occurrence-reads.ts countUnanswered). */
const UNANSWERED_JOBS_PER_ROUND = 200;

/**
 * I2 as the occurrence ledger states it: due instants of the window that have no answer (no run, no
 * missed range, inside a schedule era, not after the job's watermark). A round reads the next page
 * of UNANSWERED_JOBS_PER_ROUND job names and asks about those, keeping each job's last count, so
 * every job is looked at once per ceil(jobs / that) rounds and the report covers every job.
 */
export function unansweredCheck(l: Ledger, o: { windowMs: number; now: () => number }): LedgerCheck {
  const counts = new Map<string, number>();
  // The last job asked about ('': start from the first), so a round reads one page of job names.
  let cursor = '';
  return {
    checks: ['unanswered-instants'],
    async find(examples) {
      const now = o.now();
      const window = { from: new Date(now - o.windowMs), to: new Date(now - UNANSWERED_LAG_MS), now: new Date(now) };
      const page = { after: cursor, limit: UNANSWERED_JOBS_PER_ROUND };
      const turn = window.to > window.from ? await accountedJobs(l.db, l.tables, window, page) : [];
      // A short page reached the end of the list: the next round starts from the first job again.
      const end = turn.length < UNANSWERED_JOBS_PER_ROUND ? null : turn.at(-1)!;
      // Jobs of this stretch of the list that are no longer accounted in the window drop their count.
      const asked = new Set(turn);
      for (const job of counts.keys())
        if (job > cursor && (end === null || job <= end) && !asked.has(job)) counts.delete(job);
      cursor = end ?? '';
      const found = turn.length > 0 ? await countUnanswered(l.db, l.tables, turn, window) : null;
      for (const job of turn) {
        const n = found?.byJob.get(job) ?? 0;
        if (n > 0) counts.set(job, n);
        else counts.delete(job);
      }
      const total = [...counts.values()].reduce((a, b) => a + b, 0);
      const shown = [...counts].slice(0, examples);
      return {
        findings: [
          {
            check: 'unanswered-instants',
            invariant: 'I2',
            count: total,
            examples: shown.map(
              ([job, n]) =>
                `${job}: ${n} due instant(s) of the window have no run and no missed range (cronwarden explain ${job})`,
            ),
          },
        ],
      };
    },
  };
}

/**
 * Slack on every bound of the unsettled check: a takeover or a sweep that is merely slow under
 * load is not a run no one is on.
 */
const UNSETTLED_SLACK_MS = 30_000;

export interface LedgerChecksOptions {
  ledger: Pick<FullLedger, 'pool' | 'tables'>;
  windowMs: number;
  maxRows: number;
  shards: number;
  /** BullMQ's lock on a delivery (worker.lockDurationMs): a dead worker's unclaimed delivery waits this long. */
  workerLockMs: number;
  /** The workers' claimer window (ledger.runs.claimerLiveWithinMs: the lease TTL). */
  claimerLiveWithinMs: () => number;
  /** The jobs with a timeout. */
  timeouts: () => readonly { job: string; timeoutMs: number }[];
  /** The re-delivery sweep's settings (DeliverySweeper). */
  redelivery?: { checkAfterMs?: number; intervalMs?: number; batchSize?: number };
  /** The scheduler's clock (epoch ms): which due instants are past. */
  now: () => number;
}

/**
 * The checks of the live ledger check, for the leader's chore and the drill alike. The bound on a
 * run no one is on: a running run's worker silent past the claimer window, the takeover poll (a
 * second) and the slack; a waiting run neither handed over nor looked for in the queue past the
 * worker lock (a dead worker's delivery), the sweep's delay and two sweeps, and the slack.
 */
export function ledgerChecks(o: LedgerChecksOptions): LedgerCheck[] {
  const db = { db: o.ledger.pool, tables: o.ledger.tables };
  const { windowMs, maxRows, shards } = o;
  const r = o.redelivery ?? {};
  const sweep = {
    checkAfterMs: r.checkAfterMs ?? SWEEP_DEFAULTS.checkAfterMs,
    intervalMs: r.intervalMs ?? SWEEP_DEFAULTS.intervalMs,
    batchSize: r.batchSize ?? SWEEP_DEFAULTS.batchSize,
  };
  return [
    windowChecks(db, { windowMs, maxRows }, (job) => shardOf(job, shards)),
    unsettledCheck(db, () => ({
      runningMs: o.claimerLiveWithinMs() + 1000 + UNSETTLED_SLACK_MS,
      waitingMs: o.workerLockMs + sweep.checkAfterMs + 2 * sweep.intervalMs + UNSETTLED_SLACK_MS,
      sweepMsPerWaitingRun: sweep.intervalMs / sweep.batchSize,
      timeouts: o.timeouts(),
    })),
    workflowCheck(db, { windowMs }),
    lostWritesCheck(db, windowMs),
    unansweredCheck(db, { windowMs, now: o.now }),
  ];
}
