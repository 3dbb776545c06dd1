import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { z } from 'zod';
import { runDrill, type DrillReport } from '../drill/drill.js';
import type { Percentiles } from '../drill/checker.js';
import { applicableFaults, faultConflict, faultKinds, topologyFaults, type FaultKind } from '../drill/faults.js';
import { findLibfaketime } from '../drill/skewed-clock.js';
import { InvalidConfigError } from '../errors.js';
import { MAX_SHARDS } from '../scheduler/shards/shard-map.js';

const optionsSchema = z.object({
  backend: z.enum(['etcd', 'redis', 'postgres'], 'must be etcd, redis or postgres'),
  replicas: z.coerce.number().int().min(2, 'must be at least 2').max(10, 'must be at most 10'),
  jobs: z.coerce.number().int().min(1).max(200),
  shards: z.coerce
    .number()
    .int()
    .min(1, `must be from 1 to ${MAX_SHARDS}`)
    .max(MAX_SHARDS, `must be from 1 to ${MAX_SHARDS}`),
  faultCount: z.coerce.number().int().min(1).max(1000),
  interval: z.coerce.number().min(1).max(600),
  ttlMs: z.coerce.number().int().min(1000).max(60_000),
  seed: z.coerce.number().int().min(0),
  delayMs: z.coerce.number().int().min(0).max(5000),
  jitterMs: z.coerce.number().int().min(0).max(5000),
  loss: z.coerce.number().min(0, 'must be a share between 0 and 0.5').max(0.5, 'must be a share between 0 and 0.5'),
  ledgerLagMs: z.coerce.number().int().min(0).max(30_000),
  sentinelLagMs: z.coerce.number().int().min(0).max(30_000),
  ledgerAsync: z.boolean().default(false),
});

export function registerDrill(program: Command): void {
  program
    .command('drill')
    .description('failover drill: replica processes, injected faults, then an exactly-once check of the ledger')
    .option('--backend <kind>', 'etcd | redis | postgres (the drill starts a throwaway server for it)', 'postgres')
    .option('--replicas <n>', 'replica processes', '3')
    .option('--jobs <n>', 'jobs due every second', '10')
    .option(
      '--workflows',
      'also run workflows (a diamond, a fan-out of 50 with a fan-in, a signal wait) and check I7 and each step once',
    )
    .option(
      '--shards <n>',
      "sharded leadership: each replica runs with this many shards; leader faults strike shard 0's holder (give at least as many jobs)",
      '1',
    )
    .option(
      '--faults <kinds>',
      `comma-separated: ${faultKinds.join(', ')} (default: all that apply but ${[...topologyFaults].join(' and ')}; clock-skew needs libfaketime)`,
    )
    .option('--fault-count <n>', 'faults to strike in all (each chosen kind equally often, at least once)', '5')
    .option('--interval <seconds>', 'quiet time between faults', '6')
    .option('--ttl-ms <ms>', 'lease TTL of the replicas', '2000')
    .option('--delay-ms <ms>', "link-slow: one-way delay on the leader's link", '75')
    .option('--jitter-ms <ms>', 'link-slow: ± spread of that delay', '50')
    .option(
      '--loss <share>',
      'link-lossy: share of segments lost, each costing a 200 ms retransmission timeout',
      '0.05',
    )
    .option('--ledger-async', 'ledger-failover: make the standby asynchronous (breaks the guarantee on purpose)')
    .option(
      '--ledger-lag-ms <ms>',
      'ledger-failover: the standby is cut off this long before the primary is killed',
      '1000',
    )
    .option(
      '--sentinel-lag-ms <ms>',
      'redis-sentinel-failover: the replica is cut off this long before the primary is killed',
      '0',
    )
    .option(
      '--seed <n>',
      'seed of the fault schedule (printed, to replay a run)',
      String(Math.floor(Math.random() * 1e9)),
    )
    .option(
      '--database-url <url>',
      'PostgreSQL server for the ledger (a database is created and dropped)',
      process.env.CRONWARDEN_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
    )
    .option(
      '--redis-url <url>',
      'Redis for BullMQ delivery',
      process.env.CRONWARDEN_REDIS_URL ?? 'redis://127.0.0.1:6379',
    )
    .option('--report <file>', 'write the JSON report here')
    .action(async (raw: Record<string, string | boolean | undefined>) => {
      const parsed = optionsSchema.safeParse(raw);
      if (!parsed.success) {
        const issue = parsed.error.issues[0]!;
        throw new InvalidConfigError(
          `--${String(issue.path[0]).replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`,
          issue.message,
        );
      }
      const o = parsed.data;
      const faults = ((raw.faults as string | undefined)?.split(',').map((s) => s.trim()) ??
        applicableFaults(o.backend, findLibfaketime() !== undefined)) as FaultKind[];
      for (const f of faults)
        if (!faultKinds.includes(f))
          throw new InvalidConfigError('--faults', `unknown fault "${f}"; expected ${faultKinds.join(', ')}`);
      const conflict = faultConflict(o.backend, faults);
      if (conflict) throw new InvalidConfigError('--faults', conflict);
      console.log(
        `drill: backend ${o.backend}, ${o.replicas} replicas${o.shards > 1 ? `, ${o.shards} shards` : ''}, ${o.jobs} jobs/s, faults ${faults.join(',')} x${o.faultCount}, seed ${o.seed}`,
      );
      const report = await runDrill({
        backend: o.backend,
        replicas: o.replicas,
        jobs: o.jobs,
        ...(raw.workflows === true ? { workflows: true } : {}),
        // Unsharded, the report's options stay as they were.
        ...(o.shards > 1 ? { shards: o.shards } : {}),
        faults,
        faultCount: o.faultCount,
        intervalSeconds: o.interval,
        ttlMs: o.ttlMs,
        seed: o.seed,
        slowLink: { delayMs: o.delayMs, jitterMs: o.jitterMs },
        lossRate: o.loss,
        databaseUrl: raw.databaseUrl as string,
        redisUrl: raw.redisUrl as string,
        ledgerAsync: o.ledgerAsync,
        ledgerLagMs: o.ledgerLagMs,
        sentinelLagMs: o.sentinelLagMs,
        log: (line) => console.log(line),
      });
      printReport(report);
      if (typeof raw.report === 'string')
        writeFileSync(
          raw.report,
          JSON.stringify(report, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2),
        );
      if (!report.ok) process.exitCode = 1;
    });
}

function printReport(r: DrillReport): void {
  const c = r.check;
  console.log(`\nwindow ${r.window.from} .. ${r.window.to}`);
  console.log(
    `fires expected ${c.expected}, committed ${c.committed}, duplicated ${c.duplicated}, missed ${c.missed}, early ${c.early}, unfinished ${c.incomplete}`,
  );
  console.log(
    `effects doubled ${c.effectsDuplicated}, missing ${c.effectsMissing}, written by a stale attempt ${c.staleEffects}; stale attempts refused ${r.staleAttemptsRefused}`,
  );
  console.log(`leader tokens out of commit order: ${c.tokenRegressions}`);
  console.log(r.explain.line);
  if (r.workflows) {
    const w = r.workflows;
    console.log(
      `workflow runs ${w.workflowRuns} ${JSON.stringify(w.byState)}, missed ${w.missed}; step runs ${w.stepRuns}: effects doubled ${w.effectsDuplicated}, missing ${w.effectsMissing}, stray ${w.strayEffects}; started before a need completed (I7) ${w.startedEarly}; unsettled ${w.unsettled}`,
    );
  }
  const st = c.settlement;
  console.log(
    `runs settled: completed ${st.completed}, superseded ${st.superseded}, skipped ${st.skipped}, failed ${st.failed}, cancelled ${st.cancelled}; ` +
      `unsettled ${st.unsettled}${st.unsettled ? ` ${JSON.stringify(st.unsettledByState)}` : ''}`,
  );
  if (c.attemptLog) {
    console.log(
      `attempt log: ${c.attemptLog.committed} writes committed, ${c.staleWritesRefused} stale refused, ${c.staleWritesLanded} stale landed, ${c.writesCommittedTwice} doubled, ${c.writesLostByLedger} lost by the ledger; ${c.attemptLog.failed} attempts failed`,
    );
  }
  console.log(
    `live ledger check (always on in production): ${Object.entries(r.liveCheck.counts)
      .map(([check, n]) => `${check} ${n}`)
      .join(', ')}`,
  );
  for (const examples of Object.values(r.liveCheck.examples)) for (const e of examples) console.log(`  ${e}`);
  if (r.unexpectedExits.length) console.log(`replicas that exited by themselves: ${r.unexpectedExits.join(', ')}`);
  if (r.shardsLed)
    console.log(
      `shards led: ${Object.entries(r.shardsLed)
        .map(([id, shards]) => `${id} [${shards.join(',')}]`)
        .join(', ')}`,
    );
  for (const f of r.faults) {
    console.log(
      `  ${f.kind.padEnd(20)} ${f.at}  ${f.leaderBefore ?? '?'} -> ${f.leaderAfter ?? '?'}  new leader after ${f.handoverMs ?? '-'} ms, ` +
        `next fire after ${f.gapMs ?? 'none'} ms${f.boundMs ? ` (bound ${Math.round(f.boundMs)})` : ''}, ${f.leaderChanges} leader change(s)${f.counted ? '' : '  NOT COUNTED'}`,
    );
    console.log(`  ${''.padEnd(20)} ${f.detail}`);
    if (f.maxLeaderlessMs !== undefined)
      console.log(
        `  ${''.padEnd(20)} shards balanced after ${f.rebalanceMs ?? 'never'} ms, longest without a leader ${f.maxLeaderlessMs} ms${f.maxLeaderlessShard == null ? '' : ` (shard ${f.maxLeaderlessShard})`}`,
      );
    if (f.fires) {
      const w = f.fires;
      console.log(
        `  ${''.padEnd(20)} until the next fault: fires expected ${w.expected}, committed ${w.committed} (${w.standIn} by stand-ins), duplicated ${w.duplicated}, missed ${w.missed}, stale attempts refused ${w.staleRefused}`,
      );
      const late = (p: Percentiles | null) => (p ? `p50 ${p.p50} / p99 ${p.p99} / max ${p.max} ms` : '-');
      console.log(
        `  ${''.padEnd(20)} lateness: commit ${late(w.commitLateMs)}; first effect ${late(w.firstEffectLateMs)}`,
      );
    }
  }
  console.log(
    r.ok ? '\nOK: no violation' : `\nVIOLATIONS (${r.violations.length}):\n  ${r.violations.slice(0, 20).join('\n  ')}`,
  );
}
