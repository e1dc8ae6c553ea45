/**
 * The "checks" line of a candidate: the evidence from its copy in a few
 * words, every check's detail on hover or focus.
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import { CandidateView, checksSummary } from '../components/CandidateView';
import type { Candidate, Check } from '../wire';

const CHECKS: Check[] = [
  { name: 'rows', passed: true, detail: '' },
  {
    name: 'nan',
    passed: false,
    detail: "sales['units'] has 2 NaN of 6 (0 of 6 in sales)"
  },
  { name: 'type', passed: true, detail: 'a number' },
  { name: 'agree', passed: false, detail: '1 of 3 answers agree' }
];

/** Renderers that render nothing: the code block is not what is tested. */
const rendermime = {
  createRenderer: () =>
    Object.assign(new Widget(), { renderModel: () => Promise.resolve() })
} as any;

function candidate(checks: Check[]): Candidate {
  return {
    code: 'sales.units.mean()',
    steps: [],
    explanation: '',
    result: {
      status: 'ok',
      outputs: [],
      value: null,
      ename: null,
      evalue: null,
      traceback: [],
      duration_s: 0.1,
      pid: null,
      limit: null,
      truncated: false,
      namespace: null
    },
    score: null,
    support: 1,
    repaired: false,
    meta: {},
    trace: [],
    analysis: [],
    checks,
    namespace: null
  };
}

class Host extends ReactWidget {
  constructor(private _candidate: Candidate) {
    super();
  }
  protected render(): JSX.Element {
    return (
      <CandidateView
        candidate={this._candidate}
        index={0}
        total={1}
        chosen={false}
        classes={[]}
        rendermime={rendermime}
        confinement={null}
      />
    );
  }
}

function mount(c: Candidate): Host {
  const host = new Host(c);
  React.act(() => {
    Widget.attach(host, document.body);
    host.update();
  });
  return host;
}

describe('checksSummary', () => {
  it('counts the checks passed and names the failed ones', () => {
    const summary = checksSummary(CHECKS)!;
    expect(summary.text).toBe(
      'checks 2/4 · NaN introduced, agreement with other answers'
    );
    expect(summary.title.split('\n')).toEqual([
      '✓ rows lost or duplicated',
      "✗ NaN introduced: sales['units'] has 2 NaN of 6 (0 of 6 in sales)",
      '✓ answer type: a number',
      '✗ agreement with other answers: 1 of 3 answers agree'
    ]);
  });

  it('names an implausible answer in words', () => {
    const summary = checksSummary([
      { name: 'type', passed: true, detail: 'a number' },
      {
        name: 'plausible',
        passed: false,
        detail: '@corr = 1.3: a correlation beyond ±1'
      }
    ])!;
    expect(summary.text).toBe('checks 1/2 · plausible values');
    expect(summary.title).toContain(
      '✗ plausible values: @corr = 1.3: a correlation beyond ±1'
    );
  });

  it('is silent without checks', () => {
    expect(checksSummary([])).toBeNull();
    expect(checksSummary(undefined)).toBeNull();
  });
});

describe('CandidateView checks line', () => {
  it('shows the line, flagged, with its details on hover and focus', () => {
    const host = mount(candidate(CHECKS));
    const line = host.node.querySelector('.jp-DataAgent-checks') as HTMLElement;
    expect(line).not.toBeNull();
    expect(line.textContent).toBe(checksSummary(CHECKS)!.text);
    expect(line.classList.contains('jp-mod-flagged')).toBe(true);
    expect(line.title).toContain('✗ NaN introduced');
    expect(line.tabIndex).toBe(0);
    expect(line.getAttribute('aria-label')).toContain('1 of 3 answers agree');
    React.act(() => host.dispose());
  });

  it('is not flagged when every check passed, and absent without checks', () => {
    const clean = mount(candidate(CHECKS.map(c => ({ ...c, passed: true }))));
    const line = clean.node.querySelector('.jp-DataAgent-checks')!;
    expect(line.textContent).toBe('checks 4/4');
    expect(line.classList.contains('jp-mod-flagged')).toBe(false);
    React.act(() => clean.dispose());
    const none = mount(candidate([]));
    expect(none.node.querySelector('.jp-DataAgent-checks')).toBeNull();
    React.act(() => none.dispose());
  });
});
