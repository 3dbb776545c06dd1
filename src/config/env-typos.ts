/**
 * CRONWARDEN_* variables that look like a misspelt setting. A variable the configuration does not
 * know is ignored, so `CRONWARDEN_LEASE_TTL=5000` (no `_MS`) silently left the default in force.
 * Only names close to a setting's (config-file.ts's nearestKey, which also suggests file keys)
 * are reported: the project's own tooling uses other CRONWARDEN_ variables (tests, the demo,
 * benchmarks), which are not typos.
 */
import { nearestKey } from './config-file.js';
import { envName, settingKeys, type SettingKey } from './settings.js';

export interface EnvTypo {
  name: string;
  /** The setting's variable it is closest to. */
  nearest: string;
}

/** The CRONWARDEN_ variables of `env` that are no setting's but look like one's. */
export function envTypos(env: NodeJS.ProcessEnv): EnvTypo[] {
  const known = new Set(settingKeys.map(envName));
  const typos: EnvTypo[] = [];
  for (const name of Object.keys(env)) {
    if (!/^cronwarden_/i.test(name) || known.has(name)) continue;
    const key = nearestKey(name);
    if (key) typos.push({ name, nearest: envName(key as SettingKey) });
  }
  return typos.sort((a, b) => a.name.localeCompare(b.name));
}
