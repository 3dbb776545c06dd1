/**
 * `npm run bench -- ledger-check --runs 10000 --rounds 20`: what the live ledger check costs the
 * ledger, against the ledger's own load. On throwaway servers (a durable PostgreSQL, a Redis):
 * `--runs` runs go through the whole run path (claim and complete: the run-path bench's `empty`
 * workload) while PostgreSQL's CPU is measured; then a tenure's first round reads a window holding
 * exactly those runs, and `--rounds` later rounds (each reads only what was committed since the
 * last) run once those runs are behind them; then the heartbeat's question about a replica's 30
 * remembered claims, likewise.
 *
 * Each run is read by about 1 + slack / interval rounds (1.17 at the defaults), and a round costs
 * the same whatever it reads on top; so per 10,000 runs the check costs their reads plus the rounds
 * that pass while they run, which depends on the rate: reported at 11, 100 and 1,000 runs a second,
 * beside the run path's PostgreSQL CPU for the same runs (the fires' commits are not in it).
 */
import { pino } from 'pino';
import { systemClock } from '../src/clock.js';
import { Ledger } from '../src/ledger/ledger.js';
import { findLostClaims } from '../src/ledger/members.js';
import { saveLedgerCheck } from '../src/ledger/ledger-check.js';
import { replicaSettings } from '../src/replica/replica-defaults.js';
import { ledgerChecks } from '../src/scheduler/chores/ledger-checks.js';
import { LedgerCheckChore, type LedgerCheckReport } from '../src/scheduler/chores/ledger-check.js';
import { cpuMsOf, loadAverage } from './cpu.js';
import { oursRound, servers } from './run-path.js';
import { fmt, table } from './stats.js';

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : fallback;
}

export async function benchLedgerCheck(): Promise<Record<string, unknown>> {
  const runs = Number(flag('runs', '10000'));
  const rounds = Number(flag('rounds', '20'));
  const windowMs = replicaSettings.ledgerCheckWindowMs.default;
  const intervalMs = replicaSettings.ledgerCheckIntervalMs.default;
  const s = await servers();
  const loadBefore = loadAverage();
  const pgCpu = () => cpuMsOf(s.pg.server.pids());
  try {
    // The ledger's own load: the run path for `runs` runs.
    // Slots from now on, so the runs are not late (catch-ups, backfills: each of those costs the
    // read a probe for its slot's other runs) and the figure is the steady state's.
    const runPath = await oursRound(s, 'empty', runs, Math.ceil(Date.now() / 1000) * 1000);
    const ledger = new Ledger(s.pool);
    const chore = new LedgerCheckChore({
      checks: ledgerChecks({
        ledger,
        now: () => Date.now(),
        windowMs,
        maxRows: replicaSettings.ledgerCheckMaxRows.default,
        shards: 1,
        workerLockMs: replicaSettings.lockDurationMs.default,
        claimerLiveWithinMs: () => replicaSettings.ttlMs.default,
        timeouts: () => [],
      }),
      save: (report) => saveLedgerCheck(ledger.pool, ledger.tables, report),
      clock: systemClock,
      logger: pino({ level: 'silent' }),
    });
    // A tenure's first round reads the whole window: the 10,000 runs.
    const fullBefore = pgCpu();
    const full = await chore.checkOnce();
    const fullPgMs = pgCpu() - fullBefore;
    if (full.window?.runs !== runs) throw new Error(`the window held ${full.window?.runs} runs, not ${runs}`);
    if (full.violations !== 0) throw new Error(`the check found ${JSON.stringify(full.counts)}`);
    // Later rounds read what was committed since the last (and 10 s of slack): once those runs are
    // past the slack, a round reads none of them and costs what every round costs.
    await new Promise((r) => setTimeout(r, 11_000));
    let report: LedgerCheckReport = full;
    const before = pgCpu();
    const t = performance.now();
    for (let i = 0; i < rounds; i++) report = await chore.checkOnce();
    const roundPgMs = (pgCpu() - before) / rounds;
    const roundWallMs = (performance.now() - t) / rounds;
    if (report.window?.runs !== 0) throw new Error(`a later round read ${report.window?.runs} runs`);
    if (report.violations !== 0) throw new Error(`the check found ${JSON.stringify(report.counts)}`);
    // What reading a run costs, above a round's own: each run is read by 1 + slack / interval rounds.
    const readPer10k = (Math.max(0, fullPgMs - roundPgMs) * 10_000) / runs;
    const readsPerRun = 1 + 10_000 / intervalMs;

    // A heartbeat's question: the 30 claims a replica remembers, every 3 s per replica.
    await s.pool.query(
      `INSERT INTO ${ledger.tables.members} (replica_id, host, pid, version, role) VALUES ('bench', 'h', 1, 'v', 'follower')`,
    );
    const claims = (
      await s.pool.query<{
        run_id: string;
        attempt: number;
        token: string;
        job: string;
        scheduled_at: Date;
        started_at: Date;
      }>(
        `SELECT a.run_id, a.attempt, a.token, r.job, r.scheduled_at, a.started_at FROM ${ledger.tables.runAttempts} a
         JOIN ${ledger.tables.runs} r ON r.id = a.run_id ORDER BY a.token DESC LIMIT 30`,
      )
    ).rows.map((r) => ({
      runId: BigInt(r.run_id),
      attempt: r.attempt,
      token: BigInt(r.token),
      job: r.job,
      scheduledAt: r.scheduled_at,
      claimedAt: r.started_at,
    }));
    const beats = rounds * 10;
    const beatBefore = pgCpu();
    for (let i = 0; i < beats; i++) {
      const lost = await findLostClaims(s.pool, ledger.tables, 'bench', claims);
      if (lost.length) throw new Error(`${lost.length} claims reported lost`);
    }
    const beatPgMs = (pgCpu() - beatBefore) / beats;

    const runPathPgMs = runPath.cpu.postgres;
    const runPathPer10k = (runPathPgMs * 10_000) / runs;
    /** The check's PostgreSQL ms per 10,000 runs at `perSecond` runs a second: reads, plus the rounds that pass meanwhile. */
    const checkPer10kAt = (perSecond: number) =>
      readPer10k * readsPerRun + roundPgMs * (10_000 / perSecond / (intervalMs / 1000));
    /** One replica's heartbeat questions per 10,000 runs at `perSecond` runs a second (a beat every 3 s). */
    const beatsPer10kAt = (perSecond: number) => beatPgMs * (10_000 / perSecond / 3);
    const rates = [11, 100, 1000];
    const results = {
      runs,
      rounds,
      windowMs,
      intervalMs,
      runPath: { postgresCpuMs: runPathPgMs, seconds: runPath.seconds, walBytes: runPath.walBytes },
      check: {
        firstRoundPostgresCpuMs: fullPgMs,
        roundPostgresCpuMs: roundPgMs,
        roundWallMs,
        readPer10kRunsPostgresMs: readPer10k,
        readsPerRun,
      },
      heartbeat: { postgresCpuMsPerBeat: beatPgMs, claims: claims.length },
      per10kRuns: Object.fromEntries(
        rates.map((r) => [
          `${r}/s`,
          {
            runPathPostgresMs: runPathPer10k,
            checkPostgresMs: checkPer10kAt(r),
            checkShare: checkPer10kAt(r) / runPathPer10k,
            heartbeatPostgresMsPerReplica: beatsPer10kAt(r),
            heartbeatSharePerReplica: beatsPer10kAt(r) / runPathPer10k,
          },
        ]),
      ),
      loadBefore,
      loadAfter: loadAverage(),
    };
    table(`Ledger check: a window of ${runs} runs, then ${rounds} rounds`, [
      {
        what: `run path, ${runs} runs`,
        'PostgreSQL CPU ms': fmt(runPathPgMs, 0),
        note: `${fmt(runPath.seconds, 2)} s`,
      },
      { what: `first round (reads the ${runs})`, 'PostgreSQL CPU ms': fmt(fullPgMs, 1), note: '' },
      {
        what: 'a later round (reads what is new)',
        'PostgreSQL CPU ms': fmt(roundPgMs, 2),
        note: `${fmt(roundWallMs, 2)} ms wall`,
      },
      { what: 'a heartbeat question (30 claims)', 'PostgreSQL CPU ms': fmt(beatPgMs, 3), note: '' },
      ...rates.map((r) => ({
        what: `per 10,000 runs at ${r} runs/s`,
        'PostgreSQL CPU ms': fmt(checkPer10kAt(r), 1),
        note: `check ${fmt((100 * checkPer10kAt(r)) / runPathPer10k, 2)} %, heartbeats ${fmt((100 * beatsPer10kAt(r)) / runPathPer10k, 2)} % per replica, of the run path's ${fmt(runPathPer10k, 0)} ms`,
      })),
    ]);
    console.log(`load average ${loadBefore} before, ${results.loadAfter} after`);
    return results;
  } finally {
    await s.pool.end();
    await s.conn.quit();
    await s.redis.cleanup();
    await s.pg.cleanup();
  }
}
