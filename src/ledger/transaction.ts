import type pg from 'pg';

/** A pool or a client inside a transaction: anything a ledger statement can run on. */
export type Queryable = Pick<pg.Pool, 'query'> | pg.PoolClient;

/**
 * Run `fn` in one transaction on a client of `pool`: COMMIT when it returns, ROLLBACK when it
 * throws (or when it asks for it by returning through `rollback`), the client released either way.
 */
export async function withTransaction<T>(
  pool: pg.Pool,
  fn: (client: pg.PoolClient, rollback: () => Promise<void>) => Promise<T>,
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
  try {
    await client.query('BEGIN');
    const value = await fn(client, rollback);
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
