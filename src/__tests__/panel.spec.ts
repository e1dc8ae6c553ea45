import { voteSummary } from '../panel';

describe('voteSummary', () => {
  it('says how many samples agree and the sizes of the classes', () => {
    const vote = voteSummary(3, [3, 1, 1]);
    expect(vote?.text).toBe('3 of 5 agree (classes 3 · 1 · 1)');
    expect(vote?.title).toContain('Samples whose outputs were the same answer');
    expect(vote?.title).toContain('3 of the 5 samples that voted');
    expect(vote?.title).toContain('3, 1, 1');
  });

  it('leaves the classes out when there was only one', () => {
    const vote = voteSummary(4, [4]);
    expect(vote?.text).toBe('4 of 4 agree');
    expect(vote?.title).not.toContain('classes');
  });

  it('speaks of a lone sample in the singular', () => {
    expect(voteSummary(1, [1])?.title).toContain('1 of the 1 sample that');
  });

  it('shows a losing class too', () => {
    expect(voteSummary(2, [3, 2])?.text).toBe('2 of 5 agree (classes 3 · 2)');
  });

  it('is null when nothing voted', () => {
    expect(voteSummary(1, [])).toBeNull();
    expect(voteSummary(2, [0])).toBeNull();
  });
});
