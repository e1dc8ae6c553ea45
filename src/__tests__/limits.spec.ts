/**
 * The sidebar's limits come from the server (GET config's `limits`): the
 * knobs and the question's length are checked against them, and a setting
 * above a limit is used as that limit.
 */
import {
  MAX_INTENT_CHARS,
  clampKnob,
  intentProblem,
  maxIntentChars
} from '../models';
import {
  DEFAULT_SETTINGS,
  IAgentSettings,
  requestStrategy,
  turnOptions,
  withinLimits
} from '../settings';
import type { ServerLimits } from '../wire';
// The settings the user edits (JupyterLab's settings editor).
import schema from '../../schema/plugin.json';

const LIMITS: ServerLimits = {
  max_samples: 8,
  max_budget: 50,
  max_intent_chars: 100,
  max_concurrent_jobs: 2
};

const SETTINGS: IAgentSettings = {
  ...DEFAULT_SETTINGS,
  samples: 20,
  budget: 200,
  temperature: 0.2
};

describe('clampKnob', () => {
  it('keeps a value within 1 and the server limit', () => {
    expect(clampKnob(5, 8)).toBe(5);
    expect(clampKnob(20, 8)).toBe(8);
    expect(clampKnob(0, 8)).toBe(1);
    expect(clampKnob(-3, undefined)).toBe(1);
    expect(clampKnob(2.7, 8)).toBe(2);
  });

  it('leaves the server default (null) and an unknown limit alone', () => {
    expect(clampKnob(null, 8)).toBeNull();
    expect(clampKnob(500, undefined)).toBe(500);
    expect(clampKnob(500, null)).toBe(500);
  });
});

describe('withinLimits', () => {
  it('uses a setting above the server limit as that limit', () => {
    const settings = withinLimits(SETTINGS, LIMITS);
    expect(settings.samples).toBe(8);
    expect(settings.budget).toBe(50);
    expect(settings.temperature).toBe(0.2);
  });

  it('is the settings themselves when within the limits, or none is known', () => {
    const small = { ...SETTINGS, samples: 3, budget: 10 };
    expect(withinLimits(small, LIMITS)).toBe(small);
    expect(withinLimits(SETTINGS, null)).toBe(SETTINGS);
    // An older server that sent no limits.
    expect(withinLimits(SETTINGS, {})).toBe(SETTINGS);
  });
});

describe('turnOptions', () => {
  it("sends the composer's knobs, else the settings', within the limits", () => {
    expect(turnOptions({ samples: 3 }, SETTINGS, LIMITS)).toEqual({
      samples: 3,
      budget: 50,
      temperature: 0.2
    });
    expect(turnOptions({ samples: 99, budget: 99 }, SETTINGS, LIMITS)).toEqual({
      samples: 8,
      budget: 50,
      temperature: 0.2
    });
  });

  it("leaves unset knobs to the server's default", () => {
    expect(turnOptions({}, DEFAULT_SETTINGS, LIMITS)).toEqual({});
  });

  it('asks for the fresh state only when told to', () => {
    expect(turnOptions({ freshState: true }, DEFAULT_SETTINGS, LIMITS)).toEqual(
      { fresh_state: true }
    );
    expect(
      turnOptions({ freshState: false }, DEFAULT_SETTINGS, LIMITS)
    ).toEqual({});
  });
});

describe('the question length', () => {
  it("is the server's max_intent_chars when it said, else the default", () => {
    expect(maxIntentChars(LIMITS)).toBe(100);
    expect(maxIntentChars(null)).toBe(MAX_INTENT_CHARS);
    expect(maxIntentChars({})).toBe(MAX_INTENT_CHARS);
    expect(intentProblem('x'.repeat(100), maxIntentChars(LIMITS))).toBeNull();
    expect(intentProblem('x'.repeat(101), maxIntentChars(LIMITS))).toContain(
      'the server takes at most 100'
    );
  });
});

describe('schema/plugin.json', () => {
  it('has no upper bound of its own on samples and budget: the server has it', () => {
    const properties = schema.properties as Record<string, any>;
    for (const key of ['samples', 'budget']) {
      expect(properties[key].minimum).toBe(1);
      expect(properties[key].maximum).toBeUndefined();
    }
  });
});

describe('the strategy of Fix and Improve (N4)', () => {
  it("is the setting, not the composer's, for a cell-menu edit", () => {
    const settings = { ...DEFAULT_SETTINGS, cellEditStrategy: 'vote' as const };
    expect(requestStrategy({ edit: 'fix' }, 'mcts', settings)).toBe('vote');
    expect(requestStrategy({ edit: 'improve' }, 'react', settings)).toBe(
      'vote'
    );
    // A question from the composer keeps the composer's; one that names
    // its strategy (Explain, a retry) keeps that.
    expect(requestStrategy({}, 'mcts', settings)).toBe('mcts');
    expect(
      requestStrategy({ edit: 'fix', strategy: 'mcts' }, 'direct', settings)
    ).toBe('mcts');
  });

  it('defaults to direct, in the settings schema and here alike', () => {
    const properties = schema.properties as Record<string, any>;
    expect(properties.cellEditStrategy.default).toBe('direct');
    expect(DEFAULT_SETTINGS.cellEditStrategy).toBe('direct');
    expect(
      properties.cellEditStrategy.oneOf.map((o: { const: string }) => o.const)
    ).toEqual(['direct', 'vote']);
  });
});
