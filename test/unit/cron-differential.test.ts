/**
 * Issue 12: the cron clock must be right, or refuse. A differential of random expressions of the
 * documented dialect against a brute-force oracle (test/support/cron-oracle.ts) in five zones
 * around their DST changes, and a fuzz of strings outside the dialect. Fixed seeds; the bench
 * (`npm run bench -- cron-differential`) runs the same with more expressions.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidScheduleError } from '../../src/errors.js';
import { CronSchedule } from '../../src/cron/cron-schedule.js';
import { ZONES, randomExpression, runDifferential } from '../support/cron-differential.js';
import { oracleFiresUtc, oracleNeverFires, oracleParse, prng } from '../support/cron-oracle.js';

const EXPRESSIONS = Number(process.env.CRONWARDEN_CRON_DIFFERENTIAL ?? 20_000);

it(
  `${EXPRESSIONS} random expressions match the brute-force oracle in ${ZONES.length} zones around DST changes`,
  { timeout: 180_000 },
  () => {
    const t = performance.now();
    const cpu = process.cpuUsage();
    const r = runDifferential(EXPRESSIONS, 20261124);
    const seconds = (performance.now() - t) / 1000;
    const cpuSeconds = process.cpuUsage(cpu).user / 1e6;
    console.log(
      `cron differential: ${r.expressions} expressions, windows per zone ${JSON.stringify(r.zoneWindows)}, ` +
        `${r.firesCompared} fires and ${r.probesCompared} probes compared, ${r.refusedAsNeverFiring} refused as never firing (oracle agrees), ` +
        `${r.mismatchCount} mismatches, ${seconds.toFixed(1)} s (${cpuSeconds.toFixed(1)} s CPU)`,
    );
    assert.deepEqual(r.mismatches, []);
    assert.equal(r.mismatchCount, 0);
    assert.equal(r.expressions, EXPRESSIONS);
    for (const zone of ZONES) assert.ok(r.zoneWindows[zone]! > EXPRESSIONS / 10, `too few windows in ${zone}`);
    assert.ok(r.firesCompared > EXPRESSIONS * 10);
  },
);

/** Characters that cron, Quartz and croner give meaning to, and some that nothing should accept. */
const ALPHABET = [
  ...'0123456789',
  '*',
  '/',
  '-',
  ',',
  '#',
  'L',
  'W',
  '?',
  '@',
  ' ',
  ' ',
  ' ',
  '\t',
  '\n',
  'a',
  'j',
  'n',
  'm',
  'o',
  'f',
  'r',
  'i',
  'x',
  'é',
  '٣',
  '\u0000',
  '+',
  '.',
];
const ODD = [
  '0 0 * * 5L',
  '0 0 * * 1-5L',
  '0 0 * * L',
  '0 0 L-3 * *',
  '0 0 LW * *',
  '0 0 15W * *',
  '0 0 * * 5#L',
  '/5 * * * *',
  '5/15 * * * *',
  '* * * * * * *',
  '@reboot',
  '@every 5m',
  '0 0 ? * MON',
  '0 0 * * MON-FRI',
  '0 0 * * monday',
  '60 * * * *',
  '* 24 * * *',
  '0 0 0 * *',
  '0 0 32 * *',
  '0 0 * 13 *',
  '0 0 * * 8',
  '*/0 * * * *',
  '*/61 * * * *',
  '1-60 * * * *',
  '5-1 * * * *',
  '0 0 * * fri-mon',
  '0 0 1,,2 * *',
  '0 0 1, * *',
  ',0 * * * *',
  '0 0 * * 5#0',
  '0 0 * * 5#6',
  '0 0 * * 5#22',
  '00005 * * * *',
  '-1 * * * *',
  '+1 * * * *',
  '1.5 * * * *',
  '0x1 * * * *',
  '１ * * * *',
  '0 0 31 2 *',
  '0 0 30,31 2 *',
  '0 0 */20 * 5#2',
  'H * * * *',
  '0 0 * * 0-7/8',
  '0 0 * * */9',
  `${'1,'.repeat(150)}1 * * * *`,
  ' ',
  '\n* * * * *\n',
];

it('strings outside the dialect are refused with an InvalidScheduleError, and nothing else is thrown', () => {
  const rnd = prng(7);
  const int = (n: number) => Math.floor(rnd() * n);
  const inputs: string[] = [...ODD];
  for (let i = 0; i < 4000; i++)
    inputs.push(Array.from({ length: 1 + int(24) }, () => ALPHABET[int(ALPHABET.length)]).join(''));
  for (let i = 0; i < 6000; i++) {
    // A valid expression with one character inserted, deleted or replaced.
    const e = randomExpression(rnd);
    const at = int(e.length + 1);
    const c = ALPHABET[int(ALPHABET.length)]!;
    inputs.push(
      [e.slice(0, at) + c + e.slice(at), e.slice(0, at) + e.slice(at + 1), e.slice(0, at) + c + e.slice(at + 1)][
        int(3)
      ]!,
    );
  }
  let accepted = 0;
  let refused = 0;
  for (const input of inputs) {
    const spec = oracleParse(input);
    let schedule: CronSchedule | null = null;
    try {
      schedule = CronSchedule.parse(input);
    } catch (err) {
      assert.ok(err instanceof InvalidScheduleError, `${JSON.stringify(input)} threw ${String(err)}`);
      assert.equal(err.setting, 'schedule');
      assert.equal(err.expression, input);
      assert.match(err.message, /^schedule: invalid cron expression "[^\n]*": [^\n]+$/);
      assert.ok(err.message.length < 500, err.message);
      // Refused: outside the dialect as the oracle reads it, or a pattern that never fires.
      if (spec)
        assert.ok(
          /never fire/.test(err.message) && oracleNeverFires(spec),
          `${JSON.stringify(input)} refused (${err.message}) but the oracle reads it`,
        );
      refused++;
      continue;
    }
    assert.ok(spec, `${JSON.stringify(input)} accepted but it is outside the dialect`);
    const from = Date.UTC(2026, 0, 1);
    const want = oracleFiresUtc(spec, from, 3, 30);
    assert.deepEqual(schedule.between(from, Date.UTC(2056, 0, 1), 3), want, JSON.stringify(input));
    accepted++;
  }
  assert.ok(refused > 5000 && accepted > 500, `refused ${refused}, accepted ${accepted}`);
  for (const input of ODD.slice(0, 3)) assert.equal(oracleParse(input) !== null, input === '0 0 * * 5L');
});
