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
  loggedRequests,
  logLength,
  notebookWithDf,
  openPanel,
  panel,
  promptOf,
  reloadAndReopen,
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

// Two models offered, one priced (ui-tests/jupyter_server_test_config.py:
// big-model at $5 / $15 per million input / output tokens; test-model none).
const ON_FREE = 'How many flights are in the table? (cost on test-model)';
const ON_PRICED = 'How many flights are in the table? (cost on big-model)';

/** "1,234 in / 56 out tokens" in a usage line: [1234, 56]. */
function tokensIn(line: string): [number, number] {
  const match = line.match(/([\d,]+) in \/ ([\d,]+) out tokens/);
  if (!match) {
    throw new Error(`no token counts in ${JSON.stringify(line)}`);
  }
  return [
    Number(match[1].replace(/,/g, '')),
    Number(match[2].replace(/,/g, ''))
  ];
}

/** The sidebar's estimate as it writes it (src/usage.ts formatCost), at big-model's price. */
function bigModelCost([prompt, completion]: [number, number]): string {
  const usd = (prompt * 5 + completion * 15) / 1e6;
  if (usd < 0.0001) {
    return '< $0.0001';
  }
  return usd < 0.01 ? `$${usd.toFixed(4)}` : `$${usd.toFixed(2)}`;
}

test('each turn is priced at the model it ran on; the session adds up those costs, after a reload too', async ({
  page
}) => {
  test.setTimeout(300_000);
  await notebookWithDf(page, 'usage-models.ipynb');
  await openPanel(page);
  const sidebar = panel(page);
  const picker = sidebar.locator('.jp-DataAgent-model select');
  await expect(picker.locator('option')).toHaveText([
    'test-model',
    'big-model'
  ]);
  const turn = (intent: string) =>
    panel(page).locator('.jp-DataAgent-exchange', { hasText: intent });
  const footer = (intent: string) =>
    turn(intent).locator('.jp-DataAgent-usage');

  const from = logLength();
  await ask(page, ON_FREE);
  await expect(footer(ON_FREE)).toBeVisible({ timeout: 90_000 });
  await expect(footer(ON_FREE)).not.toContainText('$');
  // Picking the priced model prices no turn that ran on the other one.
  await picker.selectOption('big-model');
  await ask(page, ON_PRICED);
  await expect(footer(ON_PRICED)).toBeVisible({ timeout: 90_000 });
  await expect(footer(ON_FREE)).not.toContainText('$');
  await expect(footer(ON_FREE)).toHaveAttribute(
    'title',
    /No price configured for test-model/
  );

  // Each turn really ran on its model (the test server's request log).
  const requests = loggedRequests(from);
  const modelsOf = (intent: string) =>
    requests.filter(r => promptOf(r).includes(intent)).map(r => r.body.model);
  expect(modelsOf(ON_FREE)).toEqual(['test-model']);
  expect(modelsOf(ON_PRICED)).toEqual(['big-model']);

  const cost = bigModelCost(tokensIn(await footer(ON_PRICED).innerText()));
  await expect(footer(ON_PRICED)).toContainText(`≈ ${cost}`);
  await expect(footer(ON_PRICED)).toHaveAttribute('title', /Model: big-model/);
  const total = sidebar.locator('.jp-DataAgent-total');
  await expect(total).toContainText('Session, 2 turns:');
  // The one priced turn's cost, not both turns at the picked model's price.
  await expect(total).toContainText(`≈ ${cost} (1 of 2 turns priced)`);

  // Back to the unpriced model: the priced turn keeps its cost, and so does the total.
  await picker.selectOption('test-model');
  await expect(footer(ON_PRICED)).toContainText(`≈ ${cost}`);
  await expect(footer(ON_FREE)).not.toContainText('$');
  await expect(total).toContainText(`≈ ${cost} (1 of 2 turns priced)`);
  await sidebar
    .locator('.jp-DataAgent-body')
    .screenshot({ path: screenshotPath('usage-two-models.png') });

  // After a reload the turns are read back from the notebook: the same costs.
  await page.notebook.save();
  await reloadAndReopen(page, 'usage-models.ipynb');
  await openPanel(page);
  await expect(
    panel(page).locator('.jp-DataAgent-exchange.jp-mod-stored')
  ).toHaveCount(2, { timeout: 60_000 });
  await expect(footer(ON_PRICED)).toContainText(`≈ ${cost}`);
  await expect(footer(ON_FREE)).toBeVisible();
  await expect(footer(ON_FREE)).not.toContainText('$');
  const reloaded = panel(page).locator('.jp-DataAgent-total');
  await expect(reloaded).toContainText('Session, 2 turns:');
  await expect(reloaded).toContainText(`≈ ${cost} (1 of 2 turns priced)`);
});
