/**
 * The cron differential of test/unit/cron-differential.test.ts with many more expressions: random
 * expressions of the dialect against the brute-force Intl oracle in five zones around DST changes,
 * and in UTC over years. `npm run bench -- cron-differential`; CRONWARDEN_CRON_DIFFERENTIAL (or
 * --count=N) sets the number of expressions (default 200,000), CRONWARDEN_CRON_SEED (or --seed=N)
 * the seed (default: a new one each run, printed so a mismatch can be replayed).
 */
import { runDifferential } from '../test/support/cron-differential.js';
import { fmt, table } from './stats.js';

function option(name: string, env: string): string | undefined {
  const arg = process.argv.find((a) => a.startsWith(`--${name}=`));
  return arg ? arg.slice(name.length + 3) : process.env[env];
}

export async function benchCronDifferential(): Promise<Record<string, unknown>> {
  const count = Number(option('count', 'CRONWARDEN_CRON_DIFFERENTIAL') ?? 200_000);
  const seed = Number(option('seed', 'CRONWARDEN_CRON_SEED') ?? Math.floor(Math.random() * 2 ** 31));
  if (!Number.isInteger(count) || count < 1 || !Number.isInteger(seed))
    throw new Error('--count and --seed must be whole numbers');
  const t = performance.now();
  const r = runDifferential(count, seed);
  const seconds = (performance.now() - t) / 1000;
  table(`Cron differential, ${fmt(count, 0)} expressions, seed ${seed}`, [
    ...Object.entries(r.zoneWindows).map(([zone, windows]) => ({ zone, windows })),
    { zone: 'all', windows: Object.values(r.zoneWindows).reduce((a, b) => a + b, 0) },
  ]);
  table('Compared', [
    { measure: 'fires', value: r.firesCompared },
    { measure: 'nextAfter probes', value: r.probesCompared },
    { measure: 'refused as never firing (oracle agrees)', value: r.refusedAsNeverFiring },
    { measure: 'mismatches', value: r.mismatchCount },
    { measure: 'seconds', value: fmt(seconds, 1) },
  ]);
  for (const m of r.mismatches) console.log(`MISMATCH ${m}`);
  if (r.mismatchCount > 0)
    throw new Error(`${r.mismatchCount} cron mismatches (seed ${seed}); first: ${r.mismatches[0]}`);
  return { count, seed, seconds, ...r };
}
