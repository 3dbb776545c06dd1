/**
 * How long a follower waits past a slot before it stands in: learned from the leader. Each check
 * that finds its slot committed by the leader tells how late the leader commits (the run's
 * created_at minus its slot); the grace is twice the worst of the last minute's, plus a margin,
 * between FLOOR_MS and the configured grace (standInGraceMs, the most a follower ever waits).
 * A crashed leader then costs about its own usual lateness, not a fixed half second, and a leader
 * that commits late (a burst of fires, a slow ledger) raises the grace itself before it is raced.
 * With nothing seen yet (a follower just started, a cluster whose slots are rare) it is the
 * configured grace. Commits by stand-ins are not the leader's lateness and are not counted.
 *
 * Once a check at that grace finds the leader committed none of its slots (crashed, most likely),
 * the next slots are checked MISSING_MS after they are due, for as long as the crashed leader's
 * lease can last (its TTL: by then a new leader fires), or until a leader's commit is seen again.
 * Only the first slot after a crash then waits the learned grace, not every slot until the next
 * election. The hold is not renewed by the quick checks themselves, so a leader that was only
 * paused and commits again is raced for at most one TTL even if it commits later than MISSING_MS.
 */
import type { Clock } from '../../clock.js';

/** The least a follower waits: well above the leader's commit round trip on a quiet cluster. */
export const FLOOR_MS = 50;
/** Added to twice the worst lateness seen: a loaded event loop's jitter. */
const MARGIN_MS = 20;
/** How soon after a slot a follower looks while the leader is missing: timers' and clocks' jitter. */
export const MISSING_MS = 10;
/** How long a seen lateness counts. */
const WINDOW_MS = 60_000;
/** The most observations kept (the newest). */
const KEPT = 256;

export class StandInGrace {
  private readonly seen: { at: number; lateMs: number }[] = [];
  /** Until when (monotonic) the leader counts as missing; -Infinity: not missing. */
  private missingUntil = -Infinity;

  /** `ceilingMs`: the configured grace; 0 turns stand-ins off (and this with them). */
  constructor(
    private readonly ceilingMs: number,
    private readonly clock: Pick<Clock, 'monotonic'>,
  ) {}

  /** The leader committed a slot `lateMs` after it was due. */
  observe(lateMs: number): void {
    if (!Number.isFinite(lateMs)) return;
    this.seen.push({ at: this.clock.monotonic(), lateMs: Math.max(0, lateMs) });
    if (this.seen.length > KEPT) this.seen.splice(0, this.seen.length - KEPT);
  }

  /** The leader committed none of a check's slots by the grace: missing for `holdMs` (its lease TTL). */
  leaderMissed(holdMs: number): void {
    this.missingUntil = this.clock.monotonic() + holdMs;
  }

  /** A leader's commit was seen: it is not missing (any more). */
  leaderSeen(): void {
    this.missingUntil = -Infinity;
  }

  /** Whether the leader counts as missing now (checks come MISSING_MS after their slots). */
  get leaderMissing(): boolean {
    return this.clock.monotonic() < this.missingUntil;
  }

  /** The grace now: how long past a slot to wait for the leader's commit. */
  current(): number {
    if (this.leaderMissing) return Math.min(this.ceilingMs, MISSING_MS);
    const since = this.clock.monotonic() - WINDOW_MS;
    while (this.seen.length > 0 && this.seen[0]!.at < since) this.seen.shift();
    if (this.seen.length === 0) return this.ceilingMs;
    let worst = 0;
    for (const s of this.seen) worst = Math.max(worst, s.lateMs);
    return Math.min(this.ceilingMs, Math.max(FLOOR_MS, 2 * worst + MARGIN_MS));
  }

  /** The configured grace: the most a follower waits, for a slot that found the leader alive but behind. */
  get ceiling(): number {
    return this.ceilingMs;
  }
}
