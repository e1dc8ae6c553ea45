import { NotebookPanel } from '@jupyterlab/notebook';

import { WARM_DEBOUNCE_MS, Warmer, warmBody } from '../warm';
import type { WarmRequest } from '../wire';

/** The parts of a NotebookPanel that warmBody reads: two code cells, the second active. */
function panel(active = 1): NotebookPanel {
  const cells = [
    {
      cell_type: 'code',
      source: 'import pandas as pd',
      id: 'a',
      execution_count: 1
    },
    { cell_type: 'code', source: 'df.describe()', id: 'b', execution_count: 2 }
  ];
  const shared = {
    cells: cells.map(c => ({
      ...c,
      getSource: () => c.source,
      getId: () => c.id
    })),
    toJSON: () => ({
      cells: cells.map(c => ({ ...c, metadata: {}, outputs: [] }))
    })
  };
  return {
    context: { path: 'weather.ipynb' },
    sessionContext: { session: { kernel: { id: 'k-1' } } },
    content: {
      activeCellIndex: active,
      model: { sharedModel: shared, getMetadata: () => undefined }
    }
  } as unknown as NotebookPanel;
}

describe('warmBody', () => {
  it('sends the whole notebook and the active cell for the next turn', () => {
    const body = warmBody(panel(), 'turn')!;
    expect(body.kind).toBe('turn');
    expect(body.active_index).toBe(1);
    expect(body.kernel_id).toBe('k-1');
    expect((body.cells ?? []).map(c => c.source)).toEqual([
      'import pandas as pd',
      'df.describe()'
    ]);
  });

  it('sends only the cells above the focused cell for ghost text', () => {
    const body = warmBody(panel(), 'inline')!;
    expect(body.active_index).toBeNull();
    expect((body.cells ?? []).map(c => c.source)).toEqual([
      'import pandas as pd'
    ]);
    expect((body.cells ?? [])[0]?.execution_count).toBe(1);
  });
});

describe('Warmer', () => {
  beforeEach(() => jest.useFakeTimers());
  afterEach(() => jest.useRealTimers());

  it('sends one request per kind after the focus settles', async () => {
    const sent: WarmRequest[] = [];
    const warmer = new Warmer(async body => {
      sent.push(body);
    });
    const p = panel();
    warmer.request(p, 'inline');
    warmer.request(p, 'inline');
    warmer.request(p, 'turn');
    jest.advanceTimersByTime(WARM_DEBOUNCE_MS - 1);
    expect(sent).toHaveLength(0);
    jest.advanceTimersByTime(1);
    expect(sent.map(b => b.kind).sort()).toEqual(['inline', 'turn']);
    warmer.request(null, 'turn'); // no notebook: nothing to warm
    warmer.request(p, 'turn');
    warmer.dispose(); // disposed before the quiet time: nothing sent
    jest.advanceTimersByTime(WARM_DEBOUNCE_MS);
    expect(sent).toHaveLength(2);
  });

  it('ignores a refused request', async () => {
    const warmer = new Warmer(() => Promise.reject(new Error('model busy')));
    warmer.request(panel(), 'turn');
    jest.advanceTimersByTime(WARM_DEBOUNCE_MS);
    await Promise.resolve();
  });
});
