/**
 * The live ledger check's checks (ledger-check.ts runs them): the drill's invariant checks
 * (ledger/invariant-checks.ts) over what ledger/ledger-check.ts reads of the last window, and the
 * claims the replicas saw commit that the ledger lost (ledger/commit-witness.ts). Each is a
 * LedgerCheck; another check joins by being added to the chore's list.
 */
import type { Queryable } from '../../ledger/transaction.js';
import type { Tables } from '../../db/tables.js';
import { checkDuplicates, iso, Notes, runsBySlot, tokenRegressions } from '../../ledger/invariant-checks.js';
import { readWindow, unsettledRuns, type CheckWindow, type UnsettledBounds } from '../../ledger/ledger-check.js';
import { membersWithLostWrites } from '../../ledger/members.js';
import type { Ledger as FullLedger } from '../../ledger/ledger.js';
import { shardOf } from '../shards/shard-map.js';
import { SWEEP_DEFAULTS } from './delivery-sweeper.js';
import type { Finding, LedgerCheck } from './ledger-check.js';

interface Ledger {
  db: Queryable;
  tables: Tables;
}

/**
 * I1 and I3 over the last window, from one statement: slots with two counted runs, and fires
 * committed with a leader token lower than one their shard had already committed.
 */
export function windowChecks(l: Ledger, w: CheckWindow, shardOfJob: (job: string) => number): LedgerCheck {
  return {
    checks: ['duplicate-slots', 'token-order'],
    async find(examples) {
      const read = await readWindow(l.db, l.tables, w, examples);
      const notes = new Notes(examples);
      const duplicated = checkDuplicates(runsBySlot(read.duplicateRuns), notes);
      // One finding per (job, token) pair out of order: the pair's last run stands for it.
      const regressions = tokenRegressions(read.tokenRuns, shardOfJob);
      const pairs = new Map(regressions.map((r) => [`${r.run.job}\n${r.run.leaderToken}`, r]));
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
          count: pairs.size,
          examples: [...pairs.values()].map(
            (r) =>
              `${r.run.job}: run ${r.run.id} committed with leader token ${r.run.leaderToken} after token ${r.after}${r.shard > 0 ? ` (shard ${r.shard})` : ''}`,
          ),
        },
      ];
      return { findings, window: { ms: w.windowMs, runs: read.runs, capped: read.capped } };
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
                `replica ${m.replicaId} saw ${m.lostWrites} claim(s) commit that the ledger no longer has${m.example ? `, first: ${m.example}` : ''}`,
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
  redelivery?: { checkAfterMs?: number; intervalMs?: number };
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
  const sweep = { ...SWEEP_DEFAULTS, ...o.redelivery };
  return [
    windowChecks(db, { windowMs, maxRows }, (job) => shardOf(job, shards)),
    unsettledCheck(db, () => ({
      runningMs: o.claimerLiveWithinMs() + 1000 + UNSETTLED_SLACK_MS,
      waitingMs: o.workerLockMs + sweep.checkAfterMs + 2 * sweep.intervalMs + UNSETTLED_SLACK_MS,
      timeouts: o.timeouts(),
    })),
    lostWritesCheck(db, windowMs),
  ];
}
