/** Reading the ledger while a drill runs (drill.ts), beside the checker's reads of the whole window afterwards. */
import type { Tables } from '../db/tables.js';
import * as ledgerHistory from '../ledger/history-reads.js';
import { liveMembers } from '../ledger/members.js';
import type { DrillEnvironment } from './environment.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The drill's reads of the ledger while it runs; a ledger that is down reads as "nothing yet". */
export class LedgerProbe {
  constructor(
    private readonly pool: DrillEnvironment['ledger']['pool'],
    private readonly tables: Tables,
  ) {}

  lastCommit(): Promise<number> {
    return ledgerHistory.lastCommitAt(this.pool, this.tables).catch(() => 0);
  }

  /** Replicas whose member row beat within `withinMs` (undefined: the ledger did not answer). */
  members(withinMs: number): Promise<Set<string> | undefined> {
    return liveMembers(this.pool, this.tables, withinMs).then(
      (ms) => new Set(ms.map((m) => m.replicaId)),
      () => undefined,
    );
  }

  unfinished(from: Date, to: Date): Promise<number> {
    return ledgerHistory.uncompletedRunsIn(this.pool, this.tables, from, to).catch(() => -1);
  }

  /** First fire committed after t (under a leader token above `aboveToken`, of one of `jobs`, if given), polled for up to timeoutMs. */
  async firstCommitAfter(
    t: number,
    timeoutMs: number,
    aboveToken?: bigint,
    jobs?: readonly string[],
  ): Promise<number | null> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const first = await ledgerHistory
        .firstCommitAfter(this.pool, this.tables, new Date(t), aboveToken, jobs)
        .catch(() => null);
      if (first !== null) return first;
      if (Date.now() >= deadline) return null;
      await sleep(50);
    }
  }
}
