/**
 * The drill's replica processes (`cronwarden start` with the drill workload), one per slot, each
 * reaching the lease backend through its slot's own link; and what the lease backend says about
 * who leads.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LeaseBackend } from '../locks/lease.js';
import type { ReplicaLink } from './replica-link.js';
import type { SkewedClocks } from './skewed-clock.js';

export interface Proc {
  id: string;
  slot: number;
  child: ChildProcess;
  exited: Promise<void>;
}

export interface FleetOptions {
  ledgerUrl: string;
  witnessUrl: string;
  queueUrl: string;
  namespace: string;
  ttlMs: number;
  jobs: number;
  /** Sharded leadership: each replica runs with --shards this many (1: one leader). */
  shards: number;
  /** The workflow workload too (drill --workflows). */
  workflows?: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class ReplicaFleet {
  readonly procs = new Map<string, Proc>();
  /** Replicas that exited without being struck or stopped by the drill: a finding, not noise (each is replaced, so the drill goes on with a full fleet). */
  readonly unexpectedExits: string[] = [];
  private generation = 0;
  private readonly struck = new Set<string>();
  /** Replicas frozen by SIGSTOP right now. */
  private readonly stopped = new Set<string>();
  private stopping = false;

  /** `leaseName`: the lease whose holder is "the leader" that leader faults strike (shard 0's when sharded). */
  constructor(
    private readonly o: FleetOptions,
    private readonly links: ReplicaLink[],
    private readonly clocks: SkewedClocks | undefined,
    private readonly observer: LeaseBackend,
    readonly leaseName: string,
  ) {}

  spawn(slot: number): Proc {
    const id = `r${slot}.${this.generation++}`;
    // CRONWARDEN_DRILL_LOG_DIR: each replica's JSON log (at CRONWARDEN_LOG_LEVEL, info by default)
    // goes to <dir>/<id>.log, for timing a fault from the replicas' side.
    const logDir = process.env.CRONWARDEN_DRILL_LOG_DIR;
    const stdout = logDir ? openSync(join(logDir, `${id}.log`), 'a') : 'ignore';
    const child = spawn(process.execPath, [...cliArgs(), 'start', '--jobs', workloadPath()], {
      env: this.env(slot, id, logDir !== undefined),
      stdio: ['ignore', stdout, 'inherit'],
    });
    if (typeof stdout === 'number') closeSync(stdout); // the child holds its own copy
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    const proc = { id, slot, child, exited };
    this.procs.set(id, proc);
    void exited.then(() => {
      this.procs.delete(id);
      if (this.stopping || this.struck.has(id)) return;
      this.unexpectedExits.push(`${id} (exit ${child.exitCode ?? child.signalCode})`);
      this.spawn(slot);
    });
    return proc;
  }

  private env(slot: number, id: string, logged: boolean): NodeJS.ProcessEnv {
    const backend = this.links[slot]!.config;
    const o = this.o;
    return {
      ...process.env,
      ...this.clocks?.env(slot),
      CRONWARDEN_BACKEND: backend.kind,
      ...(backend.kind === 'etcd'
        ? { CRONWARDEN_ETCD_ENDPOINTS: backend.endpoints.join(',') }
        : { CRONWARDEN_BACKEND_URL: (backend as { url: string }).url }),
      CRONWARDEN_DATABASE_URL: o.ledgerUrl,
      CRONWARDEN_DRILL_ATTEMPT_LOG_URL: o.witnessUrl,
      CRONWARDEN_REDIS_URL: o.queueUrl,
      CRONWARDEN_REPLICA_ID: id,
      CRONWARDEN_NAMESPACE: o.namespace,
      // Every ledger the drill makes is migrated into the default schema (drill.ts DRILL_SCHEMA).
      CRONWARDEN_SCHEMA: 'cronwarden',
      CRONWARDEN_LEASE_TTL_MS: String(o.ttlMs),
      CRONWARDEN_SHUTDOWN_GRACE_MS: '2000',
      // Shorter than a SIGSTOP (2 TTLs), so a frozen worker's run is re-delivered meanwhile.
      CRONWARDEN_WORKER_LOCK_MS: String(Math.max(1000, o.ttlMs)),
      CRONWARDEN_LOG_LEVEL: logged ? (process.env.CRONWARDEN_LOG_LEVEL ?? 'info') : 'error',
      ...(logged ? { CRONWARDEN_LOG_FORMAT: 'json' } : {}),
      CRONWARDEN_DRILL_JOBS: String(o.jobs),
      CRONWARDEN_DRILL_WORKFLOWS: o.workflows ? '1' : '0',
      // Always set, so a CRONWARDEN_SHARDS in the drill's own environment cannot leak into it.
      CRONWARDEN_SHARDS: String(o.shards),
      CRONWARDEN_ADMIN_PORT: '0', // several replicas on one machine: any free port each
    };
  }

  /** Signal a replica on purpose (its exit is then expected); kill and term start a replacement. */
  strike(p: Proc, signal: 'SIGKILL' | 'SIGTERM'): void {
    this.struck.add(p.id);
    p.child.kill(signal);
    void p.exited.then(() => this.spawn(p.slot));
  }

  /** SIGSTOP (frozen: not live until resumed) or SIGCONT a replica. */
  freeze(p: Proc, frozen: boolean): void {
    if (frozen) this.stopped.add(p.id);
    p.child.kill(frozen ? 'SIGSTOP' : 'SIGCONT');
    if (!frozen) this.stopped.delete(p.id);
  }

  /** Replicas running and neither struck (killed, or shutting down) nor frozen. */
  liveIds(): string[] {
    return [...this.procs.keys()].filter((id) => !this.struck.has(id) && !this.stopped.has(id));
  }

  /** The live replica holding the lease, with the lease token it holds. */
  async leader(): Promise<{ proc: Proc | undefined; token: bigint | undefined }> {
    const rec = await this.observer.current(this.leaseName).catch(() => null);
    const proc = rec ? this.procs.get(rec.holder) : undefined;
    return { proc, token: proc ? rec!.token : undefined };
  }

  /** Poll the backend from now on until a live replica other than `previous` holds the lease (up to 30 s). */
  watchHandover(previous: string | undefined): { result(): Promise<number | null> } {
    const start = Date.now();
    let stop = false;
    const done = (async () => {
      while (!stop && Date.now() - start < 30_000) {
        const rec = await this.observer.current(this.leaseName).catch(() => null);
        if (rec && rec.holder !== previous && this.procs.has(rec.holder)) return Date.now() - start;
        await sleep(10);
      }
      return null;
    })();
    return {
      // Waits at most a second more: a handover not seen by then is reported as none.
      result: async () => {
        const r = await Promise.race([done, sleep(1000).then(() => undefined)]);
        stop = true;
        return r === undefined ? null : r;
      },
    };
  }

  /** SIGTERM every replica (SIGCONT first: a stopped one cannot act on it), SIGKILL what remains after 10 s. */
  async stopAll(): Promise<void> {
    this.stopping = true;
    for (const p of this.procs.values()) {
      p.child.kill('SIGCONT');
      p.child.kill('SIGTERM');
    }
    await Promise.race([Promise.all([...this.procs.values()].map((p) => p.exited)), sleep(10_000)]);
    for (const p of this.procs.values()) p.child.kill('SIGKILL');
  }
}

/**
 * The CLI and the workload module: compiled (dist) or source (through tsx), like this file. From
 * source the CLI is the source too, not bin/cronwarden.js, which runs dist/ whenever it is built
 * (after an `npm run build`) and would then be handed a workload it cannot import.
 */
function cliArgs(): string[] {
  if (fileURLToPath(import.meta.url).endsWith('.ts'))
    return ['--import', import.meta.resolve('tsx'), fileURLToPath(new URL('../cli/main.ts', import.meta.url))];
  return [fileURLToPath(new URL('../../bin/cronwarden.js', import.meta.url))];
}

function workloadPath(): string {
  const here = fileURLToPath(import.meta.url);
  return here.replace(/fleet\.(ts|js)$/, (_m, ext: string) => `workload.${ext}`);
}
