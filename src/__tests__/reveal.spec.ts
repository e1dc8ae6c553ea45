import { revealDelta } from '../reveal';

describe('revealDelta: a suggestion brought into view', () => {
  const view = { top: 100, bottom: 700 };

  it('does not move a block already in view', () => {
    expect(revealDelta(view, { top: 200, bottom: 500 })).toBe(0);
  });

  it('shows a block below the view whole, moving as little as it can', () => {
    expect(revealDelta(view, { top: 650, bottom: 900 })).toBe(208);
  });

  it('shows a block above the view from its top', () => {
    expect(revealDelta(view, { top: -300, bottom: 0 })).toBe(-408);
  });

  it('puts the top of a block taller than the view at its top (the bar)', () => {
    // JupyterLab's scrollToItem aligned such a cell by its end (issue 28, N7).
    expect(revealDelta(view, { top: 600, bottom: 1500 })).toBe(492);
    expect(revealDelta(view, { top: -500, bottom: 650 })).toBe(-608);
    expect(revealDelta(view, { top: 108, bottom: 2000 })).toBe(0);
  });
});
