import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';
import { InvalidConfigError } from '../errors.js';
import { fileKeys, settingName, settings, type SettingDefinition, type SettingKey } from './settings.js';

/** A config file is a few hundred bytes; anything much larger is not one. */
const MAX_BYTES = 1 << 20;

/**
 * Read the JSON config file: a regular file holding one object whose keys are setting keys.
 * Refused, with one line that never quotes the file's content (it may hold the admin token or a
 * password): anything but a regular file (a FIFO would block start-up for ever), malformed JSON
 * (only the line and column are named), a top-level value that is not an object, unknown keys
 * (with the nearest known key as a suggestion).
 */
export function readConfigFile(path: string): Record<string, unknown> {
  const name = settingName('config');
  const refuse = (message: string) => new InvalidConfigError(name, `${path}: ${message}`);
  let text: string;
  let fd: number | undefined;
  try {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw refuse('is not a regular file');
    if (stat.size > MAX_BYTES) throw refuse(`is larger than ${MAX_BYTES} bytes`);
    text = readFileSync(fd, 'utf8');
  } catch (err) {
    if (err instanceof InvalidConfigError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    throw refuse(`cannot be read (${code ?? (err as Error).message})`);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // JSON.parse's message quotes the text around the error: name the place, never the content.
    const at = jsonErrorOffset(text);
    throw refuse(at === undefined ? 'is not valid JSON' : `is not valid JSON (line ${lineColumn(text, at)})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    const kind = value === null ? 'null' : Array.isArray(value) ? 'an array' : `a ${typeof value}`;
    throw refuse(`must hold a JSON object ({"namespace": "…", …}), not ${kind}`);
  }
  const object = value as Record<string, unknown>;
  const unknown = Object.keys(object).filter((k) => !fileKeys.includes(k));
  if (unknown.length > 0) throw refuse(unknown.map(describeUnknownKey).join('; '));
  return object;
}

function describeUnknownKey(key: string): string {
  // A key is not a secret, but a garbled file could put anything there: quote only key-like text.
  const shown = /^[A-Za-z0-9_.-]{1,64}$/.test(key) ? `"${key}"` : 'a key';
  const renamed = (Object.keys(settings) as SettingKey[]).find(
    (k) => (settings[k] as SettingDefinition).formerFileKey === key,
  );
  if (renamed) return `unknown key ${shown}: it is now "${renamed}"`;
  const near = nearestKey(key);
  return near
    ? `unknown key ${shown} (did you mean "${near}"?)`
    : `unknown key ${shown} (known keys: ${fileKeys.join(', ')})`;
}

/**
 * The known key closest to `key`: the same letters ignoring case, `_` and `-`
 * (`CRONWARDEN_ADMIN_PORT`, `admin-port`), or within a few edits (`namespce`, `adminToke`).
 */
export function nearestKey(key: string): string | undefined {
  const norm = (s: string) =>
    s
      .toLowerCase()
      .replace(/^cronwarden/, '')
      .replace(/[^a-z0-9]/g, '');
  const exact = fileKeys.find((k) => norm(k) === norm(key));
  if (exact) return exact;
  let best: { key: string; d: number } | undefined;
  for (const k of fileKeys) {
    const d = editDistance(norm(k), norm(key));
    if (d <= Math.max(1, Math.floor(k.length / 4)) && (!best || d < best.d)) best = { key: k, d };
  }
  return best?.key;
}

/**
 * Optimal-string-alignment distance (insert, delete, substitute, swap neighbours). Hand-written:
 * ten lines for a handful of short keys do not warrant a dependency, and commander's own
 * suggester is not exported.
 */
function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

function lineColumn(text: string, offset: number): string {
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  const column = offset - before.lastIndexOf('\n');
  return `${line}, column ${column}`;
}

/**
 * Where JSON.parse failed, found by a strict JSON scanner: Node 20's SyntaxError sometimes gives
 * a position and sometimes only a quote of the text there, which may be a secret. Hand-written
 * because no JSON parser reporting positions is among our dependencies; it runs only after
 * JSON.parse has already refused the text. Undefined if it finds no error (or nests too deep).
 */
export function jsonErrorOffset(text: string): number | undefined {
  const scan = new JsonScanner(text);
  try {
    scan.document();
    return undefined;
  } catch (err) {
    if (err instanceof JsonScanStop) return err.offset;
    if (err instanceof RangeError) return undefined; // nested deeper than the stack
    throw err;
  }
}

/** A recursive-descent walk over JSON text that throws JsonScanStop at the first offset it refuses. */
class JsonScanner {
  private i = 0;

  constructor(private readonly text: string) {}

  /** One value, then only whitespace to the end. */
  document(): void {
    this.value();
    this.ws();
    if (this.i < this.text.length) this.fail();
  }

  private fail(): never {
    throw new JsonScanStop(this.i);
  }

  private ws(): void {
    while (this.i < this.text.length && ' \t\n\r'.includes(this.text[this.i]!)) this.i++;
  }

  private expect(ch: string): void {
    this.ws();
    if (this.text[this.i] !== ch) this.fail();
    this.i++;
  }

  /** Consume a match of the sticky `re` here, or fail. */
  private sticky(re: RegExp): void {
    re.lastIndex = this.i;
    const m = re.exec(this.text);
    if (!m) this.fail();
    this.i += m[0].length;
  }

  private string(): void {
    this.i++; // the opening quote
    for (;;) {
      if (this.i >= this.text.length) this.fail();
      const c = this.text.charCodeAt(this.i);
      if (c === 0x22) return void this.i++;
      if (c < 0x20) this.fail();
      if (c === 0x5c) this.sticky(/\\(["\\/bfnrt]|u[0-9a-fA-F]{4})/y);
      else this.i++;
    }
  }

  private value(): void {
    this.ws();
    const c = this.text[this.i];
    if (c === '"') return this.string();
    if (c === '{' || c === '[') return this.container(c);
    this.sticky(/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?|true|false|null/y);
  }

  /** An object or array, from its opening bracket: members (key: value in an object) split by commas. */
  private container(open: '{' | '['): void {
    const close = open === '{' ? '}' : ']';
    this.i++;
    this.ws();
    if (this.text[this.i] === close) return void this.i++;
    for (;;) {
      if (open === '{') {
        this.ws();
        if (this.text[this.i] !== '"') this.fail();
        this.string();
        this.expect(':');
      }
      this.value();
      this.ws();
      if (this.text[this.i] === ',') {
        this.i++;
        continue;
      }
      return this.expect(close);
    }
  }
}

/** Thrown inside the scanner to stop it at `offset`; an Error so the throw is an error object. */
class JsonScanStop extends Error {
  constructor(readonly offset: number) {
    super(`JSON syntax error at offset ${offset}`);
  }
}
