/**
 * Long synchronous loops (arming a million schedules) in slices: after each `sliceMs` of work the
 * loop yields to the event loop, so lease renewals, timers and I/O never wait behind it for long.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';

/** The event loop is handed back at least this often during a long loop. */
export const SLICE_MS = 10;

/** Call `fn` for each item, yielding between slices; stops early (false) once `keepGoing` says no. */
export async function forEachSliced<T>(
  items: Iterable<T>,
  fn: (item: T) => void,
  keepGoing: () => boolean = () => true,
  sliceMs = SLICE_MS,
): Promise<boolean> {
  let sliceEnd = performance.now() + sliceMs;
  let n = 0;
  for (const item of items) {
    fn(item);
    // Reading the time costs too: look every 64 items.
    if ((++n & 63) === 0 && performance.now() >= sliceEnd) {
      await nextTurn();
      if (!keepGoing()) return false;
      sliceEnd = performance.now() + sliceMs;
    }
  }
  return keepGoing();
}
