import type { Logger } from 'pino';
import type { Clock } from '../../clock.js';
import type { Chore } from './chore.js';

/** What one check found in one round: how many, and the first few in words. */
export interface Finding {
  /** The check's name: the metric's `check` label ('duplicate-slots', 'token-order', …). */
  check: string;
  /** The invariant it guards (DESIGN.md), for the reader of a report. */
  invariant: string;
  count: number;
  examples: string[];
}

/** The window the round read, as the window's checks saw it. */
export interface ReportWindow {
  /** How far back the round read (ms). */
  ms: number;
  /**
   * Runs the round read (under the slot key): the whole window's at a tenure's first round, then
   * those committed since the last round (the report still covers the window: what the earlier
   * rounds read is kept).
   */
  runs: number;
  /** True when the round read as many runs as the row bound allows: only the newest were read. */
  capped: boolean;
}

/**
 * One check, or several read together (the window's checks share one statement). It plugs into
 * the chore by being in its list; `checks` names every finding it returns, each reported even at 0.
 */
export interface LedgerCheck {
  readonly checks: readonly string[];
  find(examples: number): Promise<{ findings: Finding[]; window?: ReportWindow }>;
}

/** One round's report: served by GET /api/ledger-check, the metrics and the console. */
export interface LedgerCheckReport {
  /** When the round started (ISO, the scheduler's clock). */
  checkedAt: string;
  tookMs: number;
  window: ReportWindow | null;
  /** Per check, how many it found (0 for a check that found nothing). */
  counts: Record<string, number>;
  /** Per check with a finding, the first few in words. */
  examples: Record<string, string[]>;
  /** Every check's count added. */
  violations: number;
}

export interface LedgerCheckChoreOptions {
  checks: readonly LedgerCheck[];
  /** Keeps the report (ledger-check.ts, saveLedgerCheck). */
  save: (report: LedgerCheckReport) => Promise<void>;
  clock: Clock;
  logger: Logger;
  /** Default 60 s. */
  intervalMs?: number;
  /** Examples kept per check. Default 5. */
  examples?: number;
}

/**
 * The drill's checker, always on: on the leader (shard 0's when sharded; it reads the whole
 * ledger), every interval, every check reads the last window of the ledger and the round's report
 * is kept in the ledger for every replica to serve. A round that finds anything logs one warning
 * with the counts and the first examples. Unfenced on purpose: it only reads, and a report written
 * by a stale leader is a report like any other.
 */
export class LedgerCheckChore implements Chore {
  readonly name = 'ledger check';
  readonly intervalMs: number;
  private readonly examples: number;

  constructor(private readonly o: LedgerCheckChoreOptions) {
    this.intervalMs = o.intervalMs ?? 60_000;
    this.examples = o.examples ?? 5;
  }

  round(): Promise<LedgerCheckReport> {
    return this.checkOnce();
  }

  /** Run every check once, keep the report and return it. */
  async checkOnce(): Promise<LedgerCheckReport> {
    const started = this.o.clock.now();
    const startedMono = this.o.clock.monotonic();
    const counts: Record<string, number> = {};
    const examples: Record<string, string[]> = {};
    let window: ReportWindow | null = null;
    for (const check of this.o.checks) {
      for (const name of check.checks) counts[name] = 0;
      const found = await check.find(this.examples);
      window = found.window ?? window;
      for (const f of found.findings) {
        counts[f.check] = (counts[f.check] ?? 0) + f.count;
        if (f.count > 0) examples[f.check] = f.examples.slice(0, this.examples).map((e) => `${f.invariant}: ${e}`);
      }
    }
    const violations = Object.values(counts).reduce((a, b) => a + b, 0);
    const report: LedgerCheckReport = {
      checkedAt: new Date(started).toISOString(),
      tookMs: Math.max(0, Math.round(this.o.clock.monotonic() - startedMono)),
      window,
      counts,
      examples,
      violations,
    };
    await this.o.save(report);
    if (violations > 0)
      this.o.logger.warn(
        { ledgerCheck: { counts, examples } },
        `ledger check: ${Object.entries(counts)
          .filter(([, n]) => n > 0)
          .map(([check, n]) => `${n} ${check}`)
          .join(', ')} in the last ${Math.round((window?.ms ?? 0) / 1000)} s`,
      );
    return report;
  }
}
