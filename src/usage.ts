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
  /**
   * One turn's model, the one it ran on: its cost is that model's price,
   * whatever is picked later. Absent: not known (a turn stored before the
   * field), or several turns added up.
   */
  model?: string;
}

export const NO_USAGE: IUsage = {
  promptTokens: 0,
  completionTokens: 0,
  modelCalls: 0,
  wallTimeS: 0,
  modelTimeS: 0,
  turns: 0
};

/** The usage a `done` event's stats report for one turn, run on `model` ("": not known). */
export function usageOf(stats: SearchStats, model = ''): IUsage {
  return {
    promptTokens: stats.prompt_tokens,
    completionTokens: stats.completion_tokens,
    modelCalls: stats.model_calls,
    wallTimeS: stats.wall_time_s,
    // Absent from a server older than the field.
    modelTimeS: stats.model_time_s ?? 0,
    turns: 1,
    ...(model ? { model } : {})
  };
}

/** One finished turn's usage, with the model the server says it ran on. */
export function usageOfResult(result: DoneResult): IUsage {
  return usageOf(result.stats, result.model ?? '');
}

/** Two usages added up (no single model any more). */
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

/** The server's prices (`GET config`): the configured model's, and each offered model's. */
export interface IPrices {
  price?: ModelPrice | null;
  prices?: { [model: string]: ModelPrice | undefined };
}

/**
 * The price of a model (null: the configured one), from the server's
 * prices of the models it offers; null when that model has none.
 */
export function modelPrice(
  config: IPrices,
  model: string | null
): ModelPrice | null {
  if (model === null) {
    return config.price ?? null;
  }
  return config.prices?.[model] ?? null;
}

/**
 * The price of the model one turn ran on; null when it has none, or when
 * the turn does not say its model (never the model picked now: a past turn
 * did not run on it).
 */
export function turnPrice(config: IPrices, usage: IUsage): ModelPrice | null {
  return usage.model ? modelPrice(config, usage.model) : null;
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

/** The session's turns added up, and what the priced ones cost. */
export interface ISessionUsage {
  usage: IUsage;
  /** The priced turns' costs added up, each at its own model's price; null: none priced. */
  cost: number | null;
  /** How many of the turns have a price (the others cost nothing known). */
  priced: number;
}

/**
 * The finished turns (null: not finished) added up; null before the first.
 * Each turn's cost is its own model's price, so picking another model
 * changes no past turn's cost.
 */
export function sessionUsage(
  turns: readonly (IUsage | null)[],
  config: IPrices
): ISessionUsage | null {
  let usage = NO_USAGE;
  let cost: number | null = null;
  let priced = 0;
  for (const turn of turns) {
    if (!turn) {
      continue;
    }
    usage = addUsage(usage, turn);
    const turnCost = costOf(turn, turnPrice(config, turn));
    if (turnCost !== null) {
      cost = (cost ?? 0) + turnCost;
      priced += 1;
    }
  }
  return usage.turns ? { usage, cost, priced } : null;
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
 * "900 in / 120 out tokens", "1 model call", "1.2 s (model 0.9 s)", "≈ $0.0002".
 * `cost`: the estimate (null: none shown); `priced` of the session's turns
 * had a price ("≈ $0.02 (1 of 7 turns priced)" when not all). */
export function usageParts(
  usage: IUsage,
  cost: number | null,
  options: { time?: boolean; priced?: number } = {}
): string[] {
  const parts = [
    `${formatTokens(usage.promptTokens)} in / ${formatTokens(usage.completionTokens)} out tokens`,
    plural(usage.modelCalls, 'model call')
  ];
  if (options.time ?? true) {
    parts.push(formatTurnTime(usage));
  }
  if (cost !== null) {
    const priced = options.priced ?? usage.turns;
    parts.push(
      priced < usage.turns
        ? `≈ ${formatCost(cost)} (${priced} of ${plural(usage.turns, 'turn')} priced)`
        : `≈ ${formatCost(cost)}`
    );
  }
  return parts;
}

/** One turn's tooltip: what each number means, and where the price comes from. */
export function usageTitle(usage: IUsage, price: ModelPrice | null): string {
  const lines = numbersTitle(usage);
  if (usage.model) {
    lines.unshift(`Model: ${usage.model}`);
  }
  if (price) {
    lines.push(
      `Estimated cost at ${usage.model ?? 'its model'}'s $${price.input} / $${price.output} per million ` +
        'input / output tokens (c.DataAgent.prices)'
    );
  } else if (usage.model) {
    lines.push(`No price configured for ${usage.model}: no cost shown`);
  }
  return lines.join('\n');
}

/** The session total's tooltip: the numbers, and how its cost was added up. */
export function sessionTitle(session: ISessionUsage): string {
  const lines = numbersTitle(session.usage);
  if (session.cost !== null) {
    const unpriced = session.usage.turns - session.priced;
    lines.push(
      `Estimated cost: ${formatCost(session.cost)}, each turn at the price of the model it ran on (c.DataAgent.prices)` +
        (unpriced
          ? `; ${plural(unpriced, 'turn')} on a model without a price not counted`
          : '')
    );
  }
  return lines.join('\n');
}

/** The tooltip lines every usage has: tokens, calls, time. */
function numbersTitle(usage: IUsage): string[] {
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
  return lines;
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
