#!/usr/bin/env bash
# `python -m jupyterlab.browser_check` in Debian's Chromium.
#
# browser_check runs `node browser-test.js` in <app dir>/browser_test: it
# `npm install`s Playwright there unless node_modules exists, always runs
# `npx playwright install chromium` (a download from Playwright's CDN, which
# this machine cannot reach), then launches `playwright.chromium` with no
# executablePath. No option or environment variable of browser_check or
# Playwright names a system browser, so we prepare that folder first: its
# `playwright` is a thin module over the Playwright the UI tests install
# (ui-tests/node_modules) whose chromium.launch adds the executablePath and
# flags of ui-tests/playwright.config.js, and whose `install` command is a
# no-op. browser-test.js itself is jupyterlab's, unchanged.
# Extra arguments go to browser_check (e.g. --no-browser-test).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${VIRTUAL_ENV:-}" ] && [ -f .venv/bin/activate ]; then
  # shellcheck disable=SC1091
  . .venv/bin/activate
fi

CHROMIUM_PATH=${CHROMIUM_PATH:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM_PATH" ]; then
  echo "Chromium not found at $CHROMIUM_PATH (apt-get install -y chromium, or set CHROMIUM_PATH)" >&2
  exit 1
fi
export CHROMIUM_PATH PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

if [ ! -f ui-tests/node_modules/playwright/package.json ]; then
  (cd ui-tests && jlpm install)
fi
JDA_PLAYWRIGHT=$(cd ui-tests/node_modules/playwright && pwd -P)
export JDA_PLAYWRIGHT

APP_DIR=$(python -c "from jupyterlab.commands import get_app_dir; print(get_app_dir())")
[ -d "$APP_DIR" ] || { echo "no JupyterLab application directory: $APP_DIR" >&2; exit 1; }
TARGET="$APP_DIR/browser_test"
rm -rf "$TARGET"
mkdir -p "$TARGET/node_modules/playwright" "$TARGET/node_modules/.bin"
echo '{"name": "jda-browser-check", "private": true}' > "$TARGET/package.json"
cat > "$TARGET/node_modules/playwright/package.json" <<'EOF'
{"name": "playwright", "version": "0.0.0-system-chromium", "main": "index.js",
 "bin": {"playwright": "cli.js"}}
EOF
cat > "$TARGET/node_modules/playwright/index.js" <<'EOF'
// Playwright, launching the system Chromium as ui-tests/playwright.config.js does.
const playwright = require(process.env.JDA_PLAYWRIGHT);
const launch = playwright.chromium.launch.bind(playwright.chromium);
playwright.chromium.launch = (options = {}) =>
  launch({
    ...options,
    executablePath: process.env.CHROMIUM_PATH,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-quic',
           ...(options.args || [])]
  });
module.exports = playwright;
EOF
cat > "$TARGET/node_modules/playwright/cli.js" <<'EOF'
#!/usr/bin/env node
// `playwright install` would download a browser: the system Chromium is used instead.
if (process.argv[2] === 'install') {
  console.log(`browser_check: using ${process.env.CHROMIUM_PATH}, no download`);
  process.exit(0);
}
require(require('path').join(process.env.JDA_PLAYWRIGHT, 'cli.js'));
EOF
chmod +x "$TARGET/node_modules/playwright/cli.js"
ln -s ../playwright/cli.js "$TARGET/node_modules/.bin/playwright"

ARGS=()
[ "$(id -u)" -ne 0 ] || ARGS+=(--allow-root)  # CI containers run as root
python -m jupyterlab.browser_check "${ARGS[@]}" "$@"
