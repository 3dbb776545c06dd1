/**
 * The failover drill: N real replica processes (`cronwarden start`) against a lease backend the
 * drill starts itself (so it can restart it), a workload of jobs due every second, and a seeded
 * schedule of faults. Afterwards the checker reads the ledger, the effect table and the attempt log
 * and checks DESIGN.md's invariants. A fault counts only if fires were flowing before it and a fire
 * committed after it (as in etcd's robustness tests: a run that proves nothing fails); for a fault
 * that must move leadership (kill, stop, term, link-cut) that fire must come from the new tenure,
 * a leader token higher than the struck leader's: a cut-off leader keeps committing through its
 * intact ledger link until its own deadline, and its fires prove nothing about failover.
 *
 * With shards (sharded leadership), "the leader" the leader faults strike is shard 0's holder, its
 * fires are shard 0's jobs', I3 is checked per shard, and every fault is also charged with how long
 * the shards took to be balanced again and the longest any shard was without a leader
 * (shard-timeline.ts).
 *
 * The parts: drill-options.ts says what to do, environment.ts starts the servers, fleet.ts the
 * replicas, strike.ts strikes a fault, faults.ts judges it, checker.ts checks the history; this
 * file runs them in order.
 */
import { checkWorkflows, readWorkflowHistory, type WorkflowReport } from './workflow-checker.js';
import { STEP_EFFECTS_TABLE, workflowSlots } from './workflow-workload.js';
import { randomUUID } from 'node:crypto';
import { memberAdminUrl } from '../ledger/admin-reads.js';
import { createLeaseBackend } from '../locks/create-backend.js';
import type { LeaseBackend } from '../locks/lease.js';
import * as ledgerHistory from '../ledger/history-reads.js';
import { DEFAULT_SCHEMA, tablesIn } from '../db/tables.js';
import { shardLeaseName } from '../scheduler/shards/shard-map.js';
import { DrillError, InvalidConfigError } from '../errors.js';
import {
  checkHistory,
  countWindow,
  readHistory,
  type CheckReport,
  type History,
  type WindowCounts,
} from './checker.js';
import type { DrillOptions } from './drill-options.js';
import { startEnvironment, type DrillEnvironment } from './environment.js';
import {
  faultConflict,
  faultSchedule,
  judgeFault,
  judgeShards,
  movesLeader,
  seededRandom,
  type FaultKind,
} from './faults.js';
import { ReplicaFleet } from './fleet.js';
import { drillJobNames, shardsWithoutJobs } from './job-names.js';
import { LeaderTimeline } from './leader-timeline.js';
import { LedgerProbe } from './ledger-probe.js';
import { ShardWatch } from './shard-watch.js';
import { ReplicaLink } from './replica-link.js';
import { SkewedClocks } from './skewed-clock.js';
import { strike } from './strike.js';
import { describeLiveCheck, liveLedgerCheck } from './live-check.js';
import type { LedgerCheckReport } from '../scheduler/chores/ledger-check.js';
import { explainAgainstChecker, type ExplainCheck } from './explain-check.js';
import { describeLockWaits, LockWatch } from './lock-watch.js';

export interface FaultRecord {
  kind: FaultKind;
  at: string;
  leaderBefore: string | null;
  /** Lease token of leaderBefore (a decimal string: JSON has no bigint). */
  tokenBefore: string | null;
  leaderAfter: string | null;
  /**
   * From the start of the strike to the fault proper, from which gapMs and anyFireMs count: the
   * set-up a fault needs first (ledger-failover: the standby cut off --ledger-lag-ms before the
   * primary is killed); 0 for most faults.
   */
  setupMs: number;
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
  /** With shards: from the strike until every shard had a live holder and none held more than ceil(shards / live) (null: not before the next fault). */
  rebalanceMs?: number | null;
  /** With shards: the longest stretch one shard had no live holder, from the strike to the next fault. */
  maxLeaderlessMs?: number;
  /** That shard (null: none was without a leader). */
  maxLeaderlessShard?: number | null;
  /**
   * With shards: how long the drill waited before the strike for every replica to be up (a member)
   * and the shards balanced among them (a replacement takes seconds to start), after which it lets
   * the cluster run quietly for the interval; null: not within 60 s, struck at once.
   */
  waitedForSpreadMs?: number | null;
  /** Lock waits of 500 ms or more in the ledger from the strike to the first fire after it, and who blocked them (lock-watch.ts). */
  lockWaits?: string;
  /** Scheduled times from this strike until the next one (or the end of the window). */
  fires?: WindowCounts & { staleRefused: number };
}

export interface DrillReport {
  options: Omit<DrillOptions, 'log' | 'databaseUrl' | 'redisUrl'>;
  window: { from: string; to: string };
  faults: FaultRecord[];
  check: CheckReport;
  /** The explain reader over the window, held against the checker's history (explain-check.ts). */
  explain: ExplainCheck;
  /** From the ledger: attempts recorded 'stale', or 'skipped' after a newer attempt completed the run. */
  staleAttemptsRefused: number;
  /** From the independent attempt log: 'refused' rows plus stale 'skipped' rows (check.staleWritesRefused). */
  staleWritesRefused: number;
  /** Replicas that exited without being struck (a crash on a fault that should not take a replica down). */
  unexpectedExits: string[];
  /** With shards: the shards each replica held at some point of the drill (the spread). */
  shardsLed?: Record<string, number[]>;
  /** With --workflows: I7 and each step's effect once, per workflow run of the window. */
  workflows?: WorkflowReport;
  /**
   * What the live ledger check (always on in production) found over the drill's window, run
   * before the replicas stop: 0 everywhere on a healthy drill. Reported beside the checker's
   * verdict, not part of it.
   */
  liveCheck: LedgerCheckReport;
  violations: string[];
  ok: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Every ledger the drill makes (a scratch database, or a PostgreSQL of its own) is migrated into
 * the default schema; the replicas, whose namespace is the drill's own, are told so.
 */
export const DRILL_SCHEMA = DEFAULT_SCHEMA;
const DRILL_TABLES = tablesIn(DRILL_SCHEMA);

/** Everything one drill drives between its servers' start and stop. */
interface Session {
  o: DrillOptions;
  env: DrillEnvironment;
  fleet: ReplicaFleet;
  links: ReplicaLink[];
  observer: LeaseBackend;
  timeline: LeaderTimeline;
  /** With shards: every shard's holder over the whole drill, and shard 0's jobs. */
  shards: ShardWatch | undefined;
  clocks: SkewedClocks | undefined;
  probe: LedgerProbe;
  faultRandom: () => number;
  log: (line: string) => void;
}

export async function runDrill(o: DrillOptions): Promise<DrillReport> {
  const random = seededRandom(o.seed);
  const schedule = faultSchedule(o.faults, o.faultCount, random);
  const conflict = faultConflict(o.backend, schedule);
  if (conflict) throw new InvalidConfigError('faults', conflict);
  // Before anything is started, so a missing libfaketime leaves nothing behind.
  const clocks = schedule.includes('clock-skew') ? SkewedClocks.create() : undefined;
  let env: DrillEnvironment | undefined;
  try {
    env = await startEnvironment(o, schedule);
    const session = await openSession(o, env, clocks);
    let outcome: Outcome;
    try {
      outcome = await strikeAll(session, schedule);
    } finally {
      await closeSession(session);
    }
    return await judgeDrill(o, env, outcome, session.fleet.unexpectedExits);
  } finally {
    await env?.cleanup();
    clocks?.cleanup();
  }
}

async function openSession(o: DrillOptions, env: DrillEnvironment, clocks: SkewedClocks | undefined): Promise<Session> {
  const observer = await createLeaseBackend(env.lease.config);
  const namespace = `drill-${o.seed}-${randomUUID().slice(0, 6)}`;
  const shards = o.shards ?? 1;
  // Shard 0's lease: the single leader's when unsharded.
  const leaseName = shardLeaseName(namespace, 0, shards);
  // Each replica slot reaches the backend through its own proxies, so one link can fail alone.
  const links: ReplicaLink[] = [];
  for (let slot = 0; slot < o.replicas; slot++)
    links.push(await ReplicaLink.open(env.lease.config, seededRandom(o.seed + 100 + slot)));
  const fleet = new ReplicaFleet(
    {
      ledgerUrl: env.ledger.url,
      witnessUrl: env.ledger.witnessUrl,
      queueUrl: env.queue.url,
      namespace,
      ttlMs: o.ttlMs,
      jobs: o.jobs,
      shards,
      workflows: o.workflows,
    },
    links,
    clocks,
    observer,
    leaseName,
  );
  const log = o.log ?? (() => {});
  const probe = new LedgerProbe(env.ledger.pool, DRILL_TABLES);
  const empty = shardsWithoutJobs(o.jobs, shards);
  if (empty.length)
    log(`warning: ${o.jobs} jobs for ${shards} shards: shards ${empty.join(', ')} have no job due every second`);
  return {
    o,
    env,
    fleet,
    links,
    observer,
    timeline: new LeaderTimeline(observer, leaseName),
    shards: shards > 1 ? new ShardWatch(observer, namespace, { ...o, shards }, fleet, probe) : undefined,
    clocks,
    probe,
    // Separate seeded streams: proxies draw per chunk (as many times as traffic happens to need),
    // which must not shift the fault parameters a replay draws.
    faultRandom: seededRandom(o.seed + 1),
    log,
  };
}

async function closeSession(s: Session): Promise<void> {
  await s.timeline.stop();
  // Beside the replicas' logs (fleet.ts), the shards' holders as sampled.
  await s.shards?.stop(process.env.CRONWARDEN_DRILL_LOG_DIR);
  await s.fleet.stopAll();
  await s.observer.close().catch(() => {});
  await Promise.all(s.links.map((l) => l.close()));
}

/** Start the replicas, wait for fires to flow, strike every fault of the schedule, then let the window's runs finish. */
async function strikeAll(s: Session, schedule: FaultKind[]): Promise<Outcome> {
  const { o } = s;
  for (let i = 0; i < o.replicas; i++) s.fleet.spawn(i);
  // Sharded, every shard starts on its own: from every job's first fire.
  const warm = s.shards ? await s.shards.everyJobFired(60_000) : await s.probe.firstCommitAfter(0, 60_000);
  if (warm === null)
    throw new DrillError('no fire committed (sharded: of every job) within 60 s of starting the replicas');
  const from = new Date(Math.ceil((warm + 2000) / 1000) * 1000);
  await sleep(o.intervalSeconds * 1000);
  const faults: FaultRecord[] = [];
  const violations: string[] = [];
  for (const kind of schedule) {
    s.log(`fault ${faults.length + 1}/${schedule.length}: ${kind}`);
    const { record, violations: v } = await runFault(s, kind);
    faults.push(record);
    violations.push(...v);
  }
  const to = new Date(Math.floor((Date.now() - 3000) / 1000) * 1000);
  await drain(s.probe, from, to);
  const led = s.shards?.led();
  const liveCheck = await liveLedgerCheck(s.env.ledger.pool, DRILL_TABLES, {
    since: from.getTime(),
    shards: o.shards ?? 1,
    ttlMs: o.ttlMs,
  });
  s.log(describeLiveCheck(liveCheck));
  return { window: { from, to }, faults, violations, liveCheck, ...(led ? { shardsLed: led } : {}) };
}

interface Outcome {
  window: { from: Date; to: Date };
  faults: FaultRecord[];
  violations: string[];
  liveCheck: LedgerCheckReport;
  shardsLed?: Record<string, number[]>;
}

/** Strike one fault, watch what follows until the next one, and judge it. */
async function runFault(s: Session, kind: FaultKind): Promise<{ record: FaultRecord; violations: string[] }> {
  const { o, fleet, probe } = s;
  const waited = s.shards ? await s.shards.untilWhole() : undefined;
  if (waited !== undefined)
    s.log(
      `  ${waited === null ? 'shards NOT balanced among every replica after 60 s' : `replicas up and shards balanced after ${waited} ms`}`,
    );
  if (waited !== undefined && waited !== null) await sleep(o.intervalSeconds * 1000);
  const { proc: before, token: tokenBefore } = await fleet.leader();
  const flowing = Date.now() - (await probe.lastCommit()) < 3000;
  const at = Date.now();
  s.log(`  leader ${before?.id ?? 'unknown'}`);
  const handover = fleet.watchHandover(before?.id);
  const locks = LockWatch.start(s.env.ledger.pool);
  const struck = await strike(kind, {
    leader: before,
    o,
    env: s.env,
    fleet,
    links: s.links,
    clocks: s.clocks,
    random: s.faultRandom,
    hostOffsetSeconds: (id) => hostOffsetSeconds(s.env.ledger.pool, id),
  });
  const { detail } = struck;
  // The gap runs from the fault proper: ledger-failover's standby cut-off before the kill is
  // set-up (a synchronous primary commits nothing meanwhile, and that is the drill's choice).
  const faultAt = struck.struckAt ?? at;
  // Where leadership must move, only a fire of the new tenure (a higher leader token) ends the
  // gap: the old leader may go on committing until its own deadline (link-cut: its ledger link
  // is intact), which proves nothing about failover.
  const mustMove = movesLeader.has(kind) && tokenBefore !== undefined;
  const jobs = s.shards?.leaderJobs;
  const newTenureFire = mustMove ? await probe.firstCommitAfter(faultAt, 30_000, tokenBefore, jobs) : null;
  const anyFire = await probe.firstCommitAfter(faultAt, mustMove ? 0 : 30_000, undefined, jobs);
  const handoverMs = await handover.result();
  const held = await locks.stop();
  const after = (await fleet.leader()).proc;
  await sleep(o.intervalSeconds * 1000);
  const leaderChanges = s.timeline.changesBetween(at, Date.now());
  const spread = s.shards?.measure(faultAt, Date.now());
  const judged = judgeFault({
    kind,
    ttlMs: o.ttlMs,
    strikeAt: faultAt,
    flowing,
    leaderBefore: before && tokenBefore !== undefined ? { id: before.id, token: tokenBefore } : null,
    firstFireAt: anyFire,
    firstNewTenureFireAt: newTenureFire,
    handoverMs,
    leaderChanges,
    detail,
  });
  const anyFireMs = anyFire === null ? null : anyFire - faultAt;
  const record: FaultRecord = {
    kind,
    at: new Date(at).toISOString(),
    leaderBefore: before?.id ?? null,
    tokenBefore: tokenBefore?.toString() ?? null,
    leaderAfter: after?.id ?? null,
    setupMs: faultAt - at,
    gapMs: judged.gapMs,
    anyFireMs,
    handoverMs,
    boundMs: judged.boundMs,
    leaderChanges,
    detail,
    counted: judged.counted,
    ...(held.waits.length ? { lockWaits: describeLockWaits(held) } : {}),
    ...spread,
    ...(waited !== undefined ? { waitedForSpreadMs: waited } : {}),
  };
  const shardViolations = spread ? judgeShards(kind, o.ttlMs, faultAt, spread) : [];
  if (waited === null)
    shardViolations.push(
      `rebalance: before ${kind} at ${record.at}: the shards were not balanced among ${o.replicas} joined replicas within 60 s`,
    );
  const gap = movesLeader.has(kind)
    ? `new leader's first fire after ${judged.gapMs ?? 'none'} ms (any fire after ${anyFireMs ?? 'none'} ms)`
    : `next fire after ${judged.gapMs ?? 'none'} ms${faultAt > at ? ` (from the fault proper, ${faultAt - at} ms into the strike)` : ''}`;
  s.log(`  ${detail}: ${gap}; leader now ${after?.id ?? 'unknown'}; ${leaderChanges} leader change(s)`);
  if (held.waits.length) s.log(`  lock waits: ${describeLockWaits(held)}`);
  if (spread)
    s.log(
      `  shards balanced after ${spread.rebalanceMs ?? 'never'} ms; longest without a leader ${spread.maxLeaderlessMs} ms${spread.maxLeaderlessShard === null ? '' : ` (shard ${spread.maxLeaderlessShard})`}`,
    );
  // A broken bound says what the ledger waited for meanwhile.
  const why = (v: string) => (v.startsWith('I5') ? `${v} (${describeLockWaits(held)})` : v);
  return { record, violations: [...judged.violations, ...shardViolations].map(why) };
}

/**
 * Let every run of the window settle (re-deliveries of killed workers included) before checking:
 * up to 60 s, or until the count of unfinished runs has not moved for 15 s (runs a lost queue
 * stranded do not finish by waiting; the checker reports them).
 */
async function drain(probe: LedgerProbe, from: Date, to: Date): Promise<void> {
  const deadline = Date.now() + 60_000;
  let last = -1;
  let lastChange = Date.now();
  while (Date.now() < deadline) {
    const n = await probe.unfinished(from, to);
    if (n === 0) return;
    if (n !== last) [last, lastChange] = [n, Date.now()];
    else if (Date.now() - lastChange > 15_000) return;
    await sleep(500);
  }
}

/** Read the history, check it, and charge each fault with its own stretch of the window. */
async function judgeDrill(
  o: DrillOptions,
  env: DrillEnvironment,
  outcome: Outcome,
  unexpectedExits: string[],
): Promise<DrillReport> {
  const {
    window: { from, to },
    faults,
  } = outcome;
  const expectedTimes: number[] = [];
  for (let t = from.getTime(); t <= to.getTime(); t += 1000) expectedTimes.push(t);
  const shards = o.shards ?? 1;
  const expected = new Map(drillJobNames(o.jobs, shards).map((name) => [name, expectedTimes] as [string, number[]]));
  const history = await readHistory(env.ledger.pool, {
    from,
    to,
    effectsTable: 'cw_drill_effects',
    attemptLogDb: env.ledger.witness,
    schema: DRILL_SCHEMA,
  });
  const check = checkHistory(history, { expected, requireCompleted: true, shards });
  const explain = await explainAgainstChecker(
    env.ledger.pool,
    DRILL_TABLES,
    expected,
    { from, to, now: new Date(Math.max(Date.now(), to.getTime())) },
    history,
  );
  const staleTimes = await ledgerHistory.staleAttemptTimes(env.ledger.pool, DRILL_TABLES);
  chargeFaults(faults, history, expected, staleTimes, to);
  const workflows = o.workflows
    ? checkWorkflows(
        await readWorkflowHistory(env.ledger.pool, DRILL_TABLES, STEP_EFFECTS_TABLE, from, to),
        workflowSlots(from.getTime(), to.getTime()),
      )
    : undefined;
  const violations = [
    ...outcome.violations,
    ...unexpectedExits.map((e) => `replica exited by itself: ${e}`),
    ...check.violations.map((v) => `${v.invariant}: ${v.message}`),
    ...explain.disagreements.map((d) => `explain: ${d}`),
    ...(workflows?.violations ?? []).map((v) => `${v.invariant}: ${v.message}`),
  ];
  const { log: _log, databaseUrl: _db, redisUrl: _redis, ...options } = o;
  return {
    options,
    window: { from: from.toISOString(), to: to.toISOString() },
    faults,
    check,
    explain,
    staleAttemptsRefused: staleTimes.length,
    staleWritesRefused: check.staleWritesRefused,
    unexpectedExits,
    ...(outcome.shardsLed ? { shardsLed: outcome.shardsLed } : {}),
    ...(workflows ? { workflows } : {}),
    liveCheck: outcome.liveCheck,
    violations,
    ok: violations.length === 0 && check.ok && (workflows?.ok ?? true),
  };
}

function chargeFaults(
  faults: FaultRecord[],
  history: History,
  expected: Map<string, number[]>,
  staleTimes: number[],
  to: Date,
): void {
  faults.forEach((f, i) => {
    const start = Date.parse(f.at);
    const end = i + 1 < faults.length ? Date.parse(faults[i + 1]!.at) : to.getTime() + 1;
    const staleRefused = staleTimes.filter((t) => t >= start && t < end).length;
    f.fires = { ...countWindow(history, { expected }, start, end), staleRefused };
  });
}

/** The replica's own reading of its host clock against the ledger's, from its /metrics. */
async function hostOffsetSeconds(
  pool: DrillEnvironment['ledger']['pool'],
  replicaId: string,
): Promise<number | undefined> {
  const url = await memberAdminUrl(pool, DRILL_TABLES, replicaId);
  if (!url) return undefined;
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('cronwarden_host_clock_offset_seconds'));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}
