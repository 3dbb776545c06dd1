import pg from 'pg';

/**
 * A pool whose clients stop, until thaw(), right after the first statement `freezesAfter` picks
 * (by default the first that touched cw_fences): all the server sees of a replica frozen (SIGSTOP,
 * a paused VM) inside a transaction holding the scheduler's fence row, or another lock.
 * `hasFrozen` resolves once one has.
 */
export function freezingPool(url: string, freezesAfter = (text: string) => text.includes('cw_fences')) {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  pool.on('error', () => undefined); // the frozen session is ended by the server
  let frozen!: () => void;
  const hasFrozen = new Promise<void>((r) => (frozen = r));
  let thaw!: () => void;
  const thawed = new Promise<void>((r) => (thaw = r));
  const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
  (pool as { connect: () => Promise<pg.PoolClient> }).connect = async () => {
    const client = await connect();
    const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
    (client as unknown as { query: (...args: unknown[]) => Promise<unknown> }).query = async (...args: unknown[]) => {
      const res = await query(...args);
      const q = args[0];
      const text = typeof q === 'string' ? q : (q as { text?: string }).text;
      if (text !== undefined && freezesAfter(text)) {
        frozen();
        await thawed;
      }
      return res;
    };
    return client;
  };
  return { pool, hasFrozen, thaw };
}
