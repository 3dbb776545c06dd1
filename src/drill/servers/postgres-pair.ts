/**
 * A throwaway PostgreSQL primary with a streaming standby made by `pg_basebackup`, for the drill's
 * ledger-failover fault: kill -9 the primary, promote the standby, build a new standby from it.
 *
 * Synchronous (the default): the primary names the standby in `synchronous_standby_names`, so a
 * COMMIT returns only once the standby has the WAL; a promoted standby then holds every commit any
 * client saw succeed. Asynchronous (`synchronous: false`): commits return at once, and a standby
 * that lags when the primary dies loses them on promotion: the assumption broken on purpose.
 */
import { execFile } from 'node:child_process';
import { appendFileSync, chownSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { DrillError } from '../../errors.js';
import { freePort } from './free-port.js';
import { PostgresServerProcess, binary, postgresSpec, postgresUser, startPostgresCluster } from './postgres-cluster.js';
import { removeDir, scratchDir } from './server-process.js';

const run = promisify(execFile);
const STANDBY_NAME = 'cw_standby';

export interface PostgresNode {
  port: number;
  server: PostgresServerProcess;
  dir: string;
}

/** What one failover did, with the instants (epoch ms) a gap is measured from. */
export interface PairFailover {
  detail: string;
  /** SIGKILL sent to the primary: the fault proper (the lag before it is the drill's set-up). */
  killedAt: number;
  /** pg_promote() returned: the standby accepts writes from here on. */
  promotedAt: number;
}

export interface PostgresPair {
  readonly primary: PostgresNode;
  readonly standby: PostgresNode;
  /** The `cronwarden` database on the current primary. */
  readonly url: string;
  /**
   * The `cronwarden` database on whichever of the pair's two ports is read-write: libpq's
   * multi-host URL with target_session_attrs=read-write. It stays true across failovers.
   */
  readonly multiHostUrl: string;
  /**
   * kill -9 the primary, promote the standby, build a new standby from the new primary and wait
   * until it streams (synchronously, unless the pair is asynchronous). Returns what happened.
   */
  failover(options?: { lagMs?: number }): Promise<PairFailover>;
  cleanup(): Promise<void>;
}

async function sql<T extends pg.QueryResultRow>(port: number, text: string): Promise<T[]> {
  const client = new pg.Client({
    connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`,
    connectionTimeoutMillis: 2000,
  });
  client.on('error', () => {}); // the query's rejection is what we report
  await client.connect();
  try {
    return (await client.query<T>(text)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * A standby of the primary on `primaryPort`: a base backup streamed into a fresh directory, then
 * started on `port` (a free one by default; after a failover, the dead primary's, so the pair keeps
 * the same two ports and one multi-host URL names it for good).
 */
async function startStandby(primaryPort: number, port?: number): Promise<PostgresNode> {
  const dir = scratchDir('pg-standby');
  const dataDir = join(dir, 'data');
  const user = postgresUser();
  if (user) chownSync(dir, user.uid, user.gid);
  mkdirSync(dataDir, { mode: 0o700 });
  if (user) chownSync(dataDir, user.uid, user.gid);
  const conninfo = `host=127.0.0.1 port=${primaryPort} user=postgres application_name=${STANDBY_NAME}`;
  await run(binary('pg_basebackup'), ['-d', conninfo, '-D', dataDir, '-X', 'stream', '-R', '--no-sync', '-c', 'fast'], {
    ...(user ?? {}),
    cwd: dir,
  });
  // -R wrote standby.signal and a primary_conninfo; this later line names the standby for the primary.
  appendFileSync(join(dataDir, 'postgresql.auto.conf'), `primary_conninfo = '${conninfo}'\n`);
  const listen = port ?? (await freePort());
  const server = new PostgresServerProcess(
    postgresSpec({ label: 'postgres-standby', dir, dataDir, port: listen }),
    dir,
    dataDir,
  );
  await server.start();
  return { port: listen, server, dir };
}

/** Wait until the primary streams to the standby in the wanted mode ('sync' or 'async'). */
async function waitForStreaming(primaryPort: number, mode: 'sync' | 'async'): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const rows = await sql<{ sync_state: string; state: string }>(
      primaryPort,
      `SELECT sync_state, state FROM pg_stat_replication WHERE application_name = '${STANDBY_NAME}'`,
    ).catch(() => []);
    if (rows.some((r) => r.state === 'streaming' && r.sync_state === mode)) return;
    if (Date.now() > deadline)
      throw new DrillError(
        `the standby of 127.0.0.1:${primaryPort} is not streaming (${mode}) after 30 s: ${JSON.stringify(rows)}`,
      );
    await sleep(100);
  }
}

async function setSynchronous(port: number, on: boolean): Promise<void> {
  await sql(port, `ALTER SYSTEM SET synchronous_standby_names = '${on ? STANDBY_NAME : ''}'`);
  await sql(port, 'SELECT pg_reload_conf()');
}

export async function startPostgresPair(options: { synchronous: boolean }): Promise<PostgresPair> {
  const first = await startPostgresCluster();
  const nodes: PostgresNode[] = [{ port: first.port, server: first.server, dir: first.server.dir }];
  const mode = options.synchronous ? 'sync' : 'async';
  try {
    nodes.push(await startStandby(first.port));
    await setSynchronous(first.port, options.synchronous);
    await waitForStreaming(first.port, mode);
  } catch (err) {
    for (const n of nodes) await n.server.kill();
    for (const n of nodes) removeDir(n.dir);
    throw err;
  }
  let primary = nodes[0]!;
  let standby = nodes[1]!;
  return {
    get primary() {
      return primary;
    },
    get standby() {
      return standby;
    },
    get url() {
      return `postgres://postgres@127.0.0.1:${primary.port}/cronwarden`;
    },
    multiHostUrl: `postgres://postgres@127.0.0.1:${nodes[0]!.port},127.0.0.1:${nodes[1]!.port}/cronwarden?target_session_attrs=read-write`,
    async failover(o = {}) {
      // Lag on purpose: the standby stops streaming (an empty primary_conninfo, reloaded), so for
      // lagMs an asynchronous primary commits what the standby never gets; a synchronous one
      // cannot commit meanwhile: its commits wait for the standby. (Stopping the standby's
      // process would not do: the kernel buffers the stream for it; ending the WAL sender neither:
      // the standby reconnects at once.)
      if (o.lagMs) {
        await sql(standby.port, "ALTER SYSTEM SET primary_conninfo = ''");
        await sql(standby.port, 'SELECT pg_reload_conf()');
        await sleep(o.lagMs);
      }
      const dead = primary;
      const promoted = standby;
      const killedAt = Date.now();
      await dead.server.kill();
      const goneAt = Date.now();
      // Promoted once the old primary's processes are all gone: promoted while its orphaned WAL
      // sender still streamed to the standby (no --ledger-lag-ms), the promotion stalled about 5 s
      // in 2 of 4 tries. Its directory is removed after: the drill's housekeeping is no part of
      // the outage the replicas see.
      await sql(promoted.port, 'SELECT pg_promote(true, 30)');
      const promotedAt = Date.now();
      // Until a new standby streams, a synchronous primary would wait for it on every commit.
      await setSynchronous(promoted.port, false);
      primary = promoted;
      removeDir(dead.dir);
      const started = Date.now();
      standby = await startStandby(primary.port, dead.port);
      await setSynchronous(primary.port, options.synchronous);
      await waitForStreaming(primary.port, mode);
      const cutOff = o.lagMs ? `, standby cut off ${o.lagMs} ms before the kill` : '';
      return {
        detail:
          `kill -9 of the ledger's primary, standby promoted (${mode}${cutOff}); primary's processes gone ${goneAt - killedAt} ms ` +
          `and standby promoted ${promotedAt - killedAt} ms after the kill; new standby streaming after ${Date.now() - started} ms`,
        killedAt,
        promotedAt,
      };
    },
    async cleanup() {
      for (const n of [primary, standby]) {
        await n.server.kill();
        removeDir(n.dir);
      }
    },
  };
}
