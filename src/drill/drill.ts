/**
 * The failover drill: N real replica processes (`cronwarden start`) against a lease backend the
 * drill starts itself (so it can restart it), a workload of jobs due every second, and a seeded
 * schedule of faults. Afterwards the checker reads the ledger, the effect table and the attempt log
 * and checks DESIGN.md's invariants. A fault counts only if fires were flowing before it and a fire
 * committed after it (as in etcd's robustness tests: a run that proves nothing fails); for a fault
 * that must move leadership (kill, stop, term, link-cut) that fire must come from the new tenure,
 * a leader token higher than the struck leader's: a cut-off leader keeps committing through its
 * intact ledger link until its own deadline, and its fires prove nothing about failover.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { randomUUID } from 'node:crypto';
import { memberAdminUrl } from '../ledger/admin-reads.js';
import { tablesIn } from '../db/tables.js';
import { createLeaseBackend, type BackendConfig } from '../locks/create-backend.js';
import type { LeaseBackend } from '../locks/lease.js';
import * as ledgerHistory from '../ledger/history-reads.js';
import { checkHistory, countWindow, readHistory, type CheckReport, type WindowCounts } from './checker.js';
import { ATTEMPT_LOG_DDL, ATTEMPT_LOG_TABLE } from './attempt-log.js';
import { faultSchedule, judgeFault, movesLeader, seededRandom, type FaultKind } from './faults.js';
import { LeaderTimeline } from './leader-timeline.js';
import { ReplicaLink } from './replica-link.js';
import { SkewedClocks } from './skewed-clock.js';
import { createScratchDatabase } from './servers/scratch-database.js';
import { startEtcdCluster } from './servers/etcd-server.js';
import { startPostgresCluster } from './servers/postgres-cluster.js';
import { startRedis } from './servers/redis-server.js';
import { DrillError } from '../errors.js';

export interface DrillOptions {
  backend: 'etcd' | 'redis' | 'postgres';
  replicas: number;
  jobs: number;
  faults: FaultKind[];
  /** Total faults to strike (each chosen kind at least once). */
  faultCount: number;
  /** Seconds between the end of one fault and the next. */
  intervalSeconds: number;
  ttlMs: number;
  seed: number;
  /** link-slow: one-way delay ± jitter on the leader's link. Default 75 ± 50 ms. */
  slowLink?: { delayMs: number; jitterMs: number };
  /** link-lossy: share of segments lost (each costs a 200 ms RTO, doubling). Default 0.05. */
  lossRate?: number;
  /** Server for the ledger; the drill creates and drops its own database there. */
  databaseUrl: string;
  redisUrl: string;
  log?: (line: string) => void;
}

export interface FaultRecord {
  kind: FaultKind;
  at: string;
  leaderBefore: string | null;
  /** Lease token of leaderBefore (a decimal string: JSON has no bigint). */
  tokenBefore: string | null;
  leaderAfter: string | null;
  /**
   * For kill, stop, term and link-cut: from the strike to the first fire committed under a leader
   * token higher than tokenBefore (the new tenure). For the other faults: from the strike to the
   * first fire committed after it. Null: no such fire within 30 s.
   */
  gapMs: number | null;
  /** From the strike to the first fire committed after it under any token (the old leader's included). */
  anyFireMs: number | null;
  /** From the strike until the backend names a different, live leader (null: it did not change). */
  handoverMs: number | null;
  /** I5's bound for this fault, if it has one; gapMs and handoverMs are both held to it. */
  boundMs: number | null;
  /** Changes of leader from the strike until the next fault (a flap where none should be). */
  leaderChanges: number;
  /** What exactly struck: a signal, a link condition, a clock offset. */
  detail: string;
  /** Fires flowed before it, a leader was struck, and a fire (of the new tenure, where leadership must move) committed after it. */
  counted: boolean;
  /** Scheduled times from this strike until the next one (or the end of the window). */
  fires?: WindowCounts & { staleRefused: number };
}

export interface DrillReport {
  options: Omit<DrillOptions, 'log' | 'databaseUrl' | 'redisUrl'>;
  window: { from: string; to: string };
  faults: FaultRecord[];
  check: CheckReport;
  /** From the ledger: attempts recorded 'stale', or 'skipped' after a newer attempt completed the run. */
  staleAttemptsRefused: number;
  /** From the independent attempt log: 'refused' rows plus stale 'skipped' rows (check.staleWritesRefused). */
  staleWritesRefused: number;
  violations: string[];
  ok: boolean;
}

interface Proc {
  id: string;
  slot: number;
  child: ChildProcess;
  exited: Promise<void>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runDrill(o: DrillOptions): Promise<DrillReport> {
  const log = o.log ?? (() => {});
  const random = seededRandom(o.seed);
  const schedule = faultSchedule(o.faults, o.faultCount, random);
  // Separate seeded streams: proxies draw per chunk (as many times as traffic happens to need),
  // which must not shift the fault parameters a replay draws.
  const faultRandom = seededRandom(o.seed + 1);
  // Before anything is started, so a missing libfaketime leaves nothing behind.
  const clocks = schedule.includes('clock-skew') ? SkewedClocks.create() : undefined;
  const scratch = await createScratchDatabase(o.databaseUrl, { prefix: 'cronwarden_drill' });
  const ledgerUrl = scratch.url;
  const pool = scratch.pool;
  const tables = tablesIn(scratch.schema);
  await pool.query('CREATE TABLE cw_drill_effects (run_id bigint NOT NULL, job text NOT NULL, scheduled_at timestamptz NOT NULL, token bigint NOT NULL, replica text NOT NULL)');
  await pool.query(ATTEMPT_LOG_DDL);

  const servers = await startBackend(o.backend);
  const observer = await createLeaseBackend(servers.config);
  const namespace = `drill-${o.seed}-${randomUUID().slice(0, 6)}`;
  const leaseName = `cronwarden/${namespace}/scheduler`;
  const procs = new Map<string, Proc>();
  // Each replica slot reaches the backend through its own proxies, so one link can fail alone.
  const links: ReplicaLink[] = [];
  for (let slot = 0; slot < o.replicas; slot++) links.push(await ReplicaLink.open(servers.config, seededRandom(o.seed + 100 + slot)));
  let generation = 0;
  const spawnReplica = (slot: number) => {
    const id = `r${slot}.${generation++}`;
    const backend = links[slot]!.config;
    const child = spawn(process.execPath, [cliPath(), 'start', '--jobs', workloadPath()], {
      env: {
        ...process.env,
        ...clocks?.env(slot),
        CRONWARDEN_BACKEND: backend.kind,
        ...(backend.kind === 'etcd' ? { CRONWARDEN_ETCD_ENDPOINTS: backend.endpoints.join(',') } : { CRONWARDEN_BACKEND_URL: (backend as { url: string }).url }),
        CRONWARDEN_DATABASE_URL: ledgerUrl,
        CRONWARDEN_REDIS_URL: o.redisUrl,
        CRONWARDEN_REPLICA_ID: id,
        CRONWARDEN_NAMESPACE: namespace,
        CRONWARDEN_SCHEMA: scratch.schema,
        CRONWARDEN_LEASE_TTL_MS: String(o.ttlMs),
        CRONWARDEN_SHUTDOWN_GRACE_MS: '2000',
        // Shorter than a SIGSTOP (2 TTLs), so a frozen worker's run is re-delivered meanwhile.
        CRONWARDEN_WORKER_LOCK_MS: String(Math.max(1000, o.ttlMs)),
        CRONWARDEN_LOG_LEVEL: 'error',
        CRONWARDEN_DRILL_JOBS: String(o.jobs),
        CRONWARDEN_ADMIN_PORT: '0', // several replicas on one machine: any free port each
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    procs.set(id, { id, slot, child, exited });
    void exited.then(() => procs.delete(id));
  };
  const leader = async (): Promise<Proc | undefined> => (await leaderRecord()).proc;
  /** The live replica holding the lease, with the lease token it holds. */
  const leaderRecord = async (): Promise<{ proc: Proc | undefined; token: bigint | undefined }> => {
    const rec = await observer.current(leaseName).catch(() => null);
    const proc = rec ? procs.get(rec.holder) : undefined;
    return { proc, token: proc ? rec!.token : undefined };
  };
  const lastCommit = () => ledgerHistory.lastCommitAt(pool, tables);
  /** First fire committed after t (under a leader token above `aboveToken`, if given), polled for up to timeoutMs. */
  const firstCommitAfter = async (t: number, timeoutMs: number, aboveToken?: bigint): Promise<number | null> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const first = await ledgerHistory.firstCommitAfter(pool, tables, new Date(t), aboveToken);
      if (first !== null) return first;
      if (Date.now() >= deadline) return null;
      await sleep(50);
    }
  };

  /** Poll the backend from now on until a live replica other than `previous` holds the lease. */
  const watchHandover = (previous: string | undefined) => {
    const start = Date.now();
    let stop = false;
    const done = (async () => {
      while (!stop && Date.now() - start < 30_000) {
        const rec = await observer.current(leaseName).catch(() => null);
        if (rec && rec.holder !== previous && procs.has(rec.holder)) return Date.now() - start;
        await sleep(10);
      }
      return null;
    })();
    return {
      result: async () => {
        const r = await Promise.race([done, sleep(1000).then(() => undefined)]);
        stop = true;
        return r === undefined ? null : r;
      },
    };
  };

  const hostOffsetSeconds = async (replicaId: string): Promise<number | undefined> => {
    const url = await memberAdminUrl(pool, tables, replicaId);
    if (!url) return undefined;
    const text = await (await fetch(`${url}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith('cronwarden_host_clock_offset_seconds'));
    return line === undefined ? undefined : Number(line.split(' ').at(-1));
  };
  const faults: FaultRecord[] = [];
  const violations: string[] = [];
  let from = new Date();
  let to = new Date();
  const timeline = new LeaderTimeline(observer, leaseName);
  try {
    for (let i = 0; i < o.replicas; i++) spawnReplica(i);
    const warm = await firstCommitAfter(0, 60_000);
    if (warm === null) throw new DrillError('no fire committed within 60 s of starting the replicas');
    from = new Date(Math.ceil((warm + 2000) / 1000) * 1000);
    await sleep(o.intervalSeconds * 1000);
    for (const kind of schedule) {
      const { proc: before, token: tokenBefore } = await leaderRecord();
      const flowing = Date.now() - (await lastCommit()) < 3000;
      const at = Date.now();
      log(`fault ${faults.length + 1}/${schedule.length}: ${kind} (leader ${before?.id ?? 'unknown'})`);
      const handover = watchHandover(before?.id);
      const detail = await strike(kind, { leader: before, o, servers, spawnReplica, links, clocks, random: faultRandom, hostOffsetSeconds });
      // Where leadership must move, only a fire of the new tenure (a higher leader token) ends the
      // gap: the old leader may go on committing until its own deadline (link-cut: its ledger link
      // is intact), which proves nothing about failover.
      const mustMove = movesLeader.has(kind) && tokenBefore !== undefined;
      const newTenureFire = mustMove ? await firstCommitAfter(at, 30_000, tokenBefore) : null;
      const anyFire = await firstCommitAfter(at, mustMove ? 0 : 30_000);
      const handoverMs = await handover.result();
      const after = await leader();
      await sleep(o.intervalSeconds * 1000);
      const leaderChanges = timeline.changesBetween(at, Date.now());
      const when = new Date(at).toISOString();
      const judged = judgeFault({
        kind,
        ttlMs: o.ttlMs,
        strikeAt: at,
        flowing,
        leaderBefore: before && tokenBefore !== undefined ? { id: before.id, token: tokenBefore } : null,
        firstFireAt: anyFire,
        firstNewTenureFireAt: newTenureFire,
        handoverMs,
        leaderChanges,
        detail,
      });
      const { gapMs, boundMs, counted } = judged;
      const anyFireMs = anyFire === null ? null : anyFire - at;
      faults.push({
        kind,
        at: when,
        leaderBefore: before?.id ?? null,
        tokenBefore: tokenBefore?.toString() ?? null,
        leaderAfter: after?.id ?? null,
        gapMs,
        anyFireMs,
        handoverMs,
        boundMs,
        leaderChanges,
        detail,
        counted,
      });
      violations.push(...judged.violations);
      log(
        `  ${detail}: ${movesLeader.has(kind) ? `new leader's first fire after ${gapMs ?? 'none'} ms (any fire after ${anyFireMs ?? 'none'} ms)` : `next fire after ${gapMs ?? 'none'} ms`}; ` +
          `leader now ${after?.id ?? 'unknown'}; ${leaderChanges} leader change(s)`,
      );
    }
    to = new Date(Math.floor((Date.now() - 3000) / 1000) * 1000);
    // Let every run of the window finish (re-deliveries of killed workers included) before checking.
    const drainDeadline = Date.now() + 60_000;
    while (Date.now() < drainDeadline) {
      if ((await ledgerHistory.uncompletedRunsIn(pool, tables, from, to)) === 0) break;
      await sleep(500);
    }
  } finally {
    await timeline.stop();
    for (const p of procs.values()) {
      p.child.kill('SIGCONT');
      p.child.kill('SIGTERM');
    }
    await Promise.race([Promise.all([...procs.values()].map((p) => p.exited)), sleep(10_000)]);
    for (const p of procs.values()) p.child.kill('SIGKILL');
    await observer.close().catch(() => {});
    await Promise.all(links.map((l) => l.close()));
    clocks?.cleanup();
    await servers.cleanup();
  }

  const expectedTimes: number[] = [];
  for (let t = from.getTime(); t <= to.getTime(); t += 1000) expectedTimes.push(t);
  const expected = new Map(Array.from({ length: o.jobs }, (_, i) => [`drill-${i}`, expectedTimes] as [string, number[]]));
  const history = await readHistory(pool, { from, to, effectsTable: 'cw_drill_effects', attemptLogTable: ATTEMPT_LOG_TABLE, schema: scratch.schema });
  const check = checkHistory(history, { expected, requireCompleted: true });
  const staleTimes = await ledgerHistory.staleAttemptTimes(pool, tables);
  await scratch.drop();
  faults.forEach((f, i) => {
    const start = Date.parse(f.at);
    const end = i + 1 < faults.length ? Date.parse(faults[i + 1]!.at) : to.getTime() + 1;
    const staleRefused = staleTimes.filter((t) => t >= start && t < end).length;
    f.fires = { ...countWindow(history, { expected }, start, end), staleRefused };
  });
  for (const v of check.violations) violations.push(`${v.invariant}: ${v.message}`);
  const { log: _log, databaseUrl: _db, redisUrl: _redis, ...options } = o;
  return {
    options,
    window: { from: from.toISOString(), to: to.toISOString() },
    faults,
    check,
    staleAttemptsRefused: staleTimes.length,
    staleWritesRefused: check.staleWritesRefused,
    violations,
    ok: violations.length === 0 && check.ok,
  };
}

interface Servers {
  config: BackendConfig;
  restart(all: boolean): Promise<void>;
  cleanup(): Promise<void>;
}

async function startBackend(kind: DrillOptions['backend']): Promise<Servers> {
  switch (kind) {
    case 'redis': {
      const r = await startRedis();
      return { config: { kind: 'redis', url: r.url }, restart: () => r.server.restart('kill'), cleanup: () => r.cleanup() };
    }
    case 'postgres': {
      const p = await startPostgresCluster();
      return { config: { kind: 'postgres', url: p.url }, restart: () => p.server.restart('kill'), cleanup: () => p.cleanup() };
    }
    case 'etcd': {
      const e = await startEtcdCluster(3);
      let next = 0;
      return {
        config: { kind: 'etcd', endpoints: e.endpoints },
        restart: async (all) => {
          if (all) {
            await Promise.all(e.members.map((m) => m.kill()));
            await Promise.all(e.members.map((m) => m.start()));
          } else {
            await e.members[next++ % e.members.length]!.restart('kill');
          }
        },
        cleanup: () => e.cleanup(),
      };
    }
  }
}

interface StrikeContext {
  leader: Proc | undefined;
  o: DrillOptions;
  servers: Servers;
  spawnReplica: (slot: number) => void;
  links: ReplicaLink[];
  clocks: SkewedClocks | undefined;
  random: () => number;
  /** The replica's own reading of its host clock against the ledger's, from its /metrics. */
  hostOffsetSeconds: (replicaId: string) => Promise<number | undefined>;
}

/** Strike one fault and return what exactly struck (for the report). */
async function strike(kind: FaultKind, c: StrikeContext): Promise<string> {
  const { leader, o } = c;
  const replace = async (p: Proc) => {
    await p.exited;
    c.spawnReplica(p.slot);
  };
  const hold = Math.max(3 * o.ttlMs, 5000);
  if (!leader && kind !== 'backend-restart' && kind !== 'backend-restart-all') return 'no leader to strike';
  switch (kind) {
    case 'kill':
      leader!.child.kill('SIGKILL');
      void replace(leader!);
      return `SIGKILL ${leader!.id}`;
    case 'term':
      leader!.child.kill('SIGTERM');
      void replace(leader!);
      return `SIGTERM ${leader!.id}`;
    case 'stop':
      leader!.child.kill('SIGSTOP');
      await sleep(o.ttlMs * 2);
      leader!.child.kill('SIGCONT');
      return `SIGSTOP ${leader!.id} for ${o.ttlMs * 2} ms`;
    case 'backend-restart':
      await c.servers.restart(false);
      return o.backend === 'etcd' ? 'kill -9 and restart of one etcd member' : `kill -9 and restart of ${o.backend}`;
    case 'backend-restart-all':
      if (o.backend !== 'etcd') {
        await c.servers.restart(false);
        return `kill -9 and restart of ${o.backend}`;
      }
      await c.servers.restart(true);
      return 'kill -9 and restart of every etcd member';
    case 'link-cut': {
      const link = c.links[leader!.slot]!;
      link.partition();
      await sleep(o.ttlMs * 2);
      link.heal();
      return `partition ${leader!.id} <-> ${o.backend} for ${o.ttlMs * 2} ms`;
    }
    case 'link-slow': {
      const link = c.links[leader!.slot]!;
      const { delayMs, jitterMs } = o.slowLink ?? { delayMs: 75, jitterMs: 50 };
      link.degrade({ delayMs, jitterMs });
      await sleep(hold);
      link.heal();
      return `${delayMs} ± ${jitterMs} ms each way on ${leader!.id}'s link for ${hold} ms`;
    }
    case 'link-lossy': {
      const link = c.links[leader!.slot]!;
      const lossRate = o.lossRate ?? 0.05;
      link.degrade({ delayMs: 20, jitterMs: 10, lossRate, retransmitMs: 200 });
      await sleep(hold);
      link.heal();
      return `${Math.round(lossRate * 100)}% of segments lost (200 ms RTO) on ${leader!.id}'s link for ${hold} ms`;
    }
    case 'clock-skew': {
      const clocks = c.clocks!;
      const ahead = 2 + Math.floor(c.random() * 9);
      const behind = 2 + Math.floor(c.random() * 9);
      const measured: string[] = [];
      for (const minutes of [ahead, -behind]) {
        clocks.set(leader!.slot, minutes * 60);
        const struck = Date.now();
        // Proof that the skew struck: the replica itself reads its wall clock that far off
        // (libfaketime picks a new offset up within a second or two).
        let offset: number | undefined;
        while (Date.now() - struck < 6000) {
          offset = await c.hostOffsetSeconds(leader!.id).catch(() => undefined);
          if (offset !== undefined && Math.abs(offset - minutes * 60) < 5) break;
          await sleep(200);
        }
        if (offset === undefined || Math.abs(offset - minutes * 60) >= 5) {
          clocks.set(leader!.slot, 0);
          throw new DrillError(`clock-skew did not take effect on ${leader!.id}: it reads its clock ${offset ?? 'unknown'} s off, not ${minutes * 60} s`);
        }
        measured.push(`${offset >= 0 ? '+' : ''}${offset.toFixed(1)} s`);
        await sleep(Math.max(0, hold - (Date.now() - struck)));
      }
      clocks.set(leader!.slot, 0);
      await sleep(2500);
      return `${leader!.id}'s wall clock +${ahead} min, then -${behind} min, ${hold} ms each (it read ${measured.join(', then ')})`;
    }
  }
}

/** The CLI and the workload module: compiled (dist) or source (through tsx), like this file. */
function cliPath(): string {
  return fileURLToPath(new URL('../../bin/cronwarden.js', import.meta.url));
}

function workloadPath(): string {
  const here = fileURLToPath(import.meta.url);
  return here.replace(/drill\.(ts|js)$/, (_m, ext: string) => `workload.${ext}`);
}
