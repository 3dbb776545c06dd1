import { hostname } from 'node:os';
import type pg from 'pg';
import { AdminServer } from '../admin/server.js';
import { AdminThread } from '../admin/admin-thread.js';
import type { ReplicaView } from '../admin/replica-view.js';
import { poolSettings } from '../db/pool-settings.js';
import type { LeaseBackend } from '../locks/lease.js';
import type { ResolvedAdminOptions } from './replica-defaults.js';
import { InvalidConfigError } from '../errors.js';

export interface AdminFactoryOptions {
  admin: ResolvedAdminOptions;
  replica: ReplicaView;
  backend: LeaseBackend;
  /** The ledger as a URL, if the replica was given one. */
  databaseUrl?: string;
  /** The replica's ledger pool, whose connection settings an in-thread admin copies otherwise. */
  pool: pg.Pool;
}

/**
 * The admin HTTP: in a worker thread of its own (the default) when the ledger is a URL, so a flood
 * of admin connections costs that thread's event loop and not the scheduler's. A pool's settings
 * (functions, a Client class) cannot cross to a thread: then in the scheduler's thread.
 */
export function createAdmin(o: AdminFactoryOptions): AdminServer | AdminThread {
  const a = o.admin;
  const admin = {
    replica: o.replica,
    backend: o.backend,
    token: a.token,
    readsNeedToken: a.readsNeedToken,
    host: a.host,
    port: a.port,
    advertisedUrl: a.url,
    allowedHosts: a.allowedHosts,
    probe: a.probe,
  };
  if (a.thread !== false && o.databaseUrl)
    return new AdminThread({ ...admin, databaseUrl: o.databaseUrl, niceness: a.niceness });
  return new AdminServer({
    ...admin,
    // The admin pool copies the connection settings of the pool the replica was given.
    databaseUrl: o.databaseUrl ?? poolSettings(o.pool),
  });
}

/**
 * A listener's failure to bind as the error to show: a port already in use (a second replica on
 * this host) is configuration, not a failure a restart can fix, so it names the option to change
 * (admin.port, admin.probe.port). The admin thread passes on only the message, hence its text.
 */
export function listenFailure(err: unknown, admin: ResolvedAdminOptions): unknown {
  const message = err instanceof Error ? err.message : String(err);
  const inUse = /EADDRINUSE.*?(\S+):(\d+)\s*$/.exec(message);
  if (!inUse && (err as { code?: string } | undefined)?.code !== 'EADDRINUSE') return err;
  const port = Number(inUse?.[2] ?? admin.port);
  const option = admin.probe && admin.probe.port === port && admin.port !== port ? 'admin.probe.port' : 'admin.port';
  return new InvalidConfigError(
    option,
    `${inUse ? `${inUse[1]}:${port}` : `port ${port}`} is already in use (another replica on this host?): give each replica its own port, or 0 for any free one`,
  );
}

/** The URL the admin HTTP advertises: the configured one, or the bound one (a wildcard bind under this host's name). */
export function advertisedUrl(admin: ResolvedAdminOptions, bound: string): string {
  if (admin.url) return admin.url;
  if (admin.host !== '0.0.0.0' && admin.host !== '::') return bound;
  const port = new URL(bound.replace(/\[.*\]/, 'localhost')).port;
  return `http://${hostname()}:${port}`;
}
