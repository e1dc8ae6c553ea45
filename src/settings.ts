/**
 * The user's settings of the assistant (schema/plugin.json), and the knobs
 * a turn sends, within what the server accepts (`GET config`'s limits).
 */
import type { ISettingRegistry } from '@jupyterlab/settingregistry';

import { Limits, Strategy, clampKnob } from './models';
import type { InsertMode } from './suggestions';
import type { TurnOptions } from './wire';

export interface IAgentSettings {
  defaultStrategy: Strategy;
  /** Fix and Improve from the cell menu: their own strategy, not the composer's. */
  cellEditStrategy: Strategy;
  /** null: the server's default for the strategy (its catalog says which). */
  samples: number | null;
  budget: number | null;
  insertMode: InsertMode;
  autoInsert: boolean;
  temperature: number | null;
}

export const DEFAULT_SETTINGS: IAgentSettings = {
  defaultStrategy: 'direct',
  cellEditStrategy: 'direct',
  samples: null,
  budget: null,
  insertMode: 'single',
  autoInsert: true,
  temperature: null
};

/** The settings as the registry has them now; the defaults without one. */
export function readSettings(
  settings: ISettingRegistry.ISettings | null
): IAgentSettings {
  if (!settings) {
    return { ...DEFAULT_SETTINGS };
  }
  const get = <T>(key: keyof IAgentSettings, fallback: T): T => {
    const value = settings.get(key).composite;
    return value === undefined || value === null
      ? fallback
      : (value as unknown as T);
  };
  return {
    defaultStrategy: get<Strategy>(
      'defaultStrategy',
      DEFAULT_SETTINGS.defaultStrategy
    ),
    cellEditStrategy: get<Strategy>(
      'cellEditStrategy',
      DEFAULT_SETTINGS.cellEditStrategy
    ),
    samples: get<number | null>('samples', DEFAULT_SETTINGS.samples),
    budget: get<number | null>('budget', DEFAULT_SETTINGS.budget),
    insertMode: get('insertMode', DEFAULT_SETTINGS.insertMode),
    autoInsert: get('autoInsert', DEFAULT_SETTINGS.autoInsert),
    temperature: get<number | null>('temperature', DEFAULT_SETTINGS.temperature)
  };
}

/**
 * The settings within the server's limits: a samples or budget setting
 * above what the server accepts is its limit (the settings schema has no
 * maximum of its own: the server's is the one).
 */
export function withinLimits(
  settings: IAgentSettings,
  limits: Limits
): IAgentSettings {
  const samples = clampKnob(settings.samples, limits?.max_samples);
  const budget = clampKnob(settings.budget, limits?.max_budget);
  return samples === settings.samples && budget === settings.budget
    ? settings
    : { ...settings, samples, budget };
}

/**
 * A turn's options: the composer's knobs, else the settings', within the
 * server's limits. Knobs left unset take the server's default for the
 * strategy; the server ignores a knob the strategy does not have.
 * `freshState`: the turn waits for a cell running in the kernel instead of
 * starting from the state before it.
 */
export function turnOptions(
  knobs: {
    samples?: number | null;
    budget?: number | null;
    freshState?: boolean;
  },
  settings: IAgentSettings,
  limits: Limits
): TurnOptions {
  const opts: TurnOptions = {};
  const samples = clampKnob(
    knobs.samples ?? settings.samples,
    limits?.max_samples
  );
  const budget = clampKnob(knobs.budget ?? settings.budget, limits?.max_budget);
  if (samples !== null) {
    opts.samples = samples;
  }
  if (budget !== null) {
    opts.budget = budget;
  }
  if (settings.temperature !== null) {
    opts.temperature = settings.temperature;
  }
  if (knobs.freshState) {
    opts.fresh_state = true;
  }
  return opts;
}

/**
 * The strategy of a request: the one it names, else Fix and Improve from the
 * cell menu (`edit`) take theirs from the settings (a one-cell fix must not
 * become the composer's 40-iteration search), else the composer's.
 */
export function requestStrategy(
  request: { strategy?: Strategy; edit?: unknown },
  composer: Strategy,
  settings: IAgentSettings
): Strategy {
  return (
    request.strategy ?? (request.edit ? settings.cellEditStrategy : composer)
  );
}
