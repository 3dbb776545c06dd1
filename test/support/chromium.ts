/**
 * Headless Debian Chromium (installed by scripts/install-deps.sh; CRONWARDEN_CHROMIUM elsewhere) for
 * the console's page tests, each on a throwaway profile directory that close() removes.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM = process.env.CRONWARDEN_CHROMIUM ?? '/usr/bin/chromium';

export interface HeadlessChromium {
  browser: BrowserContext;
  /** Close the browser and remove its profile. */
  close(): Promise<void>;
}

export async function launchChromium(viewport?: { width: number; height: number }): Promise<HeadlessChromium> {
  // A fresh profile directory: playwright passes it to chromium as --user-data-dir.
  const profile = await mkdtemp(join(tmpdir(), 'cw-chromium-'));
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    ...(viewport ? { viewport } : {}),
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    browser,
    close: async () => {
      await browser.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}
