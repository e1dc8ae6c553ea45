import {
  describeVariable,
  insertMention,
  matchVariables,
  mentionAt,
  mentionsIn,
  popupMessage
} from '../mentions';
import type { VariableInfo } from '../wire';

const frame = (name: string, columns: string[] = ['a', 'b']): VariableInfo => ({
  name,
  kind: 'DataFrame',
  shape: [3, columns.length],
  columns,
  total_columns: columns.length
});

const VARIABLES: VariableInfo[] = [
  frame('flights'),
  frame('df'),
  frame('df_clean'),
  frame('odd_frame'),
  {
    name: 'price',
    kind: 'Series',
    shape: [1],
    columns: ['price'],
    total_columns: 1
  }
];

describe('mentionAt', () => {
  it('finds the @query the caret ends', () => {
    expect(mentionAt('plot @d', 7)).toEqual({ start: 5, end: 7, query: 'd' });
    expect(mentionAt('@', 1)).toEqual({ start: 0, end: 1, query: '' });
    expect(mentionAt('compare (@df_c', 14)).toEqual({
      start: 9,
      end: 14,
      query: 'df_c'
    });
  });

  it('is null outside a mention, inside a word or an address', () => {
    expect(mentionAt('plot df', 7)).toBeNull();
    expect(mentionAt('mail a@b', 8)).toBeNull();
    expect(mentionAt('@df then more', 13)).toBeNull();
    // The caret in the middle of a name is an edit, not a completion.
    expect(mentionAt('@dfx', 3)).toBeNull();
    expect(mentionAt('@@df', 4)).toBeNull();
  });
});

describe('mentionsIn', () => {
  it('reads the @names as the server does: in order, each once', () => {
    expect(mentionsIn('join @df and @flights on @df.a')).toEqual([
      'df',
      'flights'
    ]);
    expect(mentionsIn('a@b.com, @2x, @ alone')).toEqual([]);
  });
});

describe('matchVariables', () => {
  it('lists names starting with the query first, then containing it', () => {
    expect(matchVariables(VARIABLES, 'd').map(v => v.name)).toEqual([
      'df',
      'df_clean',
      'odd_frame'
    ]);
    expect(matchVariables(VARIABLES, 'DF').map(v => v.name)).toEqual([
      'df',
      'df_clean'
    ]);
    expect(matchVariables(VARIABLES, '')).toHaveLength(5);
    expect(matchVariables(VARIABLES, '', 2)).toHaveLength(2);
    expect(matchVariables(VARIABLES, 'zzz')).toEqual([]);
  });
});

describe('insertMention', () => {
  it('replaces the typed query with the name and a space', () => {
    const text = 'plot @d';
    expect(insertMention(text, mentionAt(text, 7)!, 'df')).toEqual({
      text: 'plot @df ',
      caret: 9
    });
  });

  it('keeps the text after the caret and adds no second space', () => {
    const text = 'plot @d by month';
    expect(insertMention(text, mentionAt(text, 7)!, 'df_clean')).toEqual({
      text: 'plot @df_clean by month',
      caret: 14
    });
  });
});

describe('describeVariable', () => {
  it('shows kind, shape and the first columns', () => {
    expect(describeVariable(frame('df'))).toBe('DataFrame · 3 × 2 · a, b');
    expect(
      describeVariable({
        name: 'wide',
        kind: 'DataFrame',
        shape: [1500, 30],
        columns: ['c0', 'c1'],
        total_columns: 30
      })
    ).toBe('DataFrame · 1,500 × 30 · c0, c1, …');
    expect(describeVariable(VARIABLES[4])).toBe('Series · 1 row');
  });
});

describe('popupMessage', () => {
  it('says why there is nothing to pick', () => {
    const ready = { status: 'ready' as const, variables: VARIABLES };
    expect(popupMessage({ status: 'loading' }, [], '')).toContain('Reading');
    expect(
      popupMessage({ status: 'unavailable', reason: 'busy' }, [], 'd')
    ).toBe('busy');
    expect(popupMessage(ready, [], 'zz')).toBe(
      'No DataFrame or Series named like “zz”.'
    );
    expect(popupMessage({ status: 'ready', variables: [] }, [], '')).toBe(
      'No DataFrames or Series in the kernel yet.'
    );
    expect(popupMessage(ready, VARIABLES, 'd')).toBeNull();
  });
});
