/**
 * Striking one fault. Each returns what exactly struck (for the report). What the guarantee rests
 * on, per fault on a server:
 * - queue-restart, queue-flush: BullMQ's Redis is a delivery channel, never the record: a run is
 *   committed in the ledger before it is enqueued, and its outcome is recorded there. Runs that the
 *   queue held when it lost them must be re-delivered by the ledger's sweeper; until that exists
 *   they stay pending, and the checker reports them (I6).
 * - ledger-restart: PostgreSQL's durability of a commit (the OS keeps the writes of a killed
 *   process); fires and completions are transactions, and a replica retries what failed.
 * - ledger-failover: synchronous replication: a commit returns only once the standby has it, so
 *   the promoted standby holds every fire and completion any replica saw commit. --ledger-async
 *   breaks it: the standby lags by --ledger-lag-ms and is promoted without the newest commits.
 * - redis-sentinel-failover: the fence. Redis replicates asynchronously, so the promoted replica
 *   may lack the newest lease and token; the ledger refuses fires under a leader token lower than
 *   one already committed. --sentinel-lag-ms widens the window in which the replica lags.
 * - cpu-starve: the lease's margins (renewal at TTL/5, the local deadline) against a host whose
 *   every core is busy: no guarantee is at stake, the handover and fire gaps are measured.
 */
import type { DrillOptions } from './drill-options.js';
import type { DrillEnvironment } from './environment.js';
import { CpuStarvation } from './cpu-starve.js';
import type { FaultKind } from './faults.js';
import type { Proc, ReplicaFleet } from './fleet.js';
import type { ReplicaLink } from './replica-link.js';
import type { SkewedClocks } from './skewed-clock.js';
import { DrillError } from '../errors.js';

export interface StrikeContext {
  leader: Proc | undefined;
  o: DrillOptions;
  env: DrillEnvironment;
  fleet: ReplicaFleet;
  links: ReplicaLink[];
  clocks: SkewedClocks | undefined;
  random: () => number;
  /** The replica's own reading of its host clock against the ledger's, from its /metrics. */
  hostOffsetSeconds: (replicaId: string) => Promise<number | undefined>;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Faults that need a leader to strike (the others strike a server or the host). */
const strikesLeader: ReadonlySet<FaultKind> = new Set([
  'kill',
  'term',
  'stop',
  'link-cut',
  'link-slow',
  'link-lossy',
  'clock-skew',
]);

/**
 * What struck, and when the fault proper struck if that is later than the strike began (epoch ms):
 * ledger-failover cuts the standby off first (set-up), then kills the primary (the fault); so does
 * redis-sentinel-failover (it first waits for its replica to be in sync).
 */
export interface Struck {
  detail: string;
  struckAt?: number;
}

/** How long a fault that holds a condition (a slow link, starved cores) holds it. */
export const holdMs = (ttlMs: number) => Math.max(3 * ttlMs, 5000);

export async function strike(kind: FaultKind, c: StrikeContext): Promise<Struck> {
  if (kind === 'ledger-failover') {
    const f = await c.env.ledger.failover!(c.o.ledgerLagMs ?? 1000);
    return { detail: f.detail, struckAt: f.killedAt };
  }
  if (kind === 'redis-sentinel-failover') {
    // The group first waits for its replica to be in sync (set-up); the kill is the fault proper.
    const before = await c.fleet.leader();
    const f = await c.env.lease.failover!(c.o.sentinelLagMs ?? 0);
    const after = await c.fleet.leader();
    return {
      detail: `${f.detail}; lease token ${before.token ?? '?'} before, ${after.token ?? '?'} after`,
      struckAt: f.killedAt,
    };
  }
  return { detail: await strikeOther(kind, c) };
}

async function strikeOther(
  kind: Exclude<FaultKind, 'ledger-failover' | 'redis-sentinel-failover'>,
  c: StrikeContext,
): Promise<string> {
  if (!c.leader && strikesLeader.has(kind)) return 'no leader to strike';
  switch (kind) {
    case 'kill':
    case 'term':
    case 'stop':
      return strikeLeaderProcess(kind, c.leader!, c);
    case 'link-cut':
    case 'link-slow':
    case 'link-lossy':
      return strikeLink(kind, c.leader!, c);
    case 'clock-skew':
      return strikeClock(c.leader!, c);
    case 'backend-restart':
    case 'backend-restart-all':
      return strikeLeaseServers(kind, c);
    case 'queue-restart':
    case 'queue-flush':
    case 'ledger-restart':
      return strikeDeliveryOrLedger(kind, c);
    case 'cpu-starve': {
      const starve = CpuStarvation.start();
      const hold = holdMs(c.o.ttlMs);
      await sleep(hold);
      await starve.stop();
      return `${starve.count} busy loops on the host for ${hold} ms`;
    }
  }
}

async function strikeLeaderProcess(kind: 'kill' | 'term' | 'stop', leader: Proc, c: StrikeContext): Promise<string> {
  if (kind === 'stop') {
    c.fleet.freeze(leader, true);
    await sleep(c.o.ttlMs * 2);
    c.fleet.freeze(leader, false);
    return `SIGSTOP ${leader.id} for ${c.o.ttlMs * 2} ms`;
  }
  const signal = kind === 'kill' ? 'SIGKILL' : 'SIGTERM';
  c.fleet.strike(leader, signal);
  return `${signal} ${leader.id}`;
}

async function strikeLink(
  kind: 'link-cut' | 'link-slow' | 'link-lossy',
  leader: Proc,
  c: StrikeContext,
): Promise<string> {
  const link = c.links[leader.slot]!;
  const { o } = c;
  const hold = holdMs(o.ttlMs);
  if (kind === 'link-cut') {
    link.partition();
    await sleep(o.ttlMs * 2);
    link.heal();
    return `partition ${leader.id} <-> ${o.backend} for ${o.ttlMs * 2} ms`;
  }
  if (kind === 'link-slow') {
    const { delayMs, jitterMs } = o.slowLink ?? { delayMs: 75, jitterMs: 50 };
    link.degrade({ delayMs, jitterMs });
    await sleep(hold);
    link.heal();
    return `${delayMs} ± ${jitterMs} ms each way on ${leader.id}'s link for ${hold} ms`;
  }
  const lossRate = o.lossRate ?? 0.05;
  link.degrade({ delayMs: 20, jitterMs: 10, lossRate, retransmitMs: 200 });
  await sleep(hold);
  link.heal();
  return `${Math.round(lossRate * 100)}% of segments lost (200 ms RTO) on ${leader.id}'s link for ${hold} ms`;
}

async function strikeClock(leader: Proc, c: StrikeContext): Promise<string> {
  const clocks = c.clocks!;
  const hold = holdMs(c.o.ttlMs);
  const ahead = 2 + Math.floor(c.random() * 9);
  const behind = 2 + Math.floor(c.random() * 9);
  const measured: string[] = [];
  for (const minutes of [ahead, -behind]) {
    clocks.set(leader.slot, minutes * 60);
    const struck = Date.now();
    // Proof that the skew struck: the replica itself reads its wall clock that far off
    // (libfaketime picks a new offset up within a second or two).
    let offset: number | undefined;
    while (Date.now() - struck < 6000) {
      offset = await c.hostOffsetSeconds(leader.id).catch(() => undefined);
      if (offset !== undefined && Math.abs(offset - minutes * 60) < 5) break;
      await sleep(200);
    }
    if (offset === undefined || Math.abs(offset - minutes * 60) >= 5) {
      clocks.set(leader.slot, 0);
      throw new DrillError(
        `clock-skew did not take effect on ${leader.id}: it reads its clock ${offset ?? 'unknown'} s off, not ${minutes * 60} s`,
      );
    }
    measured.push(`${offset >= 0 ? '+' : ''}${offset.toFixed(1)} s`);
    await sleep(Math.max(0, hold - (Date.now() - struck)));
  }
  clocks.set(leader.slot, 0);
  await sleep(2500);
  return `${leader.id}'s wall clock +${ahead} min, then -${behind} min, ${hold} ms each (it read ${measured.join(', then ')})`;
}

async function strikeLeaseServers(kind: 'backend-restart' | 'backend-restart-all', c: StrikeContext): Promise<string> {
  const { o, env } = c;
  if (kind === 'backend-restart-all' && o.backend === 'etcd') {
    await env.lease.restart(true);
    return 'kill -9 and restart of every etcd member';
  }
  await env.lease.restart(false);
  return o.backend === 'etcd' ? 'kill -9 and restart of one etcd member' : `kill -9 and restart of ${o.backend}`;
}

async function strikeDeliveryOrLedger(
  kind: 'queue-restart' | 'queue-flush' | 'ledger-restart',
  c: StrikeContext,
): Promise<string> {
  const { queue, ledger } = c.env;
  switch (kind) {
    case 'queue-restart':
      await queue.restart!();
      return "kill -9 of BullMQ's Redis, restarted empty (no persistence)";
    case 'queue-flush':
      await queue.flush!();
      return "FLUSHALL on BullMQ's Redis";
    case 'ledger-restart':
      return ledger.restart!();
  }
}
