/**
 * What held the ledger up while a fault played out: the drill's ledger sessions that waited on a
 * lock, sampled every 100 ms, each with the sessions that blocked it (pg_blocking_pids), and the
 * most sessions each replica had busy at once (a pool of 10 all busy is a replica that cannot
 * fire). Sessions are named by replica (replica/connections.ts). A fault that broke its bound says
 * what it waited for, instead of a bare number.
 */
import type pg from 'pg';

/** One session's wait on a lock, at the longest it was seen. */
export interface LockWait {
  waiter: string;
  query: string;
  /** What kind of lock (pg_stat_activity.wait_event: tuple, transactionid, relation, advisory, object…). */
  lock: string;
  waitedMs: number;
  blockers: { name: string; state: string; query: string; inTransactionMs: number | null }[];
}

export interface LockWatchReport {
  /** Waits of at least `minMs`, longest first (at most 5). */
  waits: LockWait[];
  /** Per session name: the most sessions seen busy (not idle) at once. */
  busiest: Record<string, number>;
}

const SAMPLE_MS = 100;
const QUERY_CHARS = 100;

const WAITS = `
  SELECT w.pid, coalesce(nullif(w.application_name, ''), '?') AS name, left(w.query, ${QUERY_CHARS}) AS query,
         w.wait_event AS lock,
         (extract(epoch FROM clock_timestamp() - w.query_start) * 1000)::int AS waited_ms,
         (SELECT coalesce(json_agg(json_build_object(
                   'name', coalesce(nullif(b.application_name, ''), '?'), 'state', coalesce(b.state, '?'),
                   'query', left(b.query, ${QUERY_CHARS}),
                   'inTransactionMs', (extract(epoch FROM clock_timestamp() - b.xact_start) * 1000)::int)), '[]')
          FROM pg_stat_activity b WHERE b.pid = ANY(pg_blocking_pids(w.pid))) AS blockers
  FROM pg_stat_activity w
  WHERE w.datname = current_database() AND w.wait_event_type = 'Lock'`;

const BUSY = `
  SELECT coalesce(nullif(application_name, ''), '?') AS name, count(*)::int AS n FROM pg_stat_activity
  WHERE datname = current_database() AND backend_type = 'client backend' AND state IS DISTINCT FROM 'idle'
    AND pid <> pg_backend_pid()
  GROUP BY 1`;

export class LockWatch {
  private readonly waits = new Map<string, LockWait>();
  private readonly busiest: Record<string, number> = {};
  private stopped = false;
  private readonly loop: Promise<void>;

  private constructor(
    private readonly pool: Pick<pg.Pool, 'query'>,
    private readonly minMs: number,
  ) {
    this.loop = this.run();
  }

  static start(pool: Pick<pg.Pool, 'query'>, minMs = 500): LockWatch {
    return new LockWatch(pool, minMs);
  }

  async stop(): Promise<LockWatchReport> {
    this.stopped = true;
    await this.loop;
    const waits = [...this.waits.values()].sort((a, b) => b.waitedMs - a.waitedMs).slice(0, 5);
    return { waits, busiest: { ...this.busiest } };
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      // The ledger itself may be the fault (restarted, failed over): a sample lost is no matter.
      await this.sample().catch(() => undefined);
      await new Promise((r) => setTimeout(r, SAMPLE_MS));
    }
  }

  private async sample(): Promise<void> {
    const [waits, busy] = await Promise.all([
      this.pool.query<{
        pid: number;
        name: string;
        query: string;
        lock: string;
        waited_ms: number;
        blockers: LockWait['blockers'];
      }>(WAITS),
      this.pool.query<{ name: string; n: number }>(BUSY),
    ]);
    for (const w of waits.rows) {
      if (w.waited_ms < this.minMs) continue;
      const key = `${w.pid} ${w.query}`;
      const seen = this.waits.get(key);
      if (!seen || seen.waitedMs < w.waited_ms)
        this.waits.set(key, {
          waiter: w.name,
          query: w.query,
          lock: w.lock,
          waitedMs: w.waited_ms,
          blockers: w.blockers,
        });
    }
    for (const b of busy.rows) this.busiest[b.name] = Math.max(this.busiest[b.name] ?? 0, b.n);
  }
}

/** One line per wait, for a violation message or the log. */
export function describeLockWaits(r: LockWatchReport): string {
  const waits = r.waits.map(
    (w) =>
      `${w.waiter} waited ${w.waitedMs} ms (a ${w.lock} lock) in "${oneLine(w.query)}" for ${
        w.blockers
          .map(
            (b) =>
              `${b.name} (${b.state}${b.inTransactionMs === null ? '' : `, ${b.inTransactionMs} ms in its transaction`}: "${oneLine(b.query)}")`,
          )
          .join(', ') || 'a session gone by then'
      }`,
  );
  const busy = Object.entries(r.busiest)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([name, n]) => `${name} ${n}`)
    .join(', ');
  return [...(waits.length ? waits : ['no lock waits']), `most sessions busy at once: ${busy || 'none seen'}`].join(
    '; ',
  );
}

const oneLine = (s: string) => s.replace(/\s+/g, ' ').trim();
