import type pg from 'pg';

/**
 * The settings a pg.Pool was made with (a Client class for several hosts included): the pool's own
 * object, which it reads again for every connection it makes, so a change to it applies to the next.
 */
export function poolSettings(pool: pg.Pool): pg.PoolConfig {
  return (pool as pg.Pool & { options: pg.PoolConfig }).options;
}
