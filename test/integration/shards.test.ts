/**
 * Sharded leadership with three in-process replicas on the PostgreSQL lease backend (real
 * PostgreSQL and Redis): 8 shards spread so no replica leads more than ceil(8/3) = 3; a replica
 * stopping hands its shards over and the two left rebalance to 4 each within 2 TTL, no shard
 * leaderless longer than the I5 bound; a replica joining takes its share from those above it. The
 * ledger then holds every slot of every job once, with leader tokens in order per shard (I3).
 * Kill -9 of replica processes is the drill's test (test/drill/shards.test.ts).
 */
import { after, before, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { tablesIn } from '../../src/db/tables.js';
import { defineJob } from '../../src/jobs/define-job.js';
import { PostgresLeaseBackend } from '../../src/locks/postgres.js';
import { Replica } from '../../src/replica/replica.js';
import { resolveElectorOptions } from '../../src/scheduler/election/elector-options.js';
import { fairShare, shardLeaseName, shardOf } from '../../src/scheduler/shards/shard-map.js';
import { createTestDatabase, type TestDatabase } from '../support/postgres-database.js';
import { SHARED_REDIS_URL } from './failover-scenario.js';

const SHARDS = 8;
const bin = fileURLToPath(new URL('../../bin/cronwarden.js', import.meta.url));
const TOKEN = 'shards-test-token-0123456789';
const TTL_MS = 2000;
const I5_BOUND_MS =
  TTL_MS + resolveElectorOptions({ leaseName: 'x', replicaId: 'x', ttlMs: TTL_MS }).retryPeriodMs + 1000;

let db: TestDatabase;
before(async () => {
  db = await createTestDatabase();
});
after(async () => {
  await db.drop();
});

/** Two jobs due every second in each shard. */
function jobNames(): string[] {
  const per = new Array<number>(SHARDS).fill(0);
  const names: string[] = [];
  for (let i = 0; names.length < 2 * SHARDS; i++) {
    const s = shardOf(`tick-${i}`, SHARDS);
    if (per[s]! < 2) {
      per[s]!++;
      names.push(`tick-${i}`);
    }
  }
  return names;
}

/** Every 25 ms: each shard's holder, and the longest stretch each shard had none. */
class ShardWatch {
  readonly holders: (string | null)[] = new Array<string | null>(SHARDS).fill(null);
  private readonly since: (number | null)[] = new Array<number | null>(SHARDS).fill(null);
  maxLeaderlessMs = 0;
  private stopped = false;
  private readonly loop: Promise<void>;
  constructor(
    private readonly observer: PostgresLeaseBackend,
    private readonly leases: string[],
  ) {
    this.loop = this.run();
  }
  private async run(): Promise<void> {
    while (!this.stopped) {
      const now = Date.now();
      const cur = await Promise.all(this.leases.map((l) => this.observer.current(l)));
      cur.forEach((c, i) => {
        this.holders[i] = c?.holder ?? null;
        if (c) this.since[i] = null;
        else {
          this.since[i] ??= now;
          this.maxLeaderlessMs = Math.max(this.maxLeaderlessMs, now - this.since[i]);
        }
      });
      await sleep(25);
    }
  }
  count(id: string): number {
    return this.holders.filter((h) => h === id).length;
  }
  /** Every shard led by one of `live`, none of them above the fair share. */
  balanced(live: string[]): boolean {
    const share = fairShare(SHARDS, live.length);
    return this.holders.every((h) => h !== null && live.includes(h)) && live.every((id) => this.count(id) <= share);
  }
  async until(live: string[], timeoutMs: number): Promise<number> {
    const start = Date.now();
    while (!this.balanced(live)) {
      if (Date.now() - start > timeoutMs)
        throw new Error(`not balanced over ${live.join(', ')} after ${timeoutMs} ms: ${this.holders.join(', ')}`);
      await sleep(20);
    }
    return Date.now() - start;
  }
  resetLeaderless(): void {
    this.maxLeaderlessMs = 0;
  }
  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }
}

/**
 * The admin API with shards: /api/lease says who leads which shard, and a trigger sent to a replica
 * that does not lead the job's shard is refused with that shard's leader named (so the CLI follows
 * it there), while the shard's leader commits it.
 */
async function adminRoutesByShard(live: Map<string, Replica>, watch: ShardWatch, names: string[]): Promise<void> {
  const a = live.get('a')!;
  const leaseRes = await fetch(`${a.adminUrl}/api/lease`);
  const lease = (await leaseRes.json()) as {
    shards?: { shard: number; holder: string | null; leaderAdminUrl: string | null }[];
  };
  assert.equal(leaseRes.status, 200, JSON.stringify(lease));
  assert.ok(lease.shards, JSON.stringify(lease));
  assert.equal(lease.shards.length, SHARDS);
  assert.deepEqual(
    lease.shards.map((s) => s.holder),
    watch.holders,
  );
  // Each shard's elections, by shard; a shard out of range is a clear 400.
  const elections = (await (await fetch(`${a.adminUrl}/api/elections?shard=5`)).json()) as {
    leaseName: string;
    elections: { leader: string }[];
  };
  assert.equal(elections.leaseName, shardLeaseName(a.namespace, 5, SHARDS));
  assert.equal(elections.elections[0]?.leader, watch.holders[5]);
  const outOfRange = await fetch(`${a.adminUrl}/api/elections?shard=${SHARDS}`);
  assert.equal(outOfRange.status, 400);
  assert.match(((await outOfRange.json()) as { error: string }).error, /shard/);
  const job = names.find((n) => watch.holders[shardOf(n, SHARDS)] !== 'a')!;
  const leader = watch.holders[shardOf(job, SHARDS)]!;
  const trigger = (url: string) =>
    fetch(`${url}/api/jobs/${encodeURIComponent(job)}/trigger`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
  const refused = await trigger(a.adminUrl!);
  assert.equal(refused.status, 409);
  const body = (await refused.json()) as { leader: string; leaderAdminUrl: string };
  assert.equal(body.leader, leader, `the refusal names ${job}'s shard leader`);
  assert.equal(body.leaderAdminUrl, live.get(leader)!.adminUrl);
  // The CLI, as an operator runs it: status lists the shards; trigger follows the 409 to the leader.
  const run = (...args: string[]) =>
    promisify(execFile)(process.execPath, [bin, ...args, '--url', a.adminUrl!], {
      env: { ...process.env, CRONWARDEN_ADMIN_TOKEN: TOKEN },
    });
  const status = (await run('status')).stdout;
  assert.match(status, /SHARDS/);
  for (const [shard, holder] of watch.holders.entries())
    assert.match(status, new RegExp(`^${shard}\\s+${holder}\\s`, 'm'), status);
  const viaCli = await run('trigger', job);
  assert.match(viaCli.stdout + viaCli.stderr, new RegExp(leader), 'the CLI says which leader committed it');
  const done = await trigger(body.leaderAdminUrl);
  assert.equal(done.status, 200, await done.clone().text());
  assert.equal(((await done.json()) as { job: string }).job, job);
}

it('spreads 8 shards over 3 replicas, rebalances within 2 TTL on a stop and a join, and fires each slot once', async (t) => {
  const namespace = `sh${randomUUID().slice(0, 8)}`;
  const names = jobNames();
  const jobs = names.map((name) => defineJob({ name, schedule: '* * * * * *', handler: async () => {} }));
  const start = async (id: string) => {
    const replica = new Replica({
      replicaId: id,
      namespace,
      schema: db.schema,
      backend: new PostgresLeaseBackend({ connectionString: db.url, schema: db.schema }),
      databaseUrl: db.url,
      redisUrl: SHARED_REDIS_URL,
      jobs,
      shards: SHARDS,
      election: { ttlMs: TTL_MS },
      shutdownGraceMs: 1000,
      admin: { port: 0, token: TOKEN },
      logger: pino({ level: 'silent' }),
    });
    await replica.start();
    return replica;
  };
  const observer = new PostgresLeaseBackend({ connectionString: db.url, schema: db.schema });
  const watch = new ShardWatch(
    observer,
    Array.from({ length: SHARDS }, (_, i) => shardLeaseName(namespace, i, SHARDS)),
  );
  const live = new Map<string, Replica>();
  const startedAt = Date.now();
  /** When each step began, to place a missed slot on the timeline. */
  const steps: [string, number][] = [['start', startedAt]];
  let shutdownAt = Number.POSITIVE_INFINITY;
  try {
    for (const id of ['a', 'b', 'c']) live.set(id, await start(id));
    await watch.until(['a', 'b', 'c'], 6 * TTL_MS);
    // Every replica leads some shard: 3 + 3 + 2.
    for (const id of ['a', 'b', 'c'])
      assert.ok(watch.count(id) >= 2, `${id} leads ${watch.count(id)}: ${watch.holders.join(', ')}`);
    assert.deepEqual(
      live.get('a')!.shards.led(),
      watch.holders.flatMap((h, i) => (h === 'a' ? [i] : [])),
      "the replica's own view matches the backend",
    );
    await adminRoutesByShard(live, watch, names);
    await sleep(2000);

    // A graceful stop (SIGTERM): its shards go to the two left, 4 each.
    const busiest = ['a', 'b', 'c'].sort((x, y) => watch.count(y) - watch.count(x))[0]!;
    const moved = watch.count(busiest);
    const rest = ['a', 'b', 'c'].filter((id) => id !== busiest);
    const before = new Map(rest.map((id) => [id, watch.holders.flatMap((h, i) => (h === id ? [i] : []))]));
    watch.resetLeaderless();
    const stopAt = Date.now();
    steps.push(['stop', stopAt]);
    await live.get(busiest)!.stop();
    live.delete(busiest);
    await watch.until(rest, 2 * TTL_MS);
    const afterStop = Date.now() - stopAt;
    const stopFigures = `stop: rebalanced ${afterStop} ms after it began, longest leaderless shard ${watch.maxLeaderlessMs} ms`;
    assert.ok(afterStop <= 2 * TTL_MS, stopFigures);
    assert.ok(watch.maxLeaderlessMs <= I5_BOUND_MS, `a shard had no leader for ${watch.maxLeaderlessMs} ms`);
    // Only the stopped replica's shards moved: the others kept theirs.
    for (const [id, shards] of before)
      for (const s of shards) assert.equal(watch.holders[s], id, `shard ${s} moved off ${id}`);
    assert.equal(moved, SHARDS - [...before.values()].flat().length);
    await sleep(3000);

    // A replica joining takes its share (3, 3, 2 again) from those above it.
    watch.resetLeaderless();
    steps.push(['join', Date.now()]);
    live.set('d', await start('d'));
    const joinMs = await watch.until([...rest, 'd'], 6 * TTL_MS);
    t.diagnostic(
      `${stopFigures}; join: balanced ${joinMs} ms after start() returned, longest leaderless shard ${watch.maxLeaderlessMs} ms`,
    );
    assert.ok(watch.count('d') >= 2, `d leads ${watch.count('d')} after ${joinMs} ms`);
    assert.ok(
      watch.maxLeaderlessMs <= I5_BOUND_MS,
      `a shard had no leader for ${watch.maxLeaderlessMs} ms on the join`,
    );
    await sleep(3000);
  } finally {
    shutdownAt = Date.now();
    await watch.stop();
    for (const r of live.values()) await r.stop();
    await observer.close();
  }

  // Every slot of every job once (the unique key refuses a second), none missing in the window.
  const tables = tablesIn(db.schema);
  const runs = await db.pool.query<{ id: string; job: string; at: string; token: string }>(
    `SELECT id, job, extract(epoch FROM scheduled_at)::bigint::text AS at, leader_token::text AS token FROM ${tables.runs} ORDER BY id`,
  );
  const from = Math.ceil((startedAt + 4000) / 1000);
  // Up to the shutdown of the last replicas (stopping them all, one by one, leaves slots unfired).
  const to = Math.floor((shutdownAt - 1000) / 1000);
  const timeline = (slot: number) =>
    steps.map(([step, at]) => `${step} ${((slot * 1000 - at) / 1000).toFixed(1)} s before`).join(', ');
  for (const name of names) {
    const slots = new Set(runs.rows.filter((r) => r.job === name).map((r) => Number(r.at)));
    const missing: number[] = [];
    for (let s = from; s <= to; s++) if (!slots.has(s)) missing.push(s);
    assert.deepEqual(
      missing,
      [],
      `${name} (shard ${shardOf(name, SHARDS)}) missed slots: ${missing.map(timeline).join('; ')}`,
    );
  }
  // I3 per shard: in commit order, each shard's leader tokens never go down.
  const last = new Map<number, bigint>();
  for (const r of runs.rows) {
    const s = shardOf(r.job, SHARDS);
    const token = BigInt(r.token);
    assert.ok(token >= (last.get(s) ?? 0n), `shard ${s}: token ${token} after ${last.get(s)}`);
    last.set(s, token);
  }
});
