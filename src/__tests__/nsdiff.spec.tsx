/**
 * What accepting a candidate will change (issue 40, item 6): the formatter,
 * the sidebar's line, the suggestion bar's line and the turn stored for a
 * reload; and a minority candidate's agreement line (m1).
 */
import { ReactWidget } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';
import * as React from 'react';

import {
  CandidateView,
  agreementSummary,
  checksSummary
} from '../components/CandidateView';
import { runOf, toSuggestionCandidate } from '../exchange';
import { parseTurn } from '../metadata';
import { codeSpans, namespaceChanges } from '../nsdiff';
import { SuggestionBar } from '../suggestionbar';
import { candidatesOf } from '../suggestiontargets';
import type { ISuggestionState } from '../suggestions';
import type { Candidate, Check, NamespaceDiff, Variable } from '../wire';

const frame = 'pandas.DataFrame';

function v(
  name: string,
  shape: number[] | null = null,
  before: number[] | null = null
): Variable {
  return { name, type: frame, shape, before };
}

function diff(fields: Partial<NamespaceDiff> = {}): NamespaceDiff {
  return {
    new: [],
    changed: [],
    deleted: [],
    truncated: false,
    note: '',
    files: [],
    ...fields
  };
}

const CLEANED = diff({
  new: [v('clean', [99500, 6])],
  changed: [v('df', [99500, 6], [100000, 6])],
  files: ['out.csv']
});
const LINE =
  'adds `clean` (99,500 × 6); changes `df`: 500 rows fewer; writes `out.csv` in scratch';

describe('namespaceChanges', () => {
  it('says what was added, changed with its shape before and after, and written', () => {
    expect(namespaceChanges(CLEANED)).toBe(LINE);
  });

  it('names columns and deletions, and a change of shape it cannot count', () => {
    expect(
      namespaceChanges(
        diff({
          changed: [v('df', [10, 4], [10, 3]), v('s', [5], [5, 1])],
          deleted: [v('old')],
          new: [{ name: 'n', type: 'int', shape: null, before: null }]
        })
      )
    ).toBe('adds `n`; changes `df`: 1 column more, `s`: now 5; deletes `old`');
    // Same shape: the name alone (its values changed).
    expect(namespaceChanges(diff({ changed: [v('x', [3], [3])] }))).toBe(
      'changes `x`'
    );
  });

  it('lists a few names and counts the rest', () => {
    const many = ['a', 'b', 'c', 'd', 'e'].map(n => v(n));
    expect(namespaceChanges(diff({ new: many, truncated: true }))).toBe(
      'adds `a`, `b`, `c` and 2 more; …'
    );
    expect(
      namespaceChanges(diff({ files: ['1.csv', '2.csv', '3.csv', '4.csv'] }))
    ).toBe('writes `1.csv`, `2.csv`, `3.csv` and 1 more in scratch');
  });

  it('says nothing when the copy could not tell, or saw no change', () => {
    expect(namespaceChanges(null)).toBe('');
    expect(namespaceChanges(undefined)).toBe('');
    expect(
      namespaceChanges(
        diff({ new: [v('x')], note: 'the copy did not report its namespace' })
      )
    ).toBe('');
    expect(namespaceChanges(diff())).toBe('');
    // Files not known (null): no clause about them.
    expect(namespaceChanges(diff({ new: [v('x')], files: null }))).toBe(
      'adds `x`'
    );
  });

  it('splits a line into text and code', () => {
    expect(codeSpans('adds `x` (3)')).toEqual([
      { text: 'adds ', code: false },
      { text: 'x', code: true },
      { text: ' (3)', code: false }
    ]);
  });
});

const rendermime = {
  createRenderer: () =>
    Object.assign(new Widget(), { renderModel: () => Promise.resolve() })
} as any;

function candidate(fields: Partial<Candidate> = {}): Candidate {
  return {
    code: 'clean = df.dropna()',
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
    checks: [],
    namespace: CLEANED,
    ...fields
  };
}

class Host extends ReactWidget {
  constructor(
    private _candidate: Candidate,
    private _chosen = true,
    private _classes: number[] = []
  ) {
    super();
  }
  protected render(): JSX.Element {
    return (
      <CandidateView
        candidate={this._candidate}
        index={0}
        total={5}
        chosen={this._chosen}
        classes={this._classes}
        rendermime={rendermime}
        confinement={null}
      />
    );
  }
}

function mount(host: Host): Host {
  React.act(() => {
    Widget.attach(host, document.body);
    host.update();
  });
  return host;
}

describe('the candidate view and the suggestion bar', () => {
  it('shows what running the candidate will change, names in code font', () => {
    const host = mount(new Host(candidate()));
    const line = host.node.querySelector('.jp-DataAgent-changes')!;
    expect(line.textContent).toBe(`If run: ${LINE.replace(/`/g, '')}`);
    expect(
      Array.from(line.querySelectorAll('code')).map(c => c.textContent)
    ).toEqual(['clean', 'df', 'out.csv']);
    React.act(() => host.dispose());
    const unknown = mount(
      new Host(candidate({ namespace: diff({ note: 'not a fork' }) }))
    );
    expect(unknown.node.querySelector('.jp-DataAgent-changes')).toBeNull();
    React.act(() => unknown.dispose());
  });

  it('shows the same line on the suggestion bar, and none when not known', () => {
    const bar = new SuggestionBar(() => undefined);
    const state = (c: Candidate) =>
      ({
        turnId: 't1',
        intent: 'Clean it',
        status: 'suggested',
        candidates: [toSuggestionCandidate(c)],
        index: 0,
        target: null
      }) as unknown as ISuggestionState;
    const line = () =>
      bar.node.querySelector<HTMLElement>('.jp-DataAgent-changes')!;
    bar.render(state(candidate()));
    expect(line().hidden).toBe(false);
    expect(line().textContent).toBe(`If run: ${LINE.replace(/`/g, '')}`);
    bar.render(state(candidate({ namespace: null })));
    expect(line().hidden).toBe(true);
    expect(line().textContent).toBe('');
    bar.dispose();
  });

  it('keeps the line with the turn stored in the notebook, for a reload', () => {
    const run = runOf(candidate())!;
    expect(run.changes).toBe(LINE);
    const turn = parseTurn({
      turn_id: 't1',
      intent: 'Clean it',
      code: 'clean = df.dropna()',
      candidates: ['clean = df.dropna()'],
      runs: [JSON.parse(JSON.stringify(run))]
    })!;
    expect(turn.runs?.[0]?.changes).toBe(LINE);
    expect(candidatesOf(turn)[0].changes).toBe(LINE);
    expect(runOf(candidate({ namespace: null }))!.changes).toBeUndefined();
  });
});

describe('a minority candidate (m1)', () => {
  const probes: Check[] = [
    'rows',
    'nan',
    'dtype',
    'empty',
    'index',
    'range',
    'type',
    'plausible'
  ].map(name => ({ name, passed: true, detail: '' }));
  const lost: Check = {
    name: 'agree',
    passed: false,
    detail: '1 of 5 answers agree; the vote picked another answer'
  };

  it('shows its agreement and counts the agreement check as not passed', () => {
    const minority = candidate({ checks: [...probes, lost], support: 1 });
    expect(agreementSummary(minority, false, [4, 1])?.text).toBe(lost.detail);
    expect(checksSummary(minority.checks)!.text).toBe(
      'checks 8/9 · agreement with other answers'
    );
    const host = mount(new Host(minority, false, [4, 1]));
    const facts = host.node.querySelector('.jp-DataAgent-facts')!.textContent;
    expect(facts).toContain(lost.detail);
    expect(facts).toContain('checks 8/9');
    React.act(() => host.dispose());
  });

  it('keeps the vote words for one that voted with others, and nothing without a vote', () => {
    const two = candidate({ checks: [...probes, lost], support: 2 });
    expect(agreementSummary(two, false, [3, 2])?.text).toBe(
      '2 of 5 agree (classes 3 · 2)'
    );
    expect(agreementSummary(candidate(), false, [])).toBeNull();
  });
});
