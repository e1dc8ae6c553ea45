/**
 * The agent token manager (issue 35, item 3), against the real server: from
 * the sidebar's "Connect an agent…", make a token by name (Enter submits);
 * it is shown once, with the Claude Code command for this server, and
 * listed. The token then works on the agent's routes (GET notebooks) and
 * nowhere else (GET /api/contents is refused, while the same request
 * without it passes on this token-less test server); its last use shows in
 * the list; Revoke, after JupyterLab's confirmation, cuts it off.
 */
import { expect, test } from '@jupyterlab/galata';
import { Page } from '@playwright/test';

import { PANEL_ID, openPanel, panel, screenshotPath } from './helpers';

const TOKENS_TAB = '#jupyter-data-agent-agent-tokens';

function manager(page: Page) {
  return page.locator(TOKENS_TAB);
}

/** GET `route` on the server with `token` (none: no Authorization header). */
async function status(
  baseURL: string,
  route: string,
  token?: string
): Promise<number> {
  const response = await fetch(`${baseURL}${route}`, {
    headers: token ? { Authorization: `token ${token}` } : {}
  });
  await response.text();
  return response.status;
}

/** Revoke the tokens this spec made, whatever happened (the store outlives the server). */
async function revokeLeftovers(baseURL: string, name: string): Promise<void> {
  const listed = await fetch(`${baseURL}/jupyter-data-agent/agent-tokens`);
  const { tokens } = (await listed.json()) as {
    tokens: { id: string; name: string }[];
  };
  for (const token of tokens.filter(t => t.name === name)) {
    await fetch(`${baseURL}/jupyter-data-agent/agent-tokens/${token.id}`, {
      method: 'DELETE'
    });
  }
}

test.describe('Agent tokens', () => {
  const name = `UI test agent ${Date.now()}`;

  test.afterEach(async ({ baseURL }) => {
    await revokeLeftovers(baseURL!, name);
  });

  test('make a token, use it on the agent routes only, revoke it', async ({
    page,
    baseURL
  }) => {
    // The way in from the sidebar (no notebook open: its empty state).
    await openPanel(page);
    await panel(page)
      .getByRole('button', { name: 'Connect an agent…' })
      .click();
    await expect(manager(page)).toBeVisible();
    await expect(
      manager(page).getByRole('heading', { name: 'Agent tokens' })
    ).toBeVisible();

    // The command palette has it too.
    expect(
      await page.evaluate(() =>
        (window as any).jupyterapp.commands.label(
          'jupyter-data-agent:manage-agent-tokens'
        )
      )
    ).toBe('Data Agent: Manage Agent Tokens');

    // A blank name is refused in words, before any request.
    const nameField = manager(page).getByLabel('Agent name');
    await expect(nameField).toBeFocused();
    await nameField.press('Enter');
    await expect(manager(page).getByRole('alert')).toContainText(
      'Give the agent a name'
    );

    // Enter in the name field makes the token.
    await nameField.fill(name);
    await nameField.press('Enter');
    const value = manager(page).getByLabel(`The token for ${name}`, {
      exact: true
    });
    await expect(value).toBeVisible();
    const token = await value.inputValue();
    expect(token).toMatch(/^jda_[0-9a-f]{12}_/);
    await expect(manager(page)).toContainText('not shown again');
    await expect(
      manager(page).locator('.jp-DataAgent-tokenSnippet')
    ).toHaveText(
      `claude mcp add --transport http jupyter-data-agent ${baseURL}/jupyter-data-agent/mcp --header "Authorization: token ${token}"`
    );
    await expect(
      manager(page).getByRole('button', { name: 'Copy the token' })
    ).toBeVisible();
    const row = manager(page).locator('tbody tr', { hasText: name });
    await expect(row).toHaveCount(1);
    await expect(row.locator('td').nth(2)).toHaveText('never');
    await page.screenshot({ path: screenshotPath('agent-tokens-new.png') });

    // The token on the agent's routes, and nowhere else.
    expect(await status(baseURL!, '/jupyter-data-agent/notebooks', token)).toBe(
      200
    );
    expect([401, 403]).toContain(
      await status(baseURL!, '/api/contents', token)
    );
    // The same request without it passes here (a token-less test server).
    expect(await status(baseURL!, '/api/contents')).toBe(200);

    // Its use shows in the list.
    await manager(page).getByRole('button', { name: 'Refresh' }).click();
    await expect(row.locator('td').nth(2)).toHaveText('just now');

    // Done: the token leaves the page for good; the row stays.
    await manager(page)
      .getByRole('button', { name: 'Done, hide the token' })
      .click();
    await expect(value).toHaveCount(0);
    expect(await page.content()).not.toContain(token);
    await expect(row).toHaveCount(1);

    // Revoke, with JupyterLab's confirmation; Cancel first keeps it.
    const revoke = manager(page).getByRole('button', {
      name: `Revoke the token for ${name}`,
      exact: true
    });
    await revoke.click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText(`Revoke the token for ${name}?`);
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await expect(dialog).toHaveCount(0);
    await expect(row).toHaveCount(1);
    expect(await status(baseURL!, '/jupyter-data-agent/notebooks', token)).toBe(
      200
    );

    await revoke.focus();
    await page.keyboard.press('Enter');
    await expect(dialog).toBeVisible();
    await dialog.getByRole('button', { name: 'Revoke' }).click();
    await expect(row).toHaveCount(0);

    // Refused from the next request on.
    expect([401, 403]).toContain(
      await status(baseURL!, '/jupyter-data-agent/notebooks', token)
    );
  });

  test('opens from the sidebar header and from the palette', async ({
    page
  }) => {
    await page.notebook.createNew('agent-tokens.ipynb');
    await openPanel(page);
    await panel(page).getByRole('button', { name: 'Agents…' }).click();
    await expect(manager(page)).toBeVisible();
    // One tab, however it is opened.
    await page.evaluate(() =>
      (window as any).jupyterapp.commands.execute(
        'jupyter-data-agent:manage-agent-tokens'
      )
    );
    await expect(manager(page)).toHaveCount(1);
    await expect(page.locator(`#${PANEL_ID}`)).toBeVisible();
  });
});
