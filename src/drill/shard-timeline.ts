/**
 * Sharded leadership as the backend shows it: every shard's holder, sampled every few tens of
 * milliseconds for the whole drill, beside which replicas were live at that moment (running, not
 * struck, not frozen). A sample is kept only when something changed, so the record is a step
 * function; the measurements over it are pure, so unit tests feed them a planted timeline.
 *
 * What a fault is charged with, from its strike to the next fault:
 * - rebalanceMs: until every shard has a live holder and no live replica holds more than its fair
 *   share, ceil(shards / live) (shard-map.ts's fairShare). Only a state sampled after the strike
 *   counts: the one before it shows the struck replica still live;
 * - maxLeaderlessMs: the longest stretch any one shard had no live holder (no holder at all, or one
 *   that is dead or frozen: a killed replica's lease names it until it lapses).
 * Sampling costs up to one poll of precision (a stretch may start up to that much before its first
 * sample).
 */
import type { LeaseBackend } from '../locks/lease.js';
import { fairShare } from '../scheduler/shard-map.js';

export interface ShardSample {
  at: number;
  /** Holder of each shard's lease (null: nobody holds it). */
  holders: (string | null)[];
  /** Replicas live at that moment (sorted). */
  live: string[];
}

export interface ShardMeasure {
  /** From the strike until the shards were balanced among the live replicas (null: not within the stretch). */
  rebalanceMs: number | null;
  /** The longest stretch one shard had no live holder (0: none). */
  maxLeaderlessMs: number;
  /** That shard (null: none was without a leader). */
  maxLeaderlessShard: number | null;
}

export class ShardTimeline {
  readonly samples: ShardSample[] = [];
  private running = true;
  private readonly loop: Promise<void>;

  constructor(backend: LeaseBackend, leaseNames: readonly string[], live: () => string[], everyMs = 25) {
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
        const sample = { at: Date.now(), holders, live: [...live()].sort() };
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

function sameState(a: ShardSample, b: ShardSample): boolean {
  return (
    a.holders.length === b.holders.length &&
    a.holders.every((h, i) => h === b.holders[i]) &&
    a.live.length === b.live.length &&
    a.live.every((id, i) => id === b.live[i])
  );
}

/** Every shard has a live holder and no live replica holds more than ceil(shards / live). */
export function isBalanced(s: ShardSample): boolean {
  const live = new Set(s.live);
  const held = new Map<string, number>();
  for (const h of s.holders) {
    if (h === null || !live.has(h)) return false;
    held.set(h, (held.get(h) ?? 0) + 1);
  }
  const fair = fairShare(s.holders.length, live.size);
  return [...held.values()].every((n) => n <= fair);
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
      const led = holder !== null && s.live.includes(holder);
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
