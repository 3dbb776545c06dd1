/**
 * `npm run bench -- workflows`: workflows against BullMQ Flows doing the same work in the same run,
 * on throwaway servers (a durable PostgreSQL: fsync on; a Redis). cronwarden runs real workflows
 * through an in-process Replica (memory lease backend); BullMQ runs flows through a FlowProducer
 * and a Worker. Worker concurrency 10 on both sides; every handler does nothing but note the time.
 *
 * (a) Step hand-off: `--chains 200` runs of a `--steps 5` chain, `--inflight 4` chains at a time
 *     (below the concurrency, so a ready step never waits for a free worker). Per hand-off:
 *     - commit to start: cronwarden, the child's creation in the parent's completion transaction
 *       (cw_runs.created_at, clock_timestamp() a few statements before that commit) to the child's
 *       handler start; BullMQ Flows, a chain is nested parent/child (the first step is the deepest
 *       child), from the child's finishedOn (written as it completes) to the parent's handler start;
 *     - return to start: the previous handler returned to the next one started (what a user feels:
 *       it includes the commit of the step's completion).
 * (b) Fan-out and fan-in: `--rounds 3` of a `--width 1000` fan-out; from the start (cronwarden:
 *     `trigger`, whose run has one extra step that lists the items; BullMQ: `FlowProducer.add` of a
 *     parent with 1,000 children) until the fan-in handler has every item's result (cronwarden:
 *     its handler starts with them as input; BullMQ: its `getChildrenValues()` returned).
 * Rounds alternate BullMQ, cronwarden, cronwarden, BullMQ, so a drift in the machine's load weighs
 * on both. Reported: p50/p99 (a) and median total (b) per side, and the ratio cronwarden / BullMQ.
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { FlowProducer, Queue, Worker, type FlowJob } from 'bullmq';
import { Redis } from 'ioredis';
import pg from 'pg';
import { pino } from 'pino';
import { migrateDatabase } from '../src/db/migrate.js';
import { defineWorkflow, type StepContext, type WorkflowDefinition } from '../src/jobs/define-workflow.js';
import { MemoryLeaseBackend } from '../src/locks/memory.js';
import { Replica } from '../src/replica/replica.js';
import { startPostgresCluster, type PostgresCluster } from '../src/drill/servers/postgres-cluster.js';
import { startRedis, type TestRedis } from '../src/drill/servers/redis-server.js';
import { loadAverage } from './cpu.js';
import { fmt, median, summarize, table } from './stats.js';

const CONCURRENCY = 10;

interface Options {
  chains: number;
  steps: number;
  inflight: number;
  width: number;
  rounds: number;
}

/** One side's hand-offs in ms: from the parent's commit, and from the parent handler's return. */
interface HandOffs {
  fromCommit: number[];
  fromReturn: number[];
}

/** What each side runs: chains (their hand-offs) and one fan-out (ms to the fan-in's input). */
interface Side {
  chains(n: number): Promise<HandOffs>;
  fanOut(width: number): Promise<number>;
  close(): Promise<void>;
}

/** The bench's options, from the arguments after its name. */
function options(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      chains: { type: 'string', default: '200' },
      steps: { type: 'string', default: '5' },
      inflight: { type: 'string', default: '4' },
      width: { type: 'string', default: '1000' },
      rounds: { type: 'string', default: '3' },
    },
  });
  const positive = (name: keyof Options): number => {
    const n = Number(values[name]);
    if (!Number.isInteger(n) || n < 1) throw new Error(`workflows: --${name} must be a positive integer`);
    return n;
  };
  return {
    chains: positive('chains'),
    steps: positive('steps'),
    inflight: positive('inflight'),
    width: positive('width'),
    rounds: positive('rounds'),
  };
}

export async function benchWorkflows(argv: string[]): Promise<Record<string, unknown>> {
  const o = options(argv);
  if (o.steps < 2) throw new Error('workflows: --steps must be at least 2 (a chain hands off)');
  const pgc: PostgresCluster = await startPostgresCluster({ durable: true });
  const redis: TestRedis = await startRedis();
  const loadBefore = loadAverage();
  const results: Record<string, unknown> = { ...o, concurrency: CONCURRENCY, loadBefore };
  let bull: Side | undefined;
  let ours: Side | undefined;
  try {
    bull = await bullmqSide(redis.url, o);
    ours = await cronwardenSide(pgc.url, redis.url, o);
    // (a) hand-off: half the chains per round, rounds BullMQ, ours, ours, BullMQ.
    const half = Math.max(1, Math.floor(o.chains / 2));
    const b1 = await bull.chains(half);
    const c1 = await ours.chains(half);
    const c2 = await ours.chains(half);
    const b2 = await bull.chains(half);
    const b = merge(b1, b2);
    const c = merge(c1, c2);
    const commit = { bullmq: summarize(b.fromCommit), cronwarden: summarize(c.fromCommit) };
    const ret = { bullmq: summarize(b.fromReturn), cronwarden: summarize(c.fromReturn) };
    results.handOff = {
      fromCommit: { ...commit, ratioP50: commit.cronwarden.p50 / commit.bullmq.p50 },
      fromReturn: { ...ret, ratioP50: ret.cronwarden.p50 / ret.bullmq.p50 },
    };
    table(`Step hand-off: ${2 * half} chains of ${o.steps} steps each side, ${o.inflight} in flight, ms`, [
      handOffRow('BullMQ Flows', commit.bullmq, ret.bullmq),
      handOffRow('cronwarden', commit.cronwarden, ret.cronwarden),
      {
        who: 'ratio',
        'commit→start p50': fmt(commit.cronwarden.p50 / commit.bullmq.p50),
        'commit→start p99': fmt(commit.cronwarden.p99 / commit.bullmq.p99),
        'return→start p50': fmt(ret.cronwarden.p50 / ret.bullmq.p50),
        'return→start p99': fmt(ret.cronwarden.p99 / ret.bullmq.p99),
        'hand-offs': '',
      },
    ]);

    // (b) fan-out and fan-in, rounds alternating sides.
    const totals = { bullmq: [] as number[], cronwarden: [] as number[] };
    for (let r = 0; r < o.rounds; r++) {
      const [first, second] = r % 2 === 0 ? (['bullmq', 'cronwarden'] as const) : (['cronwarden', 'bullmq'] as const);
      for (const who of [first, second]) totals[who].push(await (who === 'bullmq' ? bull : ours).fanOut(o.width));
    }
    results.fanOut = { ...totals, ratio: median(totals.cronwarden) / median(totals.bullmq) };
    table(`Fan-out of ${o.width} and fan-in: start to the fan-in's input, ${o.rounds} rounds each, ms`, [
      {
        who: 'BullMQ Flows',
        median: fmt(median(totals.bullmq), 0),
        rounds: totals.bullmq.map((x) => x.toFixed(0)).join(' '),
      },
      {
        who: 'cronwarden',
        median: fmt(median(totals.cronwarden), 0),
        rounds: totals.cronwarden.map((x) => x.toFixed(0)).join(' '),
      },
      { who: 'ratio', median: fmt(median(totals.cronwarden) / median(totals.bullmq)), rounds: '' },
    ]);
  } finally {
    results.loadAfter = loadAverage();
    console.log(`load average ${loadBefore} before, ${String(results.loadAfter)} after`);
    await ours?.close();
    await bull?.close();
    await redis.cleanup();
    await pgc.cleanup();
  }
  return results;
}

function merge(a: HandOffs, b: HandOffs): HandOffs {
  return { fromCommit: [...a.fromCommit, ...b.fromCommit], fromReturn: [...a.fromReturn, ...b.fromReturn] };
}

function handOffRow(who: string, commit: ReturnType<typeof summarize>, ret: ReturnType<typeof summarize>) {
  return {
    who,
    'commit→start p50': fmt(commit.p50, 1),
    'commit→start p99': fmt(commit.p99, 1),
    'return→start p50': fmt(ret.p50, 1),
    'return→start p99': fmt(ret.p99, 1),
    'hand-offs': String(commit.n),
  };
}

/** Run `n` chains, `inflight` at a time; `start(i)` resolves when chain i is done. */
async function closedLoop(n: number, inflight: number, start: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < n) await start(next++);
  };
  await Promise.all(Array.from({ length: Math.min(inflight, n) }, lane));
}

/** A promise and its resolve, by key. */
class Waiters {
  private readonly map = new Map<string, () => void>();
  private readonly early = new Set<string>();
  wait(key: string): Promise<void> {
    if (this.early.delete(key)) return Promise.resolve();
    return new Promise((resolve) => this.map.set(key, resolve));
  }
  done(key: string): void {
    const resolve = this.map.get(key);
    if (resolve) {
      this.map.delete(key);
      resolve();
    } else this.early.add(key);
  }
}

// ---------------------------------------------------------------- cronwarden

/** Handler times of one step run, by its run id. */
interface StepTimes {
  workflowRun: string;
  step: number;
  startMs: number;
  returnMs: number;
}

async function cronwardenSide(databaseUrl: string, redisUrl: string, o: Options): Promise<Side> {
  const namespace = `bwf${randomUUID().slice(0, 8)}`;
  const { schema } = await migrateDatabase(databaseUrl, { namespace });
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 });
  const times = new Map<string, StepTimes>();
  const chainDone = new Waiters();
  const fanInStarted = new Waiters();
  let width = 0;

  const note = (ctx: StepContext, step: number) => {
    const startMs = Date.now();
    const t: StepTimes = { workflowRun: ctx.workflowRunId, step, startMs, returnMs: startMs };
    times.set(ctx.runId, t);
    return t;
  };
  // A chain of o.steps steps, each needing the one before.
  let chain: WorkflowDefinition<Record<string, unknown>> = defineWorkflow({
    name: 'chain',
    schedule: '0 0 1 1 *',
  }).step('s1', (ctx) => {
    note(ctx, 1).returnMs = Date.now();
  });
  for (let k = 2; k <= o.steps; k++) {
    chain = chain.step(`s${k}`, {
      needs: [`s${k - 1}`],
      run: (ctx: StepContext) => {
        const t = note(ctx, k);
        if (k === o.steps) chainDone.done(ctx.workflowRunId);
        t.returnMs = Date.now();
      },
    });
  }
  const fanOut = defineWorkflow({ name: 'fan-out', schedule: '0 0 1 1 *' })
    .step('list', () => Array.from({ length: width }, (_, i) => i))
    .step('each', { needs: ['list'], map: (input) => input.list, run: (_ctx, item) => item })
    .step('join', {
      needs: ['each'],
      run: (ctx, input) => {
        fanInStarted.done(ctx.workflowRunId);
        return input.each.length;
      },
    });

  const replica = new Replica({
    replicaId: 'bench-1',
    namespace,
    schema,
    backend: new MemoryLeaseBackend(),
    databaseUrl,
    redisUrl,
    jobs: [chain, fanOut],
    admin: false,
    logger: pino({ level: 'silent' }),
    worker: { concurrency: CONCURRENCY },
  });
  await replica.start();
  /** Fire `workflow` now (retrying until the replica leads and has planned); its run id. */
  const trigger = async (workflow: string): Promise<string> => {
    for (let i = 0; ; i++) {
      const fired = await replica.trigger(workflow).catch((err: Error) => {
        if (err.name !== 'NotLeaderError' || i > 600) throw err;
        return undefined;
      });
      if (fired) return fired.runId.toString();
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  /** Wait until runs `ids` are completed in the ledger (their last commits are not in the next round). */
  const settled = async (ids: string[]) => {
    for (let i = 0; i < 6000; i++) {
      const open = await pool.query(
        `SELECT 1 FROM "${schema}".cw_runs WHERE id = ANY($1::bigint[]) AND state <> 'completed' LIMIT 1`,
        [ids],
      );
      if (open.rowCount === 0) return;
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`workflow runs ${ids.join(', ')} did not complete`);
  };
  await trigger('chain').then((id) => chainDone.wait(id)); // warm-up: leading, connections, statements
  times.clear();

  return {
    async chains(n) {
      times.clear();
      const runs: string[] = [];
      await closedLoop(n, o.inflight, async () => {
        const id = await trigger('chain');
        runs.push(id);
        await chainDone.wait(id);
      });
      await settled(runs);
      const created = await pool.query<{ id: string; created_ms: number }>(
        `SELECT id, extract(epoch FROM created_at)::float8 * 1000 AS created_ms FROM "${schema}".cw_runs
         WHERE id = ANY($1::bigint[])`,
        [[...times.keys()]],
      );
      const createdMs = new Map(created.rows.map((r) => [r.id, r.created_ms]));
      const byPlace = new Map([...times.values()].map((t) => [`${t.workflowRun}/${t.step}`, t]));
      const out: HandOffs = { fromCommit: [], fromReturn: [] };
      for (const [id, t] of times) {
        if (t.step === 1) continue;
        const parent = byPlace.get(`${t.workflowRun}/${t.step - 1}`)!;
        out.fromCommit.push(t.startMs - createdMs.get(id)!);
        out.fromReturn.push(t.startMs - parent.returnMs);
      }
      return out;
    },
    async fanOut(w) {
      width = w;
      const t0 = Date.now();
      const id = await trigger('fan-out');
      await fanInStarted.wait(id);
      const ms = Date.now() - t0;
      await settled([id]);
      return ms;
    },
    async close() {
      await replica.stop();
      await pool.end();
    },
  };
}

// ---------------------------------------------------------------- BullMQ Flows

async function bullmqSide(redisUrl: string, o: Options): Promise<Side> {
  const queueName = `bwf-${randomUUID().slice(0, 8)}`;
  const conn = new Redis(redisUrl, { maxRetriesPerRequest: null });
  const queue = new Queue(queueName, { connection: conn });
  const flows = new FlowProducer({ connection: conn });
  /** By `<chain>/<step>`: handler start and return, and the finishedOn BullMQ wrote. */
  const starts = new Map<string, { startMs: number; returnMs: number; finishedOn?: number }>();
  const chainDone = new Waiters();
  const fanInHasInput = new Waiters();
  const workerConn = conn.duplicate({ maxRetriesPerRequest: null });
  const worker = new Worker(
    queueName,
    async (job) => {
      const startMs = Date.now();
      const d = job.data as { chain?: string; step?: number; fanOut?: string };
      if (job.name === 'join') {
        const values = await job.getChildrenValues();
        fanInHasInput.done(d.fanOut!);
        return Object.keys(values).length;
      }
      if (job.name === 'item') return 1;
      const t = { startMs, returnMs: startMs };
      starts.set(`${d.chain}/${d.step}`, t);
      if (d.step === o.steps) chainDone.done(d.chain!);
      t.returnMs = Date.now();
      return d.step;
    },
    { connection: workerConn, concurrency: CONCURRENCY },
  );
  worker.on('completed', (job) => {
    const d = job.data as { chain?: string; step?: number };
    const t = d.chain ? starts.get(`${d.chain}/${d.step}`) : undefined;
    if (t && job.finishedOn) t.finishedOn = job.finishedOn;
  });
  await worker.waitUntilReady();
  let round = 0;

  /** Chain `chain` as BullMQ nests it: the last step is the root, the first the deepest child. */
  const nested = (chain: string, step: number): FlowJob => ({
    name: `s${step}`,
    queueName,
    data: { chain, step },
    ...(step > 1 ? { children: [nested(chain, step - 1)] } : {}),
  });

  return {
    async chains(n) {
      starts.clear();
      round++;
      const ids: string[] = [];
      await closedLoop(n, o.inflight, async (i) => {
        const chain = `r${round}c${i}`;
        ids.push(chain);
        await flows.add(nested(chain, o.steps));
        await chainDone.wait(chain);
      });
      // The last step's 'completed' event comes just after its return: wait for every finishedOn.
      for (let i = 0; i < 500 && [...starts.values()].some((t) => t.finishedOn === undefined); i++)
        await new Promise((r) => setTimeout(r, 10));
      const out: HandOffs = { fromCommit: [], fromReturn: [] };
      for (const chain of ids)
        for (let k = 2; k <= o.steps; k++) {
          const t = starts.get(`${chain}/${k}`)!;
          const child = starts.get(`${chain}/${k - 1}`)!;
          out.fromCommit.push(t.startMs - child.finishedOn!);
          out.fromReturn.push(t.startMs - child.returnMs);
        }
      return out;
    },
    async fanOut(width) {
      const fanOut = randomUUID().slice(0, 8);
      const t0 = Date.now();
      await flows.add({
        name: 'join',
        queueName,
        data: { fanOut },
        children: Array.from({ length: width }, (_, i) => ({ name: 'item', queueName, data: { i } })),
      });
      await fanInHasInput.wait(fanOut);
      return Date.now() - t0;
    },
    async close() {
      await worker.close();
      await flows.close();
      await queue.obliterate({ force: true });
      await queue.close();
      await workerConn.quit();
      await conn.quit();
    },
  };
}
