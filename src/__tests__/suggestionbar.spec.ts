/**
 * The suggestion's toolbar in the notebook: no ‹ › for a lone candidate,
 * and a warning for a candidate that raised or was stopped in its copy.
 */
import { SuggestionBar } from '../suggestionbar';
import { toSuggestionCandidate } from '../exchange';
import type { ISuggestionState } from '../suggestions';
import type { Candidate } from '../wire';

function ran(
  code: string,
  status: string,
  ename: string | null = null
): Candidate {
  return {
    code,
    steps: [],
    explanation: '',
    result: {
      status,
      outputs: [],
      value: null,
      ename,
      evalue: null,
      traceback: [],
      duration_s: 1,
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
    analysis: []
  } as unknown as Candidate;
}

function state(candidates: Candidate[], index = 0): ISuggestionState {
  return {
    turnId: 't1',
    intent: 'Count the rows',
    status: 'suggested',
    candidates: candidates.map(toSuggestionCandidate),
    index,
    target: null
  } as unknown as ISuggestionState;
}

describe('SuggestionBar', () => {
  const bar = new SuggestionBar(() => undefined);
  const button = (action: string) =>
    bar.node.querySelector<HTMLButtonElement>(`[data-action="${action}"]`)!;
  const warning = () =>
    bar.node.querySelector<HTMLElement>('.jp-DataAgent-suggestionWarning')!;

  it('shows no previous/next buttons for a single candidate', () => {
    bar.render(state([ran('len(df)', 'ok')]));
    expect(button('previous').hidden).toBe(true);
    expect(button('next').hidden).toBe(true);
    bar.render(state([ran('len(df)', 'ok'), ran('df.shape[0]', 'ok')]));
    expect(button('previous').hidden).toBe(false);
    expect(button('next').hidden).toBe(false);
  });

  it('warns when the candidate shown raised or timed out in its copy', () => {
    const candidates = [
      ran('len(df)', 'ok'),
      ran('df.x', 'error', 'AttributeError'),
      ran('while True: pass', 'timeout')
    ];
    bar.render(state(candidates, 0));
    expect(warning().hidden).toBe(true);
    bar.render(state(candidates, 1));
    expect(warning().hidden).toBe(false);
    expect(warning().textContent).toBe(
      'It raised AttributeError in its kernel copy.'
    );
    bar.render(state(candidates, 2));
    expect(warning().textContent).toBe(
      'It was stopped by the time limit in its kernel copy.'
    );
  });
});
