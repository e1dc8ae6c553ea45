/**
 * The usage footer of a turn and the session total, against the real
 * server: the token counts shown are the ones the OpenAI-protocol test
 * server (tests/openai_server/) reported in its `usage`, recomputed here
 * from its request log the way it computes them.
 */
import { expect, test } from '@jupyterlab/galata';
import * as fs from 'fs';
import * as path from 'path';

import {
  ask,
  notebookWithDf,
  openPanel,
  panel,
  screenshotPath,
  OPENAI_LOG
} from './helpers';

// Matches the "How many flights are in the table" rule of the replies file;
// the suffix tells this test's requests from any other in the shared log.
const INTENT = 'How many flights are in the table? (usage footer)';
const REPLIES = path.resolve(__dirname, '..', 'fixtures', 'replies.json');

/** The test server's tokens: words with their leading whitespace (tests/openai_server/request.py). */
function tokenize(text: string): string[] {
  return text.match(/\s*\S+|\s+$/g) ?? [];
}

function logLines(): string[] {
  return fs.existsSync(OPENAI_LOG)
    ? fs
        .readFileSync(OPENAI_LOG, 'utf-8')
        .split('\n')
        .filter(line => line.trim())
    : [];
}

/** What the test server reported as `usage` for the model calls of INTENT
 * logged after line `from` (the log is kept across runs). */
function reportedUsage(from: number): {
  prompt: number;
  completion: number;
  calls: number;
} {
  const rules = JSON.parse(fs.readFileSync(REPLIES, 'utf-8'));
  const requests = logLines()
    .slice(from)
    .map(line => JSON.parse(line))
    .filter(req => req.method === 'POST');
  let prompt = 0;
  let completion = 0;
  let calls = 0;
  for (const req of requests) {
    const text: string = req.body.messages
      ? req.body.messages.map((m: any) => String(m.content ?? '')).join('\n')
      : String(req.body.prompt ?? '');
    if (!text.includes(INTENT)) {
      continue;
    }
    calls += 1;
    prompt += tokenize(text).length;
    const rule = rules.rules.find((r: any) => text.includes(r.match));
    let reply: string = rule ? rule.reply : rules.default;
    const stops: string[] = [].concat(req.body.stop ?? []);
    const cuts = stops.filter(s => s && reply.includes(s));
    if (cuts.length) {
      reply = reply.slice(0, Math.min(...cuts.map(s => reply.indexOf(s))));
    }
    const max = req.body.max_tokens ?? req.body.max_completion_tokens;
    const tokens = tokenize(reply).length;
    completion +=
      (max ? Math.min(tokens, Number(max)) : tokens) * (req.body.n ?? 1);
  }
  return { prompt, completion, calls };
}

const format = (n: number) => n.toLocaleString('en-US');

test('a finished turn shows its tokens, model calls and time; the session adds them up', async ({
  page
}) => {
  await notebookWithDf(page, 'usage.ipynb');
  await openPanel(page);
  // Before any turn there is nothing to add up.
  await expect(panel(page).locator('.jp-DataAgent-total')).toHaveCount(0);

  const from = logLines().length;
  await ask(page, INTENT);
  const exchange = panel(page).locator('.jp-DataAgent-exchange').first();
  const footer = exchange.locator('.jp-DataAgent-usage');
  await expect(footer).toBeVisible({ timeout: 90_000 });

  const usage = reportedUsage(from);
  expect(usage.calls).toBe(1);
  expect(usage.prompt).toBeGreaterThan(50);
  expect(usage.completion).toBeGreaterThan(0);
  await expect(footer).toContainText(
    `${format(usage.prompt)} in / ${format(usage.completion)} out tokens`
  );
  await expect(footer).toContainText('1 model call');
  // The wall time, and the model's share of it (timed around the backend).
  await expect(footer).toContainText(/\d+(\.\d)? s \(model \d+(\.\d)? s\)/);
  // The test server's model has no price: no cost is estimated.
  await expect(footer).not.toContainText('$');
  await expect(footer).toHaveAttribute('title', /Prompt tokens: /);

  const total = panel(page).locator('.jp-DataAgent-total');
  await expect(total).toContainText('Session, 1 turn:');
  await expect(total).toContainText(
    `${format(usage.prompt)} in / ${format(usage.completion)} out tokens`
  );
  await expect(total).toContainText('1 model call');
  await panel(page).screenshot({ path: screenshotPath('usage-footer.png') });
});
