/**
 * The composer's knobs take their bounds from the server's limits (GET
 * config), not from numbers of the front end's own.
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import { MessageLoop } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { Composer } from '../components/Composer';
import { IServerStrategies } from '../components/common';
import { Limits } from '../models';
import type { NotebookSession } from '../session';
import { DEFAULT_SETTINGS, IAgentSettings, withinLimits } from '../settings';

(globalThis as any).IS_REACT_ACT_ENVIRONMENT = true;

const STRATEGIES: IServerStrategies = {
  catalog: [
    {
      name: 'mcts',
      label: 'Search',
      summary: '',
      samples: 3,
      budget: 40
    }
  ] as IServerStrategies['catalog'],
  available: ['mcts']
};

function fakeSession(intentHistory: string[] = []) {
  return {
    model: null,
    strategy: 'mcts',
    running: null,
    pinnedCellId: null,
    intentHistory,
    cellIndex: () => -1,
    panel: { sessionContext: { session: null } },
    send: jest.fn(() => Promise.resolve())
  };
}

class Host extends ReactWidget {
  constructor(
    readonly session: ReturnType<typeof fakeSession>,
    private _settings: IAgentSettings,
    private _limits: Limits
  ) {
    super();
  }
  protected render(): JSX.Element {
    return (
      <Composer
        session={this.session as unknown as NotebookSession}
        settings={withinLimits(this._settings, this._limits)}
        strategies={STRATEGIES}
        models={[]}
        limits={this._limits}
      />
    );
  }
}

function mount(
  settings: IAgentSettings,
  limits: Limits,
  history: string[] = []
): Host {
  const host = new Host(fakeSession(history), settings, limits);
  React.act(() => {
    Widget.attach(host, document.body);
    MessageLoop.sendMessage(host, Widget.Msg.UpdateRequest);
  });
  return host;
}

function knob(host: Host, name: string): HTMLInputElement {
  const label = Array.from(
    host.node.querySelectorAll<HTMLLabelElement>('.jp-DataAgent-number')
  ).find(l => l.textContent?.startsWith(name));
  return label!.querySelector('input')!;
}

/** Type into a React-controlled input. */
function type(input: HTMLInputElement | HTMLTextAreaElement, value: string) {
  const proto = Object.getPrototypeOf(input);
  Object.getOwnPropertyDescriptor(proto, 'value')!.set!.call(input, value);
  React.act(() => {
    input.dispatchEvent(new Event('input', { bubbles: true }));
  });
}

const LIMITS: Limits = {
  max_samples: 8,
  max_budget: 50,
  max_intent_chars: 30,
  max_concurrent_jobs: 2
};

describe('Composer limits', () => {
  let host: Host | null = null;
  afterEach(() => {
    React.act(() => host?.dispose());
    host = null;
  });

  it("bounds the knobs by the server's limits", () => {
    host = mount(DEFAULT_SETTINGS, LIMITS);
    expect(knob(host, 'samples').max).toBe('8');
    expect(knob(host, 'budget').max).toBe('50');
    expect(knob(host, 'samples').min).toBe('1');
    // The strategy's defaults show until a value is typed.
    expect(knob(host, 'samples').value).toBe('3');
    expect(knob(host, 'budget').value).toBe('40');
  });

  it('has no upper bound of its own while the server has not said', () => {
    host = mount(DEFAULT_SETTINGS, null);
    expect(knob(host, 'samples').hasAttribute('max')).toBe(false);
    expect(knob(host, 'budget').hasAttribute('max')).toBe(false);
  });

  it('shows a setting above the limit as the limit', () => {
    host = mount({ ...DEFAULT_SETTINGS, samples: 20, budget: 200 }, LIMITS);
    expect(knob(host, 'samples').value).toBe('8');
    expect(knob(host, 'budget').value).toBe('50');
  });

  it('keeps a typed value within the limit, and sends it', () => {
    host = mount(DEFAULT_SETTINGS, LIMITS);
    type(knob(host, 'samples'), '99');
    expect(knob(host, 'samples').value).toBe('8');
    type(knob(host, 'budget'), '12');
    expect(knob(host, 'budget').value).toBe('12');
    const input = host.node.querySelector('textarea')!;
    type(input, 'Mean delay?');
    const ask =
      host.node.querySelector<HTMLButtonElement>('.jp-DataAgent-send')!;
    React.act(() => ask.click());
    expect(host.session.send).toHaveBeenCalledWith({
      intent: 'Mean delay?',
      strategy: 'mcts',
      samples: 8,
      budget: 12
    });
  });

  it("refuses a question longer than the server's max_intent_chars", () => {
    host = mount(DEFAULT_SETTINGS, LIMITS);
    type(host.node.querySelector('textarea')!, 'x'.repeat(31));
    expect(
      host.node.querySelector('.jp-DataAgent-intentProblem')?.textContent
    ).toContain('the server takes at most 30');
    expect(
      host.node.querySelector<HTMLButtonElement>('.jp-DataAgent-send')!.disabled
    ).toBe(true);
  });
});

describe('Composer history', () => {
  it('walks one question per ↑ and ↓ press', () => {
    const host = mount(DEFAULT_SETTINGS, LIMITS, ['first', 'second', 'third']);
    const area = host.node.querySelector('textarea')!;
    const press = (key: string) =>
      React.act(() => {
        area.dispatchEvent(
          new KeyboardEvent('keydown', { key, bubbles: true, cancelable: true })
        );
      });
    area.focus();
    press('ArrowUp');
    expect(area.value).toBe('third');
    // The caret is at the end of the entry shown, as the browser leaves it.
    area.setSelectionRange(area.value.length, area.value.length);
    press('ArrowUp');
    expect(area.value).toBe('second');
    area.setSelectionRange(area.value.length, area.value.length);
    press('ArrowUp');
    expect(area.value).toBe('first');
    area.setSelectionRange(0, 0);
    press('ArrowDown');
    expect(area.value).toBe('second');
    area.setSelectionRange(0, 0);
    press('ArrowDown');
    press('ArrowDown');
    expect(area.value).toBe('');
    React.act(() => host.dispose());
  });
});
