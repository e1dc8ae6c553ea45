/**
 * What a turn cost, in words: tokens, model calls, time and, when the
 * server's configuration gives the model a price, an estimated cost. Pure,
 * so the formatting is tested without a DOM.
 */
import { formatElapsed } from './events';
import type {
  ContextReport,
  DoneResult,
  ModelPrice,
  SearchStats
} from './wire';

/** The cost of one turn, or of several added up. */
export interface IUsage {
  promptTokens: number;
  completionTokens: number;
  modelCalls: number;
  /** Wall time of the turn(s) on the server, in seconds. */
  wallTimeS: number;
  /** Of it, the seconds spent waiting for the model; 0: not measured. */
  modelTimeS: number;
  /** How many turns are added up here. */
  turns: number;
}

export const NO_USAGE: IUsage = {
  promptTokens: 0,
  completionTokens: 0,
  modelCalls: 0,
  wallTimeS: 0,
  modelTimeS: 0,
  turns: 0
};

/** The usage a `done` event's stats report for one turn. */
export function usageOf(stats: SearchStats): IUsage {
  return {
    promptTokens: stats.prompt_tokens,
    completionTokens: stats.completion_tokens,
    modelCalls: stats.model_calls,
    wallTimeS: stats.wall_time_s,
    // Absent from a server older than the field.
    modelTimeS: stats.model_time_s ?? 0,
    turns: 1
  };
}

export function addUsage(a: IUsage, b: IUsage): IUsage {
  return {
    promptTokens: a.promptTokens + b.promptTokens,
    completionTokens: a.completionTokens + b.completionTokens,
    modelCalls: a.modelCalls + b.modelCalls,
    wallTimeS: a.wallTimeS + b.wallTimeS,
    modelTimeS: a.modelTimeS + b.modelTimeS,
    turns: a.turns + b.turns
  };
}

/** The finished turns' usage added up (null results: not finished); null before the first. */
export function totalUsage(
  results: readonly (DoneResult | null)[]
): IUsage | null {
  let total = NO_USAGE;
  for (const result of results) {
    if (result) {
      total = addUsage(total, usageOf(result.stats));
    }
  }
  return total.turns ? total : null;
}

/**
 * The price of the model a turn runs on: the one picked in the composer
 * (null: the configured one), from the server's prices of the models it
 * offers; null when that model has none.
 */
export function modelPrice(
  config: {
    price?: ModelPrice | null;
    prices?: { [model: string]: ModelPrice | undefined };
  },
  picked: string | null
): ModelPrice | null {
  if (picked === null) {
    return config.price ?? null;
  }
  return config.prices?.[picked] ?? null;
}

/** Estimated USD; null without a price (a local model, or none configured). */
export function costOf(usage: IUsage, price: ModelPrice | null): number | null {
  if (!price) {
    return null;
  }
  return (
    (usage.promptTokens * price.input + usage.completionTokens * price.output) /
    1e6
  );
}

/** "950", "12,345": whole tokens with thousands separators. */
export function formatTokens(tokens: number): string {
  return Math.round(tokens).toLocaleString('en-US');
}

/**
 * "$0.0012", "$0.42", "$12.30": enough digits to see a small turn's cost;
 * "< $0.0001" rather than a misleading "$0.0000".
 */
export function formatCost(usd: number): string {
  if (usd <= 0) {
    return '$0';
  }
  if (usd < 0.0001) {
    return '< $0.0001';
  }
  if (usd < 0.01) {
    return `$${usd.toFixed(4)}`;
  }
  return `$${usd.toFixed(2)}`;
}

/** "0.8 s", "12 s", "1 min 05 s". */
export function formatSeconds(seconds: number): string {
  return seconds < 10 ? `${seconds.toFixed(1)} s` : formatElapsed(seconds);
}

/** "1 node", "2 nodes". */
export const plural = (n: number, word: string) =>
  `${n} ${word}${n === 1 ? '' : 's'}`;

/** The turn's time, split when the model's share was measured:
 * "1.2 s (model 0.9 s)". */
export function formatTurnTime(usage: IUsage): string {
  const wall = formatSeconds(usage.wallTimeS);
  return usage.modelTimeS > 0
    ? `${wall} (model ${formatSeconds(usage.modelTimeS)})`
    : wall;
}

/** The parts of the usage line, in order, e.g. for one turn:
 * "900 in / 120 out tokens", "1 model call", "1.2 s (model 0.9 s)", "≈ $0.0002". */
export function usageParts(
  usage: IUsage,
  price: ModelPrice | null,
  options: { time?: boolean } = {}
): string[] {
  const parts = [
    `${formatTokens(usage.promptTokens)} in / ${formatTokens(usage.completionTokens)} out tokens`,
    plural(usage.modelCalls, 'model call')
  ];
  if (options.time ?? true) {
    parts.push(formatTurnTime(usage));
  }
  const cost = costOf(usage, price);
  if (cost !== null) {
    parts.push(`≈ ${formatCost(cost)}`);
  }
  return parts;
}

/** The tooltip: what each number means, and where the price comes from. */
export function usageTitle(usage: IUsage, price: ModelPrice | null): string {
  const lines = [
    `Prompt tokens: ${formatTokens(usage.promptTokens)}`,
    `Completion tokens: ${formatTokens(usage.completionTokens)}`,
    `Model calls: ${usage.modelCalls}`,
    `Wall time on the server: ${formatSeconds(usage.wallTimeS)}`
  ];
  if (usage.modelTimeS > 0) {
    const rest = Math.max(0, usage.wallTimeS - usage.modelTimeS);
    lines.push(
      `  waiting for the model: ${formatSeconds(usage.modelTimeS)}`,
      `  the rest (running code in kernel copies, building the prompt): ${formatSeconds(rest)}`
    );
  }
  if (price) {
    lines.push(
      `Estimated cost at $${price.input} / $${price.output} per million ` +
        'input / output tokens (c.DataAgent.prices)'
    );
  }
  return lines.join('\n');
}

/** How full the prompt was, 0 to 1 (over budget shows full). */
export function contextFill(report: ContextReport): number {
  if (report.window <= 0) {
    return 0;
  }
  return Math.min(1, Math.max(0, report.prompt_tokens / report.window));
}

/** Whether anything the model could have seen was left out. */
export function contextWasCut(report: ContextReport): boolean {
  return contextCuts(report).length > 0;
}

/** "context 41%": the gauge's caption. */
export function contextLabel(report: ContextReport): string {
  return `context ${Math.round(contextFill(report) * 100)}%`;
}

/** What truncation removed, one line each, in the user's words. */
export function contextCuts(report: ContextReport): string[] {
  const lines: string[] = [];
  if (report.cells_dropped > 0) {
    lines.push(
      `${plural(report.cells_dropped, 'oldest cell')} left out to fit the budget`
    );
  }
  if (report.exemplars_dropped > 0) {
    lines.push(
      `${plural(report.exemplars_dropped, 'worked example')} left out`
    );
  }
  if (report.outputs_cut > 0) {
    lines.push(`${plural(report.outputs_cut, 'cell output')} cut short`);
  }
  for (const frame of report.frames_cut) {
    lines.push(
      frame.summarized
        ? `${frame.name}: summarized (${frame.shown_columns} of ${frame.total_columns} columns named); mention @${frame.name} for all`
        : `${frame.name}: ${frame.shown_columns} of ${frame.total_columns} columns shown; mention @${frame.name} for all`
    );
  }
  if (report.over_budget) {
    lines.push(
      'Over the budget even so: the schema and the question are never cut'
    );
  }
  return lines;
}

/** The gauge's tooltip: the fill, the frames given in full, and every cut. */
export function contextTitle(report: ContextReport): string {
  const percent = Math.round(contextFill(report) * 100);
  const lines = [
    `Prompt: ${formatTokens(report.prompt_tokens)} of ${formatTokens(report.window)} tokens (${percent}% of the prompt budget)`
  ];
  if (report.mentioned.length) {
    lines.push(
      `In full, first: ${report.mentioned.map(name => `@${name}`).join(', ')}`
    );
  }
  const cuts = contextCuts(report);
  lines.push(
    ...(cuts.length
      ? ['Cut:', ...cuts.map(c => `  ${c}`)]
      : ['Nothing was cut.'])
  );
  return lines.join('\n');
}
