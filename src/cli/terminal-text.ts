/**
 * What the CLI prints of text it did not write itself (a handler's error and stack, job names,
 * pause reasons, replica ids, a replica's error message) goes through here, so that text cannot
 * drive the operator's terminal: an `ESC ] 0 ; title BEL` would retitle the window, `ESC [ 2K CR`
 * erase the line before it. Every control character (C0, DEL, C1) and the bidirectional overrides
 * that reorder what is shown are printed as a `\uXXXX` escape instead, which is also valid inside
 * a JSON string, so `--json` output stays JSON. The admin API refuses them on input where it can
 * (a pause reason); this is the other end, for what is already stored.
 */

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
// eslint-disable-next-line no-control-regex
const CONTROL_OR_BREAK = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

const escape = (c: string) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`;

/** `text` with every control character escaped but newline and tab (a stack stays readable). */
export function terminalSafe(text: string): string {
  return text.replace(CONTROL, escape);
}

/** `text` on one line: newlines and tabs escaped too (a table cell, a line of `key value`). */
export function oneLineSafe(text: string): string {
  return text.replace(CONTROL_OR_BREAK, escape);
}

/** Writes `text` to stdout with every control character but newline and tab escaped. */
export function print(text: string): void {
  process.stdout.write(terminalSafe(text));
}

/** The same on stderr. */
export function printError(text: string): void {
  process.stderr.write(terminalSafe(text));
}
