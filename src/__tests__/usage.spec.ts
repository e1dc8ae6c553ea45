import {
  NO_USAGE,
  addUsage,
  contextCuts,
  contextFill,
  contextLabel,
  contextTitle,
  contextWasCut,
  costOf,
  formatCost,
  formatSeconds,
  formatTokens,
  modelPrice,
  sessionTitle,
  sessionUsage,
  turnPrice,
  usageOf,
  usageOfResult,
  usageParts,
  usageTitle
} from '../usage';
import { configRows, priceLines } from '../configtable';
import type {
  AgentConfig,
  ContextReport,
  DoneResult,
  SearchStats
} from '../wire';

const STATS: SearchStats = {
  iterations: 0,
  nodes: 1,
  model_calls: 1,
  prompt_tokens: 1234,
  completion_tokens: 56,
  reused_tokens: 0,
  executions: 1,
  wall_time_s: 2.345,
  model_time_s: 1.5,
  value: null,
  classes: [],
  estimator: '',
  transport: 'local',
  context: null,
  unspent: 0,
  samples: 0
};

const PRICE = { input: 0.15, output: 0.6 };

describe('usage', () => {
  it('reads one turn from the done event stats', () => {
    expect(usageOf(STATS)).toEqual({
      promptTokens: 1234,
      completionTokens: 56,
      modelCalls: 1,
      wallTimeS: 2.345,
      modelTimeS: 1.5,
      turns: 1
    });
  });

  it('adds turns up', () => {
    const total = addUsage(addUsage(NO_USAGE, usageOf(STATS)), {
      ...usageOf(STATS),
      modelCalls: 4
    });
    expect(total).toEqual({
      promptTokens: 2468,
      completionTokens: 112,
      modelCalls: 5,
      wallTimeS: 4.69,
      modelTimeS: 3,
      turns: 2
    });
  });

  it('adds up only the finished turns of a session', () => {
    const done: DoneResult = {
      strategy: 'direct',
      answer: null,
      chosen: 0,
      candidates: 1,
      stats: STATS,
      protections: null
    };
    expect(sessionUsage([], {})).toBeNull();
    expect(sessionUsage([null], {})).toBeNull();
    const turn = usageOfResult(done);
    expect(sessionUsage([turn, null, turn], {})).toEqual({
      usage: {
        promptTokens: 2468,
        completionTokens: 112,
        modelCalls: 2,
        wallTimeS: 4.69,
        modelTimeS: 3,
        turns: 2
      },
      cost: null,
      priced: 0
    });
  });

  it('estimates the cost only with a price', () => {
    expect(costOf(usageOf(STATS), null)).toBeNull();
    // 1234 * 0.15 / 1e6 + 56 * 0.6 / 1e6
    expect(costOf(usageOf(STATS), PRICE)).toBeCloseTo(0.0002187, 9);
  });

  it('formats tokens, costs and seconds for reading', () => {
    expect(formatTokens(950)).toBe('950');
    expect(formatTokens(12345)).toBe('12,345');
    expect(formatCost(0)).toBe('$0');
    expect(formatCost(0.00001)).toBe('< $0.0001');
    expect(formatCost(0.0002187)).toBe('$0.0002');
    expect(formatCost(0.4249)).toBe('$0.42');
    expect(formatCost(12.3)).toBe('$12.30');
    expect(formatSeconds(0.84)).toBe('0.8 s');
    expect(formatSeconds(12.4)).toBe('12 s');
    expect(formatSeconds(65)).toBe('1 min 05 s');
  });

  it('writes the footer line, with a cost when there is a price', () => {
    expect(usageParts(usageOf(STATS), null)).toEqual([
      '1,234 in / 56 out tokens',
      '1 model call',
      '2.3 s (model 1.5 s)'
    ]);
    // Not measured (a server without the field): the wall time alone.
    expect(usageParts({ ...usageOf(STATS), modelTimeS: 0 }, null).pop()).toBe(
      '2.3 s'
    );
    const usage = { ...usageOf(STATS), modelCalls: 3 };
    expect(usageParts(usage, costOf(usage, PRICE), { time: false })).toEqual([
      '1,234 in / 56 out tokens',
      '3 model calls',
      '≈ $0.0002'
    ]);
  });

  it('explains the numbers in the tooltip', () => {
    const title = usageTitle(usageOf(STATS), PRICE);
    expect(title).toContain('Prompt tokens: 1,234');
    expect(title).toContain('Completion tokens: 56');
    expect(title).toContain('$0.15 / $0.6 per million');
    const onModel = usageTitle(usageOf(STATS, 'gpt-4o'), null);
    expect(onModel).toContain('Model: gpt-4o');
    expect(onModel).toContain('No price configured for gpt-4o');
    expect(title).toContain('waiting for the model: 1.5 s');
    expect(title).toContain('building the prompt): 0.8 s');
    expect(usageTitle(usageOf(STATS), null)).not.toContain('cost');
  });
});

describe('context gauge', () => {
  const REPORT: ContextReport = {
    prompt_tokens: 1200,
    window: 3000,
    cells_dropped: 0,
    exemplars_dropped: 0,
    outputs_cut: 0,
    over_budget: false,
    mentioned: [],
    frames_cut: []
  };

  it('fills with the prompt tokens against the budget', () => {
    expect(contextFill(REPORT)).toBeCloseTo(0.4);
    expect(contextLabel(REPORT)).toBe('context 40%');
    expect(contextFill({ ...REPORT, prompt_tokens: 4000 })).toBe(1);
    expect(contextFill({ ...REPORT, window: 0 })).toBe(0);
  });

  it('says nothing was cut when nothing was', () => {
    expect(contextWasCut(REPORT)).toBe(false);
    expect(contextCuts(REPORT)).toEqual([]);
    expect(contextTitle(REPORT)).toBe(
      'Prompt: 1,200 of 3,000 tokens (40% of the prompt budget)\nNothing was cut.'
    );
  });

  it('lists every cut: cells, examples, outputs, wide and summarized frames', () => {
    const cut: ContextReport = {
      ...REPORT,
      prompt_tokens: 2990,
      cells_dropped: 3,
      exemplars_dropped: 1,
      outputs_cut: 2,
      mentioned: ['df'],
      frames_cut: [
        {
          name: 'wide',
          shown_columns: 20,
          total_columns: 30,
          summarized: false
        },
        { name: 'big', shown_columns: 6, total_columns: 40, summarized: true }
      ]
    };
    expect(contextWasCut(cut)).toBe(true);
    expect(contextCuts(cut)).toEqual([
      '3 oldest cells left out to fit the budget',
      '1 worked example left out',
      '2 cell outputs cut short',
      'wide: 20 of 30 columns shown; mention @wide for all',
      'big: summarized (6 of 40 columns named); mention @big for all'
    ]);
    const title = contextTitle(cut).split('\n');
    expect(title[0]).toBe(
      'Prompt: 2,990 of 3,000 tokens (100% of the prompt budget)'
    );
    expect(title[1]).toBe('In full, first: @df');
    expect(title[2]).toBe('Cut:');
    expect(title).toContain(
      '  wide: 20 of 30 columns shown; mention @wide for all'
    );
  });

  it('says when the prompt is over budget even after cutting', () => {
    expect(contextCuts({ ...REPORT, over_budget: true })).toEqual([
      'Over the budget even so: the schema and the question are never cut'
    ]);
  });
});

/** The rows as an object, label -> value. */
function byLabel(rows: [string, string][]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [label, value] of rows) {
    out[label] = value;
  }
  return out;
}

const CONFIG_BASE: AgentConfig = {
  version: 1,
  backend: 'openai',
  model: 'gpt-4o-mini',
  base_url: 'https://api.example.com/v1',
  api_key_set: true,
  model_info: {
    name: 'gpt-4o-mini',
    kind: 'openai',
    note: 'at api.example.com'
  },
  strategies: [
    {
      name: 'direct',
      label: 'Direct',
      summary: '',
      samples: null,
      budget: null
    },
    { name: 'vote', label: 'Vote', summary: '', samples: 5, budget: null }
  ],
  capabilities: {
    strategies: ['direct'],
    chat: true,
    live_state: true,
    events: 'websocket',
    inline_completion: false
  },
  limits: {
    max_samples: 32,
    max_budget: 500,
    max_intent_chars: 20000,
    max_concurrent_jobs: 4
  },
  price: { input: 0.15, output: 0.6 },
  models: ['gpt-4o-mini', 'gpt-4o'],
  prices: {}
};

describe('configRows', () => {
  const CONFIG = CONFIG_BASE;

  it('shows the server configuration, the strategies it can run and its limits', () => {
    const rows = byLabel(configRows(CONFIG));
    expect(rows).toEqual({
      Backend: 'openai',
      Model: 'gpt-4o-mini',
      'Models offered': 'gpt-4o-mini, gpt-4o',
      Endpoint: 'https://api.example.com/v1',
      'API key': 'set on the server',
      Strategies: 'Direct',
      Limits:
        'max samples: 32, max budget: 500, max intent chars: 20000, max concurrent jobs: 4',
      'Inline completion': 'off',
      // Every offered model's price: a turn's cost is its own model's (M1).
      Price:
        'gpt-4o-mini: $0.15 input / $0.6 output per million tokens\n' +
        'gpt-4o: none (no cost shown)'
    });
  });

  it('shows the model picked in the notebook, and every price (N5, M1)', () => {
    const priced = {
      ...CONFIG,
      prices: {
        'gpt-4o-mini': { input: 0.15, output: 0.6 },
        'gpt-4o': { input: 2.5, output: 10 }
      }
    };
    const rows = byLabel(configRows(priced, 'gpt-4o'));
    expect(rows.Model).toBe(
      'gpt-4o (picked in this notebook; configured: gpt-4o-mini)'
    );
    expect(rows.Price).toBe(
      'gpt-4o-mini: $0.15 input / $0.6 output per million tokens\n' +
        'gpt-4o: $2.5 input / $10 output per million tokens'
    );
    // Whatever is picked, every configured price is listed, not "none configured".
    expect(byLabel(configRows(CONFIG, 'gpt-4o')).Price).toContain(
      'gpt-4o-mini: $0.15 input'
    );
    // One model offered: its price alone.
    expect(
      byLabel(configRows({ ...CONFIG, models: ['gpt-4o-mini'] })).Price
    ).toBe('$0.15 input / $0.6 output per million tokens');
  });

  it('says what is missing rather than leaving a row empty', () => {
    const rows = byLabel(
      configRows({
        ...CONFIG,
        model: '',
        base_url: null,
        api_key_set: false,
        // An older server's reply, without limits.
        limits: {} as AgentConfig['limits'],
        price: null,
        models: ['gpt-4o-mini'],
        // An older server's reply, without the model's name.
        model_info: undefined as unknown as AgentConfig['model_info']
      })
    );
    expect(rows.Model).toBe('(default)');
    // The embedded model, named by the server (m2).
    const embedded = byLabel(
      configRows({
        ...CONFIG,
        backend: 'embedded',
        model: '',
        model_info: {
          name: 'SmolLM2-135M-Instruct',
          kind: 'embedded',
          note: 'small and weak at code'
        }
      })
    );
    expect(embedded.Model).toBe(
      'SmolLM2-135M-Instruct, embedded, small and weak at code'
    );
    expect(rows.Endpoint).toBe('—');
    expect(rows['API key']).toBe('not set');
    expect(rows.Limits).toBe('—');
    expect(rows.Price).toBe('none configured (no cost shown)');
    expect(rows['Models offered']).toBe('—');
  });
});

describe('modelPrice (N5)', () => {
  const config = {
    price: { input: 0.15, output: 0.6 },
    prices: {
      'gpt-4o-mini': { input: 0.15, output: 0.6 },
      'gpt-4o': { input: 2.5, output: 10 }
    }
  };
  it("is the picked model's price, else the configured model's", () => {
    expect(modelPrice(config, 'gpt-4o')).toEqual({ input: 2.5, output: 10 });
    expect(modelPrice(config, null)).toEqual({ input: 0.15, output: 0.6 });
    expect(modelPrice(config, 'local-llama')).toBeNull();
    // An older server without `prices`: only the configured model is priced.
    expect(modelPrice({ price: config.price }, 'gpt-4o')).toBeNull();
  });

  it("prices a turn at the model it ran on, not the picked one's", () => {
    expect(turnPrice(config, usageOf(STATS, 'gpt-4o'))).toEqual({
      input: 2.5,
      output: 10
    });
    expect(turnPrice(config, usageOf(STATS, 'local-llama'))).toBeNull();
    // A turn that does not say its model (stored before the field): no cost, not a guess.
    expect(turnPrice(config, usageOf(STATS))).toBeNull();
  });
});

describe('the session total over two models, one priced (M1)', () => {
  // The picker offers both; only big-model has a price.
  const config = {
    price: null,
    prices: { 'big-model': { input: 2.5, output: 10 } }
  };
  const stats = (prompt: number, completion: number): SearchStats => ({
    ...STATS,
    prompt_tokens: prompt,
    completion_tokens: completion
  });
  const result = (model: string, s: SearchStats): DoneResult => ({
    strategy: 'direct',
    answer: null,
    chosen: 0,
    candidates: 1,
    stats: s,
    protections: null,
    model
  });
  // Six turns on the unpriced model, one on the priced one.
  const turns = [
    ...Array.from({ length: 6 }, () =>
      usageOfResult(result('test-model', stats(1000, 100)))
    ),
    usageOfResult(result('big-model', stats(2000, 200)))
  ];
  const bigCost = (2000 * 2.5 + 200 * 10) / 1e6;

  it('costs only the priced model’s turns, each at its own price', () => {
    const costs = turns.map(t => costOf(t, turnPrice(config, t)));
    expect(costs.slice(0, 6)).toEqual([null, null, null, null, null, null]);
    expect(costs[6]).toBeCloseTo(bigCost, 12);
    const total = sessionUsage(turns, config)!;
    expect(total.usage.turns).toBe(7);
    expect(total.usage.promptTokens).toBe(8000);
    expect(total.priced).toBe(1);
    // The one real priced turn, not seven turns at the priced model's rate.
    expect(total.cost).toBeCloseTo(bigCost, 12);
    expect(
      usageParts(total.usage, total.cost, {
        time: false,
        priced: total.priced
      }).pop()
    ).toBe('≈ $0.0070 (1 of 7 turns priced)');
    expect(sessionTitle(total)).toContain(
      '6 turns on a model without a price not counted'
    );
  });

  it('does not change past turns when another model is picked', () => {
    // The picker has no say in a past turn's cost: the same usages and prices give the
    // same costs whichever model is picked now (modelPrice of the pick is not consulted).
    const before = sessionUsage(turns, config);
    for (const picked of ['big-model', 'test-model', null]) {
      expect(modelPrice(config, picked) === null).toBe(picked !== 'big-model');
      expect(sessionUsage(turns, config)).toEqual(before);
    }
    // Not a single priced turn: no cost at all, rather than $0.
    const unpriced = sessionUsage(turns.slice(0, 6), config)!;
    expect(unpriced.cost).toBeNull();
    expect(
      usageParts(unpriced.usage, unpriced.cost, { priced: 0 }).join(' · ')
    ).not.toContain('$');
  });

  it('lists every offered model’s price in the configuration dialog', () => {
    const lines = priceLines({
      ...CONFIG_BASE,
      model: 'test-model',
      models: ['test-model', 'big-model'],
      price: null,
      prices: config.prices
    });
    expect(lines).toEqual([
      'test-model: none (no cost shown)',
      'big-model: $2.5 input / $10 output per million tokens'
    ]);
  });
});
