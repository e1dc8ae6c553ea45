/**
 * Galata's Playwright configuration, run in Debian's Chromium (Playwright
 * cannot download browsers here) against a real `jupyter lab` whose model
 * is a local OpenAI-protocol test server (tests/openai_server/).
 */
const fs = require('fs');
const path = require('path');
const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

const LAB_PORT = Number(process.env.JDA_UI_LAB_PORT || 8888);
const OPENAI_PORT = Number(process.env.JDA_UI_OPENAI_PORT || 8765);
// A second JupyterLab with real-time collaboration on, for rtc.spec.ts only.
const RTC_PORT = Number(process.env.JDA_UI_RTC_PORT || 8889);
const repoRoot = path.resolve(__dirname, '..');
// A JupyterLab from the venv with Jupyter AI 3.2 beside this package, for
// jupyterai.spec.ts only (.ci/run makes .venv-jai; without it that spec skips).
const JAI_PORT = Number(process.env.JDA_UI_JAI_PORT || 8890);
const JAI_JUPYTER = path.join(repoRoot, '.venv-jai', 'bin', 'jupyter');
// Side-by-side runs (two work trees, two sessions) each need their own log
// and output folder; CI uses the defaults.
const OPENAI_LOG = process.env.JDA_UI_LOG || 'openai-requests.jsonl';

module.exports = {
  ...baseConfig,
  // One JupyterLab server and one kernel per test would fight over 2 cores.
  workers: 1,
  outputDir: process.env.JDA_UI_OUT || 'test-results',
  // CI machines are shared and slow; a second try tells flakiness from failure
  // (Playwright reports a test that passes on retry as "flaky").
  retries: process.env.CI ? 1 : 0,
  timeout: 120 * 1000,
  expect: { timeout: 20 * 1000 },
  reporter: [['list'], ['html', { open: 'never' }]],
  use: {
    ...baseConfig.use,
    baseURL: `http://localhost:${LAB_PORT}`,
    // Recording video needs Playwright's own ffmpeg, which is not installed.
    video: 'off',
    screenshot: 'only-on-failure',
    trace: 'retain-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH || '/usr/bin/chromium',
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
        '--disable-quic'
      ]
    }
  },
  webServer: [
    {
      command: `python -m tests.openai_server --port ${OPENAI_PORT} --reply-file ui-tests/fixtures/replies.json --model test-model --model big-model --log ui-tests/logs/${OPENAI_LOG}`,
      cwd: repoRoot,
      url: `http://127.0.0.1:${OPENAI_PORT}/health`,
      timeout: 60 * 1000,
      reuseExistingServer: false
    },
    {
      command: 'jlpm start',
      cwd: __dirname,
      url: `http://localhost:${LAB_PORT}/lab`,
      timeout: 120 * 1000,
      reuseExistingServer: false,
      env: {
        ...process.env,
        // Plain JupyterLab: jupyter-collaboration's lab extensions disabled
        // (single-user/labconfig/page_config.json), whatever else is installed.
        JUPYTER_CONFIG_PATH: [
          path.join(__dirname, 'single-user'),
          process.env.JUPYTER_CONFIG_PATH
        ]
          .filter(Boolean)
          .join(path.delimiter),
        JDA_UI_LAB_PORT: String(LAB_PORT),
        JUPYTER_DATA_AGENT_BACKEND: 'openai',
        OPENAI_BASE_URL: `http://127.0.0.1:${OPENAI_PORT}/v1`,
        OPENAI_API_KEY: 'test-key',
        JUPYTER_DATA_AGENT_MODEL: 'test-model'
      }
    },
    {
      // A second JupyterLab with real-time collaboration on (rtc.spec.ts).
      command: 'jlpm start',
      cwd: __dirname,
      url: `http://localhost:${RTC_PORT}/lab`,
      timeout: 120 * 1000,
      reuseExistingServer: false,
      env: {
        ...process.env,
        JDA_UI_RTC: '1',
        JDA_UI_RTC_PORT: String(RTC_PORT),
        JUPYTER_DATA_AGENT_BACKEND: 'openai',
        OPENAI_BASE_URL: `http://127.0.0.1:${OPENAI_PORT}/v1`,
        OPENAI_API_KEY: 'test-key',
        JUPYTER_DATA_AGENT_MODEL: 'test-model'
      }
    },
    ...(fs.existsSync(JAI_JUPYTER)
      ? [
          {
            // Its MCP host (jupyter-server-mcp) on a port the OS picks: 3001 may be taken.
            command: `${JAI_JUPYTER} lab --config jupyter_server_test_config.py --MCPExtensionApp.mcp_port=0`,
            cwd: __dirname,
            url: `http://localhost:${JAI_PORT}/lab`,
            timeout: 120 * 1000,
            reuseExistingServer: false,
            env: {
              ...process.env,
              JUPYTER_CONFIG_PATH: path.join(__dirname, 'single-user'),
              JDA_UI_LAB_PORT: String(JAI_PORT),
              JUPYTER_DATA_AGENT_BACKEND: 'openai',
              OPENAI_BASE_URL: `http://127.0.0.1:${OPENAI_PORT}/v1`,
              OPENAI_API_KEY: 'test-key',
              JUPYTER_DATA_AGENT_MODEL: 'test-model'
            }
          }
        ]
      : [])
  ]
};
