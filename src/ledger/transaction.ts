import pg from 'pg';
import { ensurePrepared, plainSql, type SentSql } from './sql-prepared.js';

/** A pool or a client inside a transaction: anything a ledger statement can run on. */
export type Queryable = Pick<pg.Pool, 'query'> | pg.PoolClient;

/**
 * A transaction on a client of a pool, held open until commit() or rollback(), which release the
 * client (a workflow step's ctx.transaction stays open until the step returns its result).
 */
export class HeldTransaction {
  private open = true;
  /** Set when the server dropped the connection: the client is discarded on release. */
  private broken: Error | undefined;
  private readonly onError = (err: Error) => {
    this.broken = err;
  };

  private constructor(readonly client: pg.PoolClient) {
    // A checked-out client has no listener of the pool's: without one, the server going away
    // mid-transaction (a restart, a failover) is an 'error' event that crashes the process. The
    // failure reaches us through the pending query anyway; the broken client is then discarded.
    client.on('error', this.onError);
  }

  /**
   * BEGIN on a client of `pool`; `opening` (parameterless statements) is sent with it, the result
   * it names returned as `opened`.
   */
  static async begin(
    pool: pg.Pool,
    opening?: string | SentSql,
    o: { pipelined?: boolean } = {},
  ): Promise<{ tx: HeldTransaction; opened?: pg.QueryResult }> {
    const tx = new HeldTransaction(await pool.connect());
    // Pipeline mode for the whole transaction: its statements may go out before earlier answers
    // (run-transactions.ts, pipelined callbacks). Off again once COMMIT or ROLLBACK has answered,
    // by which time nothing sent is left unanswered, before the client goes back to the pool.
    if (o.pipelined) tx.setPipelined(true);
    try {
      if (opening === undefined) {
        await tx.client.query('BEGIN');
        return { tx };
      }
      const sent = asSent(opening);
      await ensurePrepared(tx.client, sent.prepared);
      return { tx, opened: resultAt(await tx.client.query(`BEGIN; ${sent.sql}`), 1 + sent.resultAt) };
    } catch (err) {
      tx.discardIfUnprepared(err);
      await tx.rollback().catch(() => undefined);
      throw err;
    }
  }

  get isOpen(): boolean {
    return this.open;
  }

  /** COMMIT (with parameterless statements before it, in one round trip: the result `sql` names); releases. */
  async commit(sql?: string | SentSql): Promise<pg.QueryResult | undefined> {
    if (!this.open) throw new Error('commit of a transaction that has ended');
    try {
      if (sql === undefined) {
        await this.client.query('COMMIT');
        this.end();
        return undefined;
      }
      const sent = asSent(sql);
      await ensurePrepared(this.client, sent.prepared);
      const res = resultAt(await this.client.query(`${sent.sql}; COMMIT`), sent.resultAt);
      this.end();
      return res;
    } catch (err) {
      this.discardIfUnprepared(err);
      // A failed statement leaves the transaction aborted: it stays open for rollback().
      if (this.broken) this.end();
      throw err;
    }
  }

  /** ROLLBACK and release; nothing when it has ended already. */
  async rollback(): Promise<void> {
    if (!this.open) return;
    try {
      await this.client.query('ROLLBACK');
    } finally {
      this.end();
    }
  }

  /**
   * The server no longer has a statement this connection prepared (a handler's DEALLOCATE ALL in
   * its ctx.transaction): the client goes on release, as pg and sql-prepared.ts would otherwise
   * keep naming statements that are gone, and the pool opens a new connection.
   */
  private discardIfUnprepared(err: unknown): void {
    if ((err as { code?: string }).code === '26000') this.broken ??= err as Error;
  }

  private setPipelined(on: boolean): void {
    (this.client as { pipeline: boolean }).pipeline = on;
  }

  private end(): void {
    if (!this.open) return;
    this.open = false;
    if (this.client.pipeline) this.setPipelined(false);
    this.client.off('error', this.onError);
    this.client.release(this.broken);
  }
}

/**
 * Run `fn` in one transaction on a client of `pool`: COMMIT when it returns, ROLLBACK when it
 * throws (or when it asks for it by returning through `rollback`), the client released either way.
 * Round trips can be saved with parameterless statements (simple-protocol queries of two
 * statements): `opening` is sent with BEGIN and its result handed to `fn` (`more.opened`), and
 * `more.commitWith(sql)` sends `sql` with COMMIT. A statement that fails there leaves the
 * transaction aborted and uncommitted: `fn` may then roll back. `o.pipelined`: the client is in
 * node-postgres's pipeline mode until the transaction ends.
 */
export async function withTransaction<T>(
  pool: pg.Pool,
  fn: (client: pg.PoolClient, rollback: () => Promise<void>, more: TransactionExtras) => Promise<T>,
  opening?: string | SentSql,
  o: { pipelined?: boolean } = {},
): Promise<T> {
  const { tx, opened } = await HeldTransaction.begin(pool, opening, o);
  try {
    const value = await fn(tx.client, () => tx.rollback(), {
      opened,
      commitWith: async (sql) => (await tx.commit(sql))!,
    });
    if (tx.isOpen) await tx.commit();
    return value;
  } finally {
    if (tx.isOpen) await tx.rollback().catch(() => undefined);
  }
}

export interface TransactionExtras {
  /** The result of `opening`, sent with BEGIN. */
  opened: pg.QueryResult | undefined;
  /** Run a parameterless statement and COMMIT in one round trip; its result. */
  commitWith: (sql: string | SentSql) => Promise<pg.QueryResult>;
}

function asSent(s: string | SentSql): SentSql {
  return typeof s === 'string' ? plainSql(s) : s;
}

/** A simple query of several statements answers with one result per statement: the one at `i`. */
function resultAt(res: pg.QueryResult | pg.QueryResult[], i: number): pg.QueryResult {
  if (!Array.isArray(res) || res.length <= i) throw new Error(`expected the results of more than ${i} statements`);
  return res[i]!;
}

/**
 * The opening statement (withTransaction's `opening`) of a transaction that takes the scheduler's
 * fence row, by advancing it or FOR SHARE: PostgreSQL ends the session when it sits idle inside
 * the transaction for `ms`. A replica frozen mid-commit (SIGSTOP, a paused VM, a debugger) would
 * otherwise hold the row lock until it thawed, and its lease would lapse while no new leader could
 * advance the fence and no stand-in could commit past it. `ms` is the lease TTL: a leader idle that
 * long inside its commit has lost its lease, and would roll back at its stillLeading check anyway.
 */
export function fenceHoldLimit(ms: number): string {
  return `SET LOCAL idle_in_transaction_session_timeout = ${sqlInt(idleLimitMs(ms))}`;
}

/** A hold limit as idle_in_transaction_session_timeout takes it: whole ms, at least 1 (0 would turn it off). */
export function idleLimitMs(ms: number): number {
  return Math.max(1, Math.round(ms));
}

/** An integer as an SQL literal, for the parameterless statements above (never user text). */
export function sqlInt(n: bigint | number): string {
  if (typeof n === 'number' && !Number.isSafeInteger(n)) throw new RangeError(`not an integer: ${n}`);
  return `${BigInt(n)}`;
}

/**
 * A string as an SQL literal, for statements sent without parameters. Without a quote or a
 * backslash it is the string in quotes, as escapeLiteral would make it, at once (escapeLiteral
 * builds its answer a character at a time: about 0.7 KB a run for the outcomes' arrays).
 */
export function sqlText(x: string): string {
  return NEEDS_ESCAPE.test(x) ? pg.escapeLiteral(x) : `'${x}'`;
}

const NEEDS_ESCAPE = /['\\]/;

/** An array of strings (null: SQL NULL) as an SQL literal, each element quoted as PostgreSQL's array input reads it. */
export function sqlTextArray(xs: readonly (string | null)[]): string {
  return sqlText(`{${xs.map((x) => (x === null ? 'NULL' : `"${x.replace(/[\\"]/g, (c) => `\\${c}`)}"`)).join(',')}}`);
}

/** An array of integers (null: SQL NULL) as an SQL literal ('{1,NULL,3}'), for statements sent without parameters. */
export function sqlIntArray(xs: readonly (bigint | number | null)[]): string {
  return `'{${xs.map((x) => (x === null ? 'NULL' : sqlInt(x))).join(',')}}'`;
}

/** An array of booleans as an SQL literal ('{t,f}'), for statements sent without parameters. */
export function sqlBoolArray(xs: readonly boolean[]): string {
  return `'{${xs.map((x) => (x ? 't' : 'f')).join(',')}}'`;
}
