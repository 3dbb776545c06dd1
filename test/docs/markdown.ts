/**
 * The docs as the tests read them: README.md and every page under docs/, their fenced code blocks,
 * and the `<!-- sample: … -->` marker a block may carry on the line before its fence.
 *
 * Markers (keep them rare; a reader copies samples whole):
 * - `<!-- sample: skip <why> -->`: not compiled (say why).
 * - `<!-- sample: fragment -->`: a handler's body; compiled inside `defineJob({ …, handler: async (ctx) => { … } })`.
 * - `<!-- sample: run -->`: compiled, then run (it must exit 0 by itself).
 * - `<!-- sample: shell <name> -->`: a shell block a test runs by name.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

export interface Marker {
  kind: 'skip' | 'fragment' | 'run' | 'shell';
  arg: string;
}

export interface CodeBlock {
  /** Path from the repository root, e.g. docs/guides/sharding.md. */
  file: string;
  /** 1-based line of the block's first code line. */
  line: number;
  lang: string;
  code: string;
  marker: Marker | undefined;
}

/** README.md and docs/**\/*.md, sorted, relative to the repository root. */
export function docFiles(): string[] {
  const found: string[] = ['README.md'];
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(repoRoot, dir), { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) found.push(path);
    }
  };
  walk('docs');
  return found.sort();
}

export function readDoc(file: string): string {
  return readFileSync(join(repoRoot, file), 'utf8');
}

const MARKER = /^<!--\s*sample:\s*(skip|fragment|run|shell)\b\s*(.*?)\s*-->$/;

/** Every fenced block of `file` (``` or ~~~ fences, any length), with its language and marker. */
export function codeBlocks(file: string): CodeBlock[] {
  const lines = readDoc(file).split('\n');
  const blocks: CodeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*([\w+-]*)/.exec(lines[i]!);
    if (!open) continue;
    const [, indent, fence, lang] = open;
    const body: string[] = [];
    let j = i + 1;
    while (j < lines.length && !lines[j]!.trimStart().startsWith(fence!)) body.push(lines[j++]!.slice(indent!.length));
    let k = i - 1;
    while (k >= 0 && lines[k]!.trim() === '') k--;
    const m = k >= 0 ? MARKER.exec(lines[k]!.trim()) : null;
    blocks.push({
      file,
      line: i + 2,
      lang: lang!.toLowerCase(),
      code: body.join('\n'),
      marker: m ? { kind: m[1] as Marker['kind'], arg: m[2]! } : undefined,
    });
    i = j;
  }
  return blocks;
}

/** The text of `file` outside its fenced blocks (prose, tables, inline code). */
export function prose(file: string): string {
  const lines = readDoc(file).split('\n');
  const out: string[] = [];
  let fence: string | undefined;
  for (const line of lines) {
    const open = /^\s*(`{3,}|~{3,})/.exec(line);
    if (fence) {
      if (line.trimStart().startsWith(fence)) fence = undefined;
      out.push('');
    } else if (open) {
      fence = open[1];
      out.push('');
    } else out.push(line);
  }
  return out.join('\n');
}

/** The inline code spans of some prose (`x` and ``x``), in order. */
export function inlineCode(text: string): string[] {
  return [...text.matchAll(/(`+)([^`\n]|[^`\n][\s\S]*?[^`\n])\1(?!`)/g)].map((m) => m[2]!.trim());
}

export const isTypeScript = (b: CodeBlock) => b.lang === 'ts' || b.lang === 'typescript';

export function where(b: Pick<CodeBlock, 'file' | 'line'>, offset = 0): string {
  return `${b.file}:${b.line + offset}`;
}

/** examples/*.ts, relative to the repository root. */
export function exampleFiles(): string[] {
  return readdirSync(join(repoRoot, 'examples'))
    .filter((f) => f.endsWith('.ts'))
    .sort()
    .map((f) => relative(repoRoot, join(repoRoot, 'examples', f)));
}
