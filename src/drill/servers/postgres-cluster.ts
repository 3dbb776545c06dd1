/**
 * A throwaway PostgreSQL cluster for fault tests: initdb into a scratch directory, run `postgres` on
 * a free loopback port, create a database and migrate it. Tests may stop, kill -9, pause and restart
 * it without touching the machine's shared server.
 *
 * initdb and postgres refuse to run as root. As root we hand the directory to the `postgres` user,
 * run initdb with that uid/gid, and start the server through `setpriv`, which changes user and then
 * exec()s postgres, so the pid that ServerProcess signals is the postmaster itself.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chownSync, existsSync, readdirSync, readlinkSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { freePort } from './free-port.js';
import { ServerProcess, removeDir, scratchDir, type ServerSpec } from './server-process.js';
import { migrateDatabase } from '../../db/migrate.js';
import { DrillError } from '../../errors.js';

const run = promisify(execFile);

export interface PostgresCluster {
  /** URL of the migrated `cronwarden` database. */
  url: string;
  port: number;
  server: PostgresServerProcess;
  cleanup(): Promise<void>;
}

/** Where initdb and postgres live: on PATH, else the newest /usr/lib/postgresql/<v>/bin. */
export function binary(name: 'initdb' | 'postgres' | 'pg_basebackup' | 'pg_waldump'): string {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && existsSync(join(dir, name))) return join(dir, name);
  }
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) {
    const path = join(root, v, 'bin', name);
    if (existsSync(path)) return path;
  }
  throw new DrillError(`cannot find the PostgreSQL "${name}" binary on PATH or under ${root}/*/bin`);
}

export function postgresUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
  return { uid: id('-u'), gid: id('-g') };
}

/**
 * ServerProcess with PostgreSQL specifics. pause()/resume() signal every process of the cluster:
 * each connection is served by its own backend process, so stopping only the postmaster would
 * leave open connections working. stop() asks for a FAST shutdown (SIGINT): the default SIGTERM is
 * a "smart" shutdown that waits for every client to disconnect. kill() waits until the orphaned
 * backends of the killed postmaster are gone, because a new postmaster refuses to start while they
 * still hold the old shared memory.
 */
export class PostgresServerProcess extends ServerProcess {
  readonly dataDir: string;

  constructor(spec: ServerSpec, dir: string, dataDir: string) {
    super(spec, dir);
    this.dataDir = realpathSync(dataDir);
  }

  override pause(): void {
    super.pause(); // the postmaster first, so it cannot fork a backend we would miss
    this.signalAll('SIGSTOP');
  }

  override resume(): void {
    this.signalAll('SIGCONT');
    super.resume();
  }

  override async stop(): Promise<void> {
    if (this.running) {
      this.signalAll('SIGCONT');
      this.child!.kill('SIGINT');
    }
    await super.stop();
  }

  override async kill(): Promise<void> {
    this.signalAll('SIGCONT'); // orphaned backends must run to notice the postmaster died
    await super.kill();
    const deadline = performance.now() + 10_000;
    while (processesOf(this.dataDir).length > 0) {
      if (performance.now() > deadline)
        throw new DrillError(`processes of ${this.dataDir} still running 10 s after kill -9`);
      this.signalAll('SIGCONT');
      await sleep(20);
    }
  }

  /** The postmaster and every backend and helper process of this server. */
  pids(): number[] {
    return processesOf(this.dataDir);
  }

  private signalAll(signal: NodeJS.Signals): void {
    for (const pid of processesOf(this.dataDir)) {
      try {
        process.kill(pid, signal);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err; // ESRCH: it exited meanwhile
      }
    }
  }
}

/** The postmaster and its backends and helpers: postgres chdirs into the data directory. */
function processesOf(dataDir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readlinkSync(`/proc/${entry}/cwd`) === dataDir) pids.push(Number(entry));
    } catch {
      // The process exited while we looked: it is not one of ours any more.
    }
  }
  return pids;
}

export async function canQuery(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
  client.on('error', () => {}); // the connect/query rejection below is what we report
  try {
    await client.connect();
    await client.query('SELECT 1');
  } finally {
    await client.end().catch(() => {});
  }
}

/** How to run `postgres` on `dataDir` and `port` (as the postgres user when we are root). */
export function postgresSpec(o: {
  label: string;
  dir: string;
  dataDir: string;
  port: number;
  /** fsync and full-page writes on, as a production server has them (benchmarks of WAL and commits). */
  durable?: boolean;
}): ServerSpec {
  const user = postgresUser();
  const durability = o.durable ? [] : ['-c', 'fsync=off', '-c', 'full_page_writes=off'];
  const postgresArgs = [
    '-D',
    o.dataDir,
    '-p',
    String(o.port),
    '-k',
    o.dir,
    '-c',
    'listen_addresses=127.0.0.1',
    // Without `durable`: fsync off survives kill -9 of the server (the OS keeps the writes), not a power cut.
    ...durability,
    '-c',
    'shared_buffers=16MB',
    '-c',
    'max_connections=60',
  ];
  const ready = () => canQuery(`postgres://postgres@127.0.0.1:${o.port}/postgres`);
  return user
    ? {
        label: o.label,
        command: 'setpriv',
        args: [`--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups', binary('postgres'), ...postgresArgs],
        ready,
      }
    : { label: o.label, command: binary('postgres'), args: postgresArgs, ready };
}

export async function startPostgresCluster(options: { durable?: boolean } = {}): Promise<PostgresCluster> {
  const dir = scratchDir('pg');
  const dataDir = join(dir, 'data');
  const user = postgresUser();
  let server: PostgresServerProcess | undefined;
  try {
    if (user) chownSync(dir, user.uid, user.gid);
    await run(
      binary('initdb'),
      ['-D', dataDir, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--locale=C', '--no-sync'],
      {
        ...(user ?? {}),
        cwd: dir,
      },
    );
    const port = await freePort();
    const base = `postgres://postgres@127.0.0.1:${port}`;
    server = new PostgresServerProcess(
      postgresSpec({ label: 'postgres', dir, dataDir, port, durable: options.durable }),
      dir,
      dataDir,
    );
    await server.start();
    const admin = new pg.Client({ connectionString: `${base}/postgres` });
    await admin.connect();
    try {
      await admin.query('CREATE DATABASE cronwarden');
    } finally {
      await admin.end();
    }
    const url = `${base}/cronwarden`;
    await migrateDatabase(url);
    const started = server;
    return {
      url,
      port,
      server: started,
      async cleanup() {
        await started.stop();
        removeDir(dir);
      },
    };
  } catch (err) {
    await server?.kill();
    removeDir(dir);
    throw err;
  }
}
