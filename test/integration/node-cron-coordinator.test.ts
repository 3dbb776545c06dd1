import { it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { createTestDatabase } from '../support/postgres-database.js';

it(
  'two node-cron processes sharing the cronwarden coordinator run each slot once, across a handover',
  { timeout: 60_000 },
  async () => {
    const db = await createTestDatabase();
    const fixture = fileURLToPath(new URL('../fixtures/node-cron-process.ts', import.meta.url));
    const slots: { slot: string; holder: string }[] = [];
    const start = (holder: string) => {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', fixture, JSON.stringify({ databaseUrl: db.url, holder })],
        {
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      );
      createInterface({ input: child.stdout }).on('line', (line) => {
        const msg = JSON.parse(line) as { slot?: string; holder: string };
        if (msg.slot) slots.push({ slot: msg.slot, holder });
      });
      return { child, exited: new Promise<number | null>((r) => child.once('exit', (code) => r(code))) };
    };
    const a = start('a');
    const b = start('b');
    try {
      await sleep(6000);
      const first = slots[0]?.holder;
      assert.ok(first, 'no slot ran in 6 s');
      const holder = first === 'a' ? a : b;
      holder.child.kill('SIGTERM'); // releases the lease: the other process must take over
      assert.equal(await holder.exited, 0);
      await sleep(5000);
    } finally {
      a.child.kill('SIGTERM');
      b.child.kill('SIGTERM');
      await Promise.all([a.exited, b.exited]);
    }
    const seen = new Map<string, number>();
    for (const s of slots) seen.set(s.slot, (seen.get(s.slot) ?? 0) + 1);
    const twice = [...seen].filter(([, n]) => n > 1);
    assert.deepEqual(twice, [], 'a slot ran in both processes');
    const holders = new Set(slots.map((s) => s.holder));
    assert.equal(holders.size, 2, 'the second process took over after the first released');
    const ordered = [...seen.keys()].sort();
    const span = (Date.parse(ordered.at(-1)!) - Date.parse(ordered[0]!)) / 1000 + 1;
    assert.ok(
      ordered.length >= span - 1,
      `${ordered.length} slots ran over a span of ${span} s: more than one lost in the handover`,
    );
    const ledger = await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM cw_runs WHERE job = 'node-cron:tick'`,
    );
    assert.equal(ledger.rows[0]!.n, slots.length, 'every run slot is in the ledger once');
    await db.drop();
  },
);
