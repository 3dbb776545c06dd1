import type pg from 'pg';

/**
 * node-postgres emits 'error' on a client the server drops while the client is checked out of its
 * pool but between queries (a ledger failover: "terminating connection due to unexpected
 * postmaster exit"). The pool listens only to idle clients, so such an event had no listener and
 * ended the process. Every client the pool connects gets a listener for its whole life: the error
 * is reported, and the holder's next query fails as an ordinary error (and the pool drops the
 * client when it is released with it).
 */
export function reportClientErrors(pool: pg.Pool, report: (err: Error) => void): pg.Pool {
  pool.on('connect', (client) => {
    client.on('error', report);
  });
  return pool;
}
