/**
 * `npm run bench -- wal --runs 2000`: where the WAL of the run path goes. N runs with a handler
 * writing one row in ctx.transaction, on a throwaway durable PostgreSQL (run-path.ts's servers),
 * then pg_waldump over the LSN range of the run phase (claims, effects, completions: the fires
 * were committed and handed over before it), summed by record type and relation, per run. A count
 * of bytes, not a timing: it does not depend on the machine's load. The raw BullMQ worker's own
 * WAL per job is its effect's row and index entry (about 160 B here).
 */
import { execFileSync } from 'node:child_process';
import { binary } from '../src/drill/servers/postgres-cluster.js';
import { oursRound, servers } from './run-path.js';
import { fmt, table } from './stats.js';

function flag(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : fallback;
}

export async function benchWal(): Promise<Record<string, unknown>> {
  const runs = Number(flag('runs', '2000'));
  const s = await servers();
  try {
    const waldump = binary('pg_waldump');
    const lsn = async () => (await s.pool.query<{ l: string }>('SELECT pg_current_wal_lsn()::text AS l')).rows[0]!.l;
    // The fires are committed and handed over inside oursRound before its measured window: the
    // window's WAL is what it reports; the dump covers the whole round, named by relation.
    await s.pool.query('CHECKPOINT');
    const from = await lsn();
    const round = await oursRound(s, 'write', runs);
    const to = await lsn();
    const names = new Map(
      (
        await s.pool.query<{ f: string; n: string }>(
          `SELECT pg_relation_filenode(c.oid)::text AS f, n.nspname || '.' || c.relname AS n
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE pg_relation_filenode(c.oid) IS NOT NULL`,
        )
      ).rows.map((r) => [r.f, r.n]),
    );
    const dump = execFileSync(waldump, ['-p', `${s.pg.server.dataDir}/pg_wal`, '-s', from, '-e', to], {
      maxBuffer: 1 << 30,
    }).toString();
    const by = new Map<string, { records: number; bytes: number }>();
    for (const line of dump.split('\n')) {
      const m = /rmgr: (\S+)\s+len \(rec\/tot\):\s+\d+\/\s*(\d+),.*desc: (\S+)/.exec(line);
      if (!m) continue;
      const rel = /rel \d+\/\d+\/(\d+)/.exec(line)?.[1];
      const key = `${m[1]} ${m[3]} ${rel ? (names.get(rel) ?? rel) : '-'}${/ FPW/.test(line) ? ' (full page)' : ''}`;
      const e = by.get(key) ?? { records: 0, bytes: 0 };
      e.records++;
      e.bytes += Number(m[2]);
      by.set(key, e);
    }
    const rows = [...by].sort((a, b) => b[1].bytes - a[1].bytes);
    const top = rows.slice(0, 25).map(([what, v]) => ({
      what,
      'B/run': fmt(v.bytes / runs, 1),
      'records/run': fmt(v.records / runs, 2),
    }));
    table(`WAL of ${runs} runs (fires, hand-over and run phase), by record and relation`, top);
    const perRun = round.walBytes / runs;
    console.log(`run phase (claims, effects, completions): ${fmt(perRun, 0)} B/run`);
    return {
      runs,
      runPhaseBytesPerRun: perRun,
      roundBytesPerRun: rows.reduce((n, [, v]) => n + v.bytes, 0) / runs,
      byRecord: Object.fromEntries(rows.map(([k, v]) => [k, { bytesPerRun: v.bytes / runs, records: v.records }])),
    };
  } finally {
    await s.pool.end();
    await s.conn.quit();
    await s.redis.cleanup();
    await s.pg.cleanup();
  }
}
