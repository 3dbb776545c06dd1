/**
 * Type-check docs samples and examples with the TypeScript compiler API, strict, as one program:
 * the project's tsconfig.json with 'cronwarden' mapped to src/index.ts, so a sample is checked
 * against the sources as they are (no build needed).
 */
import { join } from 'node:path';
import ts from 'typescript';
import { repoRoot } from './markdown.js';

export interface SampleSource {
  /** Where a diagnostic is reported: a Markdown file and line, or an example's path. */
  label: string;
  /** The compiled text (a fragment already wrapped). */
  text: string;
  /** Lines added before the sample's first line (a fragment's wrapper), subtracted in reports. */
  preludeLines: number;
  /** The Markdown line of the sample's first line; 1 for a file. */
  firstLine: number;
  /** A file on disk (an example): compiled from there. */
  path?: string;
}

function compilerOptions(): ts.CompilerOptions {
  const parsed = ts.getParsedCommandLineOfConfigFile(join(repoRoot, 'tsconfig.json'), undefined, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    },
  });
  if (!parsed) throw new Error('tsconfig.json could not be read');
  return {
    ...parsed.options,
    noEmit: true,
    declaration: false,
    sourceMap: false,
    strict: true,
    baseUrl: repoRoot,
    paths: { cronwarden: ['src/index.ts'] },
  };
}

/** Diagnostics of every source, as "label:line: message" lines; empty when all compile. */
export function typeCheck(sources: SampleSource[]): string[] {
  const virtual = new Map<string, SampleSource>();
  const byPath = new Map<string, SampleSource>();
  sources.forEach((s, i) => {
    const path = s.path ?? join(repoRoot, '.docs-samples', `sample-${i}.ts`);
    byPath.set(path, s);
    if (!s.path) virtual.set(path, s);
  });
  const options = compilerOptions();
  const host = ts.createCompilerHost(options, true);
  const { getSourceFile, fileExists, readFile } = host;
  host.fileExists = (f) => virtual.has(f) || fileExists.call(host, f);
  host.readFile = (f) => virtual.get(f)?.text ?? readFile.call(host, f);
  host.getSourceFile = (f, language, onError, create) => {
    const s = virtual.get(f);
    return s ? ts.createSourceFile(f, s.text, language, true) : getSourceFile.call(host, f, language, onError, create);
  };
  const program = ts.createProgram([...byPath.keys()], options, host);
  const problems: string[] = [];
  for (const [path, s] of byPath) {
    const file = program.getSourceFile(path);
    if (!file) {
      problems.push(`${s.label}: not compiled`);
      continue;
    }
    const diagnostics = [...program.getSyntacticDiagnostics(file), ...program.getSemanticDiagnostics(file)];
    for (const d of diagnostics) {
      const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line : 0;
      const at = s.path ? `${s.label}:${line + 1}` : `${s.label}:${s.firstLine + line - s.preludeLines}`;
      problems.push(`${at}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n  ')}`);
    }
  }
  return problems;
}
