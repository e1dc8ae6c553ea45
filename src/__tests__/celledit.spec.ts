import {
  MAX_EDIT_OUTPUT_CHARS,
  cellEdit,
  cellError,
  cellTextOutput,
  editKindFor,
  editQuestion
} from '../celledit';
import { initialJob } from '../events';
import { IExchange, turnOfExchange } from '../exchange';
import { parseTurn } from '../metadata';
// The schema generated from the server's models (server/models.py).
import schema from '../wire.schema.json';

const BROKEN = {
  id: 'cell-2',
  cell_type: 'code',
  source: ['df["late"]', '.mean()'],
  outputs: [
    { output_type: 'stream', name: 'stdout', text: 'loading\n' },
    {
      output_type: 'error',
      ename: 'KeyError',
      evalue: "'late'",
      traceback: ['Traceback (most recent call last)', "KeyError: 'late'"]
    }
  ]
};

const PRINTING = {
  id: 'cell-3',
  cell_type: 'code',
  source: 'print(df.shape)\ndf.head()',
  outputs: [
    { output_type: 'stream', name: 'stdout', text: ['(10, 2)', '\n'] },
    {
      output_type: 'execute_result',
      execution_count: 4,
      data: { 'text/plain': '   a  b\n0  1  2', 'text/html': '<table/>' },
      metadata: {}
    },
    {
      output_type: 'display_data',
      data: { 'image/png': 'iVBOR...' },
      metadata: {}
    }
  ]
};

describe('cellEdit', () => {
  it('sends a Fix with the cell and its error, not a sentence about it', () => {
    expect(cellEdit(BROKEN, 'fix')).toEqual({
      kind: 'fix',
      cell_id: 'cell-2',
      source: 'df["late"].mean()',
      error: {
        ename: 'KeyError',
        evalue: "'late'",
        traceback: ['Traceback (most recent call last)', "KeyError: 'late'"]
      },
      output: '',
      instruction: ''
    });
  });

  it('sends an Improve with the text the cell printed, and the user words', () => {
    expect(cellEdit(PRINTING, 'improve', '  make it faster ')).toEqual({
      kind: 'improve',
      cell_id: 'cell-3',
      source: 'print(df.shape)\ndf.head()',
      error: null,
      output: '(10, 2)\n   a  b\n0  1  2\n',
      instruction: 'make it faster'
    });
  });

  it('says there is no error when a Fix is asked of a cell without one', () => {
    expect(cellEdit(PRINTING, 'fix').error).toBeNull();
    expect(cellError({ outputs: [] })).toBeNull();
  });

  it('cuts a long output, and says so', () => {
    const long = {
      id: 'c',
      source: 'print("x" * 9000)',
      outputs: [
        { output_type: 'stream', name: 'stdout', text: 'x'.repeat(9000) }
      ]
    };
    const output = cellTextOutput(long);
    expect(output.startsWith('x'.repeat(MAX_EDIT_OUTPUT_CHARS))).toBe(true);
    expect(output).toContain('(cut: 4,000 more characters)');
    expect(output.length).toBeLessThan(MAX_EDIT_OUTPUT_CHARS + 100);
  });

  it('keeps an error within what the server takes', () => {
    const defs = (schema as any).$defs;
    const bounds = defs.CellError.properties;
    const huge = cellError({
      outputs: [
        {
          output_type: 'error',
          ename: 'E'.repeat(5000),
          evalue: 'v'.repeat(50000),
          traceback: Array.from({ length: 500 }, (_, i) => `frame ${i}`)
        }
      ]
    })!;
    expect(huge.ename.length).toBe(bounds.ename.maxLength);
    expect(huge.evalue.length).toBe(bounds.evalue.maxLength);
    expect(huge.traceback).toHaveLength(bounds.traceback.maxItems);
    // The end of a traceback is where the error is.
    expect(huge.traceback[huge.traceback.length - 1]).toBe('frame 499');
    const edit = defs.CellEdit.properties;
    expect(edit.output.maxLength).toBeGreaterThan(MAX_EDIT_OUTPUT_CHARS + 100);
  });
});

describe('editKindFor', () => {
  it('is Fix when the words say so or the cell shows an error', () => {
    expect(editKindFor(PRINTING, 'fix the shape')).toBe('fix');
    expect(editKindFor(PRINTING, 'Please debug this')).toBe('fix');
    expect(editKindFor(BROKEN, 'rewrite it with polars')).toBe('fix');
  });

  it('is Improve otherwise', () => {
    expect(editKindFor(PRINTING, 'rewrite it with polars')).toBe('improve');
    expect(editKindFor({ outputs: [] }, 'refactor')).toBe('improve');
  });
});

describe('editQuestion', () => {
  it('shows what the command asked, about which cell', () => {
    expect(editQuestion('fix', 2)).toBe('Fix the error in cell 3');
    expect(editQuestion('improve', 0)).toBe('Improve cell 1');
    expect(editQuestion('fix', -1)).toBe('Fix the error in this cell');
  });

  it('shows the words the user typed, where there are any', () => {
    expect(editQuestion('improve', 4, ' use polars ')).toBe('use polars');
  });
});

describe('an edit turn stored in the notebook', () => {
  const exchange: IExchange = {
    key: 'x1',
    intent: 'use polars',
    strategy: 'direct',
    job: { ...initialJob('job1'), status: 'done' },
    turnId: 't1',
    anchorCellId: 'cell-3',
    editCellId: 'cell-3',
    editKind: 'improve',
    instruction: 'use polars',
    selected: 0,
    autoInsert: true,
    created: 1000
  };

  it('keeps its kind and the words, so a retry sends the same edit', () => {
    const turn = turnOfExchange(exchange);
    expect(turn).toMatchObject({
      turn_id: 't1',
      intent: 'use polars',
      edit_kind: 'improve',
      instruction: 'use polars'
    });
    const read = parseTurn(JSON.parse(JSON.stringify(turn)));
    expect(read?.edit_kind).toBe('improve');
    expect(read?.instruction).toBe('use polars');
  });

  it('keeps no words for a bare Fix, and nothing for a question', () => {
    const fix = turnOfExchange({
      ...exchange,
      intent: 'Fix the error in cell 3',
      editKind: 'fix',
      instruction: ''
    });
    expect(fix.edit_kind).toBe('fix');
    expect('instruction' in fix).toBe(false);
    const ask = turnOfExchange({
      ...exchange,
      editCellId: null,
      editKind: null,
      instruction: ''
    });
    expect('edit_kind' in ask).toBe(false);
    expect(parseTurn({ ...ask, edit_kind: 'rewrite' })?.edit_kind).toBe(
      undefined
    );
  });
});
