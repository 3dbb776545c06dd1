import type { Logger } from 'pino';
import type { Lease } from '../locks/lease.js';
import type { TenureEnd } from '../scheduler/election/tenure.js';
import { recordRelease, recordRenew } from '../ledger/tenures.js';
import type { Queryable } from '../ledger/transaction.js';
import type { Tables } from '../db/tables.js';

/**
 * Stamps this replica's current tenure (its cw_elections row) with each successful renew and with
 * its release, so the failover timeline measures a handover from when the previous leader really
 * stopped, not from its last fire. Best effort: a stamp that fails is logged and the next renew
 * tries again; at most one write is in flight (a slow ledger coalesces renews, never queues them).
 */
export class TenureRecord {
  private current: { id: bigint; token: bigint } | undefined;
  private inFlight: Promise<void> | undefined;
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly o: {
      db: Queryable;
      tables: Tables;
      logger: Logger;
      warn: (kind: string, fields: object, message: string) => void;
    },
  ) {}

  elected(electionId: bigint, token: bigint): void {
    this.current = { id: electionId, token };
  }

  renewed(lease: Lease): void {
    const c = this.current;
    if (!c || c.token !== lease.token || this.inFlight) return;
    this.inFlight = this.write(() => recordRenew(this.o.db, this.o.tables, c.id)).finally(() => {
      this.inFlight = undefined;
    });
  }

  ended(lease: Lease, end: TenureEnd): void {
    const c = this.current;
    if (!c || c.token !== lease.token) return;
    this.current = undefined;
    if (end.kind === 'resigned' || end.kind === 'stopped')
      void this.write(() => recordRelease(this.o.db, this.o.tables, c.id));
  }

  /** Wait for stamps in flight (before the ledger's pool closes). */
  async flush(): Promise<void> {
    await Promise.allSettled([...this.pending]);
  }

  private write(fn: () => Promise<void>): Promise<void> {
    const p = fn().catch((err: Error) =>
      this.o.warn(`tenure:${err.message}`, { err: err.message }, 'could not stamp the tenure in cw_elections'),
    );
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
    return p;
  }
}
