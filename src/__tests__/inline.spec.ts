import { Widget } from '@lumino/widgets';

import {
  DEBOUNCE_MS,
  DataAgentInlineProvider,
  LatestRequest,
  cellsAbove,
  readGhostText,
  splitLines,
  worthCompleting
} from '../inline';

/** A Response whose body yields `chunks` (what fetch gives for a streamed reply). */
function streamed(chunks: string[]): Response {
  const encoder = new TextEncoder();
  let i = 0;
  const reader = {
    read: async () =>
      i < chunks.length
        ? { value: encoder.encode(chunks[i++]), done: false }
        : { value: undefined, done: true },
    releaseLock: () => undefined
  };
  return { ok: true, body: { getReader: () => reader } } as unknown as Response;
}

const line = (fields: Record<string, unknown>) => JSON.stringify(fields) + '\n';

describe('splitLines', () => {
  it('parses complete lines and keeps the unfinished tail', () => {
    const { lines, rest } = splitLines('{"delta":"a"}\n{"delta":"b"}\n{"del');
    expect(lines.map(l => l.delta)).toEqual(['a', 'b']);
    expect(rest).toBe('{"del');
  });

  it('skips blank lines', () => {
    expect(splitLines('\n{"done":true}\n\n').lines).toHaveLength(1);
  });
});

describe('readGhostText', () => {
  it('accumulates deltas split across network chunks', async () => {
    const response = streamed([
      '{"delta":"air',
      'line\\")"}\n{"delta":"[\\"delay\\"]"}\n',
      line({ done: true, text: 'airline")["delay"]' })
    ]);
    const texts: string[] = [];
    for await (const { text } of readGhostText(response)) {
      texts.push(text);
    }
    expect(texts).toEqual(['airline")', 'airline")["delay"]']);
  });

  it('stops with the error the server reported', async () => {
    const response = streamed([
      line({ delta: 'df' }),
      line({ done: true, error: 'The model is busy' })
    ]);
    const seen: { text: string; error?: string }[] = [];
    for await (const part of readGhostText(response)) {
      seen.push(part);
    }
    expect(seen).toEqual([
      { text: 'df' },
      { text: 'df', error: 'The model is busy' }
    ]);
  });
});

describe('worthCompleting', () => {
  it('asks after code, not on an empty cell or between paragraphs', () => {
    expect(worthCompleting('df.groupby("')).toBe(true);
    expect(worthCompleting('x = 1\n')).toBe(true);
    expect(worthCompleting('')).toBe(false);
    expect(worthCompleting('   \n  ')).toBe(false);
    expect(worthCompleting('x = 1\n\n')).toBe(false);
  });
});

describe('LatestRequest', () => {
  it('aborts the previous request when a new one starts (typing on)', () => {
    const latest = new LatestRequest();
    const first = latest.start();
    const second = latest.start();
    expect(first.aborted).toBe(true);
    expect(second.aborted).toBe(false);
    latest.abort();
    expect(second.aborted).toBe(true);
  });
});

describe('cellsAbove', () => {
  it('sends the sources of the cells above the cursor only', () => {
    const cells = [
      { cell_type: 'markdown', source: '# Flights', id: 'm' },
      { cell_type: 'code', source: 'df = load()', id: 'a', execution_count: 3 },
      { cell_type: 'code', source: 'df.gr', id: 'b' }
    ];
    const above = cellsAbove(cells, 2) ?? [];
    expect(above.map(c => c.source)).toEqual(['# Flights', 'df = load()']);
    // The execution count tells the server a cell ran since its schema read.
    expect(above[1]).toMatchObject({
      cell_type: 'code',
      outputs: [],
      execution_count: 3
    });
    expect(above[0].execution_count).toBeNull();
    expect(cellsAbove(cells, 0)).toEqual([]);
  });
});

describe('DataAgentInlineProvider', () => {
  const request = { text: 'df.', offset: 3 };

  it('debounces through JupyterLab and answers nothing when switched off', async () => {
    const provider = new DataAgentInlineProvider(() => false);
    expect(provider.schema.default.debouncerDelay).toBe(DEBOUNCE_MS);
    const reply = await provider.fetch(request, {
      widget: new Widget(),
      triggerKind: 1
    } as any);
    expect(reply.items).toEqual([]);
  });

  it('answers nothing outside a notebook', async () => {
    const provider = new DataAgentInlineProvider(() => true);
    const reply = await provider.fetch(request, {
      widget: new Widget(),
      triggerKind: 1
    } as any);
    expect(reply.items).toEqual([]);
  });
});
