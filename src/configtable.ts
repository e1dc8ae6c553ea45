/**
 * The server's public model configuration (`GET config`) as the rows of
 * the "Show Model Configuration" dialog. Whether an API key is set, never
 * the key: the server does not send it.
 */
import { modelLine } from './connect';
import { modelPrice } from './usage';
import type { AgentConfig, ModelPrice } from './wire';

/** "max_concurrent_jobs" -> "max concurrent jobs". */
function words(key: string): string {
  return key.replace(/_/g, ' ');
}

/** "$2.5 input / $10 output per million tokens". */
function priceWords(price: ModelPrice): string {
  return `$${price.input} input / $${price.output} output per million tokens`;
}

/**
 * Every offered model's price, one line each ("big-model: $5 input / ...",
 * "test-model: none"); one model: its price alone. A turn's cost is the
 * price of the model it ran on, so all of them matter, not the picked one's.
 */
export function priceLines(config: AgentConfig): string[] {
  const models = (config.models ?? []).length
    ? config.models
    : [config.model || '(default)'];
  const priceOf = (model: string) =>
    modelPrice(config, model) ??
    (model === config.model ? modelPrice(config, null) : null);
  if (!models.some(priceOf)) {
    return ['none configured (no cost shown)'];
  }
  if (models.length === 1) {
    return [priceWords(priceOf(models[0])!)];
  }
  return models.map(model => {
    const price = priceOf(model);
    return `${model}: ${price ? priceWords(price) : 'none (no cost shown)'}`;
  });
}

/**
 * [label, value] pairs, in the order the dialog shows them (a value of
 * several lines holds newlines). `picked`: the model picked in the current
 * notebook's composer (null: the configured one).
 */
export function configRows(
  config: AgentConfig,
  picked: string | null = null
): [string, string][] {
  const available = config.capabilities?.strategies ?? [];
  const strategies = (config.strategies ?? [])
    .filter(s => available.includes(s.name))
    .map(s => s.label);
  const limits = Object.entries(config.limits ?? {})
    .filter(([, value]) => value !== null && value !== undefined)
    .map(([key, value]) => `${words(key)}: ${value}`);
  // Nothing configured: the server names the model it runs (the embedded one).
  const model = config.model || modelLine(config.model_info) || '(default)';
  return [
    ['Backend', config.backend || '—'],
    [
      'Model',
      picked && picked !== config.model
        ? `${picked} (picked in this notebook; configured: ${model})`
        : model
    ],
    [
      'Models offered',
      (config.models ?? []).length > 1 ? config.models.join(', ') : '—'
    ],
    ['Endpoint', config.base_url || '—'],
    ['API key', config.api_key_set ? 'set on the server' : 'not set'],
    ['Strategies', strategies.length ? strategies.join(', ') : '—'],
    ['Limits', limits.length ? limits.join(', ') : '—'],
    [
      'Inline completion',
      config.capabilities?.inline_completion ? 'on' : 'off'
    ],
    ['Price', priceLines(config).join('\n')]
  ];
}

/**
 * The rows as a table inside a block: the dialog lays its body out as a
 * flex column, which is no place for a bare table element.
 */
export function configTable(
  config: AgentConfig,
  picked: string | null = null
): HTMLElement {
  const wrapper = document.createElement('div');
  wrapper.className = 'jp-DataAgent-config';
  const table = document.createElement('table');
  table.className = 'jp-DataAgent-configTable';
  const body = document.createElement('tbody');
  for (const [label, value] of configRows(config, picked)) {
    const row = document.createElement('tr');
    const head = document.createElement('th');
    head.scope = 'row';
    head.textContent = label;
    const cell = document.createElement('td');
    const lines = value.split('\n');
    cell.textContent = lines[0];
    for (const line of lines.slice(1)) {
      cell.append(document.createElement('br'), line);
    }
    row.append(head, cell);
    body.appendChild(row);
  }
  table.appendChild(body);
  wrapper.appendChild(table);
  return wrapper;
}
