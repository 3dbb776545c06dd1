/**
 * Sharded leadership as the backend shows it: every shard's holder, sampled every few tens of
 * milliseconds for the whole drill, beside which replicas were running at that moment (not struck,
 * not frozen) and which of those had joined (a member beat within a TTL). A sample is kept only when
 * something changed, so the record is a step function; the measurements over it are pure, so unit
 * tests feed them a planted timeline.
 *
 * Live replicas, whose number sets the fair share ceil(shards / live) (shard-map.ts's fairShare):
 * the joined ones, and any running one that holds a shard. A replacement the drill has just spawned
 * is not live until it joins: a replica process takes seconds to load (7 to 15 s on a busy 2-core
 * host), and counting it from its spawn would charge every kill with that start-up.
 *
 * What a fault is charged with, from its strike to the next fault:
 * - rebalanceMs: until every shard has a running holder and no live replica holds more than the
 *   fair share. Only a state sampled after the strike counts: the one before it shows the struck
 *   replica still running;
 * - maxLeaderlessMs: the longest stretch any one shard had no running holder (no holder at all, or
 *   one that is dead or frozen: a killed replica's lease names it until it lapses).
 * Sampling costs up to one poll of precision (a stretch may start up to that much before its first
 * sample).
 */
import type { LeaseBackend } from '../locks/lease.js';
import { fairShare } from '../scheduler/shards/shard-map.js';

export interface ShardSample {
  at: number;
  /** Holder of each shard's lease (null: nobody holds it). */
  holders: (string | null)[];
  /** Replica processes running at that moment, neither struck nor frozen (sorted): a holder among them leads. */
  running: string[];
  /** Of those, the ones that had joined, a member beat within a TTL (sorted). */
  joined: string[];
}

/** Who is running, and who of them has joined, right now. */
export interface Liveness {
  running: string[];
  joined: string[];
}

export interface ShardMeasure {
  /** From the strike until the shards were balanced among the live replicas (null: not within the stretch). */
  rebalanceMs: number | null;
  /** The longest stretch one shard had no running holder (0: none). */
  maxLeaderlessMs: number;
  /** That shard (null: none was without a leader). */
  maxLeaderlessShard: number | null;
}

export class ShardTimeline {
  readonly samples: ShardSample[] = [];
  private running = true;
  private readonly loop: Promise<void>;

  constructor(
    backend: LeaseBackend,
    leaseNames: readonly string[],
    liveness: () => Liveness | Promise<Liveness>,
    everyMs = 25,
  ) {
    this.loop = (async () => {
      while (this.running) {
        const read = await Promise.all(
          leaseNames.map((n) =>
            backend.current(n).then(
              (r) => r?.holder ?? null,
              () => undefined,
            ),
          ),
        );
        const last = this.samples.at(-1);
        // A backend that does not answer (restarting) leaves that shard's holder as it was.
        const holders = read.map((h, i) => (h === undefined ? (last?.holders[i] ?? null) : h));
        const { running, joined } = await liveness();
        const sample = { at: Date.now(), holders, running: [...running].sort(), joined: [...joined].sort() };
        if (!last || !sameState(last, sample)) this.samples.push(sample);
        await new Promise((r) => setTimeout(r, everyMs));
      }
    })();
  }

  measure(from: number, to: number): ShardMeasure {
    return measureShards(this.samples, from, to);
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }
}

const sameList = <T>(a: readonly T[], b: readonly T[]) => a.length === b.length && a.every((x, i) => x === b[i]);

function sameState(a: ShardSample, b: ShardSample): boolean {
  return sameList(a.holders, b.holders) && sameList(a.running, b.running) && sameList(a.joined, b.joined);
}

/**
 * Every shard has a running holder and no live replica (joined, or running and holding a shard)
 * holds more than ceil(shards / live).
 */
export function isBalanced(s: ShardSample): boolean {
  const running = new Set(s.running);
  const live = new Set(s.joined.filter((id) => running.has(id)));
  const held = new Map<string, number>();
  for (const h of s.holders) {
    if (h === null || !running.has(h)) return false;
    held.set(h, (held.get(h) ?? 0) + 1);
    live.add(h);
  }
  const fair = fairShare(s.holders.length, live.size);
  return [...held.values()].every((n) => n <= fair);
}

/** Every one of `replicas` replicas is running and has joined, and the shards are balanced among them. */
export function isWhole(s: ShardSample, replicas: number): boolean {
  const running = new Set(s.running);
  return s.joined.filter((id) => running.has(id)).length >= replicas && isBalanced(s);
}

/** Measure the stretch [from, to) of a timeline (samples in time order, kept on change). */
export function measureShards(samples: readonly ShardSample[], from: number, to: number): ShardMeasure {
  const before = [...samples].reverse().find((s) => s.at <= from);
  const after = samples.filter((s) => s.at > from && s.at < to);
  let rebalanceMs: number | null;
  if (after.length === 0) rebalanceMs = before && isBalanced(before) ? 0 : null;
  else {
    const balanced = after.find(isBalanced);
    rebalanceMs = balanced ? balanced.at - from : null;
  }
  const states = before ? [before, ...after] : after;
  const shards = states[0]?.holders.length ?? 0;
  let maxLeaderlessMs = 0;
  let maxLeaderlessShard: number | null = null;
  for (let shard = 0; shard < shards; shard++) {
    let since: number | null = null;
    const close = (t: number) => {
      if (since !== null && t - since > maxLeaderlessMs) [maxLeaderlessMs, maxLeaderlessShard] = [t - since, shard];
      since = null;
    };
    for (const s of states) {
      const t = Math.max(s.at, from);
      const holder = s.holders[shard] ?? null;
      const led = holder !== null && s.running.includes(holder);
      if (!led && since === null) since = t;
      else if (led) close(t);
    }
    close(to); // still without a leader at the end of the stretch
  }
  return { rebalanceMs, maxLeaderlessMs, maxLeaderlessShard };
}

/** Which shards each replica held at some point of the timeline. */
export function shardsLed(samples: readonly ShardSample[]): Record<string, number[]> {
  const led = new Map<string, Set<number>>();
  for (const s of samples)
    s.holders.forEach((h, shard) => {
      if (h !== null) led.set(h, (led.get(h) ?? new Set()).add(shard));
    });
  return Object.fromEntries(
    [...led.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([h, set]) => [h, [...set].sort((a, b) => a - b)]),
  );
}
