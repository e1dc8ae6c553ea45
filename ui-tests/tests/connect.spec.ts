/**
 * "Connect a model" against the real server: the sidebar names the model
 * that answers; the dialog lists the models of the OpenAI-protocol servers
 * the server finds on this machine (c.ModelConnect.ports: the tests' model
 * server, ui-tests/jupyter_server_test_config.py) and of a URL typed in (a
 * second test server this spec starts), checks one with a real one-token
 * request and connects it: the sidebar and GET config name it.
 */
import { expect, test } from '@jupyterlab/galata';
import { ChildProcess, spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { openPanel, panel, screenshotPath } from './helpers';

const OPENAI_PORT = Number(process.env.JDA_UI_OPENAI_PORT || 8765);
const REPO = path.resolve(__dirname, '..', '..');

let other: ChildProcess | null = null;
let otherUrl = '';
let otherLog = '';

/** A second model server (loopback, a free port) serving two other models. */
function startOtherServer(): Promise<string> {
  otherLog = path.join(
    fs.mkdtempSync(path.join(os.tmpdir(), 'connect-spec-')),
    'requests.jsonl'
  );
  const args = ['-m', 'tests.openai_server', '--port', '0', '--reply', 'OK'];
  args.push('--model', 'connect-model-a', '--model', 'connect-model-b');
  args.push('--log', otherLog);
  other = spawn('python', args, {
    cwd: REPO,
    stdio: ['ignore', 'pipe', 'inherit']
  });
  return new Promise((resolve, reject) => {
    let out = '';
    other!.stdout!.on('data', chunk => {
      out += String(chunk);
      const ready = /OPENAI_TEST_SERVER_READY (\S+)/.exec(out);
      if (ready) {
        resolve(ready[1]);
      }
    });
    other!.on('exit', code =>
      reject(new Error(`model server exited: ${code}`))
    );
  });
}

test.beforeAll(async () => {
  otherUrl = await startOtherServer();
});

test.afterAll(async ({ request }) => {
  // The lab server is shared with the specs that follow: back to its model.
  const restored = await request.post('/jupyter-data-agent/connect', {
    data: {
      base_url: `http://127.0.0.1:${OPENAI_PORT}/v1`,
      model: 'test-model',
      api_key: 'test-key'
    }
  });
  expect(restored.ok()).toBe(true);
  other?.kill();
});

test('the sidebar names the model, and Connect a model connects another one', async ({
  page,
  request
}) => {
  await page.notebook.createNew('connect.ipynb');
  await openPanel(page);
  const line = panel(page).locator('.jp-DataAgent-modelLine');
  await expect(line).toContainText(
    `Model: test-model, openai, at 127.0.0.1:${OPENAI_PORT}`
  );

  await line.locator('.jp-DataAgent-connectModel').click();
  const dialog = page.locator('.jp-Dialog-content');
  await expect(dialog).toBeVisible();
  // Found by the server's probe: the tests' model server and its model.
  const found = dialog.locator('.jp-DataAgent-connectServer', {
    hasText: 'Test model server'
  });
  await expect(found).toContainText(`http://127.0.0.1:${OPENAI_PORT}/v1`);
  await expect(found.getByLabel('test-model')).toBeVisible();

  // A typed address: no scheme and no /v1 needed.
  await dialog
    .locator('.jp-DataAgent-connectUrl')
    .fill(otherUrl.replace(/^http:\/\//, '').replace(/\/v1$/, ''));
  await dialog.locator('.jp-DataAgent-connectLook').click();
  const typed = dialog.locator('.jp-DataAgent-connectServer', {
    hasText: 'The URL you typed'
  });
  await expect(typed.getByLabel('connect-model-a')).toBeVisible();
  await typed.getByLabel('connect-model-b').check();

  const status = dialog.locator('.jp-DataAgent-connectStatus');
  await dialog.locator('.jp-DataAgent-connectCheck').click();
  await expect(status).toContainText(
    'connect-model-b answered a one-token request'
  );
  // A real request reached the chosen server: a one-token chat completion.
  const sent = fs
    .readFileSync(otherLog, 'utf-8')
    .split('\n')
    .filter(Boolean)
    .map(l => JSON.parse(l))
    .filter(r => r.path === '/v1/chat/completions');
  expect(sent.length).toBeGreaterThan(0);
  expect(sent[0].body.model).toBe('connect-model-b');
  expect(sent[0].body.max_tokens).toBe(1);

  await dialog.locator('.jp-DataAgent-connectUse').click();
  await expect(status).toContainText('Connected: connect-model-b');
  await page.screenshot({ path: screenshotPath('connect-dialog.png') });
  await dialog.locator('.jp-Dialog-footer button').click();
  await expect(dialog).toHaveCount(0);

  const port = new URL(otherUrl).port;
  await expect(line).toContainText(
    `Model: connect-model-b, openai, at 127.0.0.1:${port}`
  );
  const config = await (await request.get('/jupyter-data-agent/config')).json();
  expect(config.model).toBe('connect-model-b');
  expect(config.base_url).toBe(otherUrl);
  expect(config.model_info.name).toBe('connect-model-b');
});
