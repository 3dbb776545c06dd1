import type pg from 'pg';

/** A pool or a client inside a transaction: anything a ledger statement can run on. */
export type Queryable = Pick<pg.Pool, 'query'> | pg.PoolClient;

/**
 * Run `fn` in one transaction on a client of `pool`: COMMIT when it returns, ROLLBACK when it
 * throws (or when it asks for it by returning through `rollback`), the client released either way.
 * Round trips can be saved with parameterless statements (simple-protocol queries of two
 * statements): `opening` is sent with BEGIN and its result handed to `fn` (`more.opened`), and
 * `more.commitWith(sql)` sends `sql` with COMMIT. A statement that fails there leaves the
 * transaction aborted and uncommitted: `fn` may then roll back.
 */
export async function withTransaction<T>(
  pool: pg.Pool,
  fn: (client: pg.PoolClient, rollback: () => Promise<void>, more: TransactionExtras) => Promise<T>,
  opening?: string,
): Promise<T> {
  const client = await pool.connect();
  // A checked-out client has no listener of the pool's: without one, the server going away
  // mid-transaction (a restart, a failover) is an 'error' event that crashes the process. The
  // failure reaches us through the pending query anyway; the broken client is then discarded.
  let broken: Error | undefined;
  const onError = (err: Error) => {
    broken = err;
  };
  client.on('error', onError);
  let open = true;
  const rollback = async () => {
    if (!open) return;
    open = false;
    await client.query('ROLLBACK');
  };
  const commitWith = async (sql: string): Promise<pg.QueryResult> => {
    const res = firstResult(await client.query(`${sql}; COMMIT`));
    open = false;
    return res;
  };
  try {
    let opened: pg.QueryResult | undefined;
    if (opening === undefined) await client.query('BEGIN');
    else opened = results(await client.query(`BEGIN; ${opening}`))[1];
    const value = await fn(client, rollback, { opened, commitWith });
    if (open) {
      open = false;
      await client.query('COMMIT');
    }
    return value;
  } catch (err) {
    if (open) await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.off('error', onError);
    client.release(broken);
  }
}

export interface TransactionExtras {
  /** The result of `opening`, sent with BEGIN. */
  opened: pg.QueryResult | undefined;
  /** Run a parameterless statement and COMMIT in one round trip; its result. */
  commitWith: (sql: string) => Promise<pg.QueryResult>;
}

/** A two-statement simple query answers with one result per statement. */
function results(res: pg.QueryResult | pg.QueryResult[]): [pg.QueryResult, pg.QueryResult] {
  if (!Array.isArray(res) || res.length !== 2) throw new Error('expected the results of two statements');
  return res as [pg.QueryResult, pg.QueryResult];
}

function firstResult(res: pg.QueryResult | pg.QueryResult[]): pg.QueryResult {
  return results(res)[0];
}

/** An integer as an SQL literal, for the parameterless statements above (never user text). */
export function sqlInt(n: bigint | number): string {
  if (typeof n === 'number' && !Number.isSafeInteger(n)) throw new RangeError(`not an integer: ${n}`);
  return `${BigInt(n)}`;
}
