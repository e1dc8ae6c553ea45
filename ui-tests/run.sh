#!/usr/bin/env bash
# UI tests: Galata/Playwright in Debian's Chromium against a real JupyterLab
# (with this extension built and installed) and a local OpenAI-protocol
# model server. Called by .ci/run; extra arguments go to `playwright test`.
set -euo pipefail
cd "$(dirname "$0")"

if [ -z "${VIRTUAL_ENV:-}" ] && [ -f ../.venv/bin/activate ]; then
  # shellcheck disable=SC1091
  . ../.venv/bin/activate
fi

CHROMIUM_PATH=${CHROMIUM_PATH:-/usr/bin/chromium}
if [ ! -x "$CHROMIUM_PATH" ]; then
  echo "Chromium not found at $CHROMIUM_PATH (apt-get install -y chromium, or set CHROMIUM_PATH)" >&2
  exit 1
fi
export CHROMIUM_PATH
# Never let Playwright try to download its own browsers.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

# Side-by-side runs would fight over one install; a clean clone installs.
[ -d node_modules/@jupyterlab/galata ] || jlpm install
mkdir -p test-results screenshots logs
: > "logs/${JDA_UI_LOG:-openai-requests.jsonl}"
jlpm playwright test "$@"
