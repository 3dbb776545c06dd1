/**
 * Who the backend says holds the lease, sampled every few milliseconds for the whole drill, so a
 * fault can be charged with every change of leader it caused (a flap on a lossy link included).
 */
import type { LeaseBackend } from '../locks/lease.js';

export class LeaderTimeline {
  private readonly samples: { at: number; holder: string | null }[] = [];
  private running = true;
  private readonly loop: Promise<void>;

  constructor(backend: LeaseBackend, leaseName: string, everyMs = 20) {
    this.loop = (async () => {
      while (this.running) {
        // A backend that does not answer (restarting) leaves a hole, not a change.
        const rec = await backend.current(leaseName).then(
          (r) => ({ ok: true as const, holder: r?.holder ?? null }),
          () => ({ ok: false as const }),
        );
        if (rec.ok && this.samples.at(-1)?.holder !== rec.holder)
          this.samples.push({ at: Date.now(), holder: rec.holder });
        await new Promise((r) => setTimeout(r, everyMs));
      }
    })();
  }

  /** Changes to a different replica between `from` and `to` (an expired lease is not a change). */
  changesBetween(from: number, to: number): number {
    let last = [...this.samples].reverse().find((s) => s.at < from && s.holder !== null)?.holder ?? null;
    let changes = 0;
    for (const s of this.samples) {
      if (s.at < from || s.at > to || s.holder === null) continue;
      if (last !== null && s.holder !== last) changes++;
      last = s.holder;
    }
    return changes;
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
  }
}
