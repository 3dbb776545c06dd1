/** Prometheus text exposition, read back in tests: a replica's /metrics, a worker's counters. */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** A strict-enough parser of the Prometheus text format: throws on a line it cannot read. */
export function parseExposition(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('# HELP ') || line.startsWith('# TYPE ')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`unparseable exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[3] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    const raw = m[4]!;
    const value = raw === '+Inf' ? Infinity : raw === '-Inf' ? -Infinity : Number(raw);
    if (Number.isNaN(value)) throw new Error(`not a number: ${line}`);
    out.push({ name: m[1]!, labels, value });
  }
  return out;
}

/** The value of the sample `name` whose labels include every one of `labels`; undefined when none. */
export function sampleValue(samples: readonly Sample[], name: string, labels: Record<string, string> = {}) {
  return samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
}
