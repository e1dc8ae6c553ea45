/**
 * Which changes of a notebook's cells this client made itself, and which a
 * collaborator made (real-time collaboration): two real shared notebooks
 * (@jupyter/ydoc), kept in sync by Yjs updates the way jupyter-collaboration's
 * provider applies them (remote transactions).
 */
import { YNotebook } from '@jupyter/ydoc';
import * as Y from 'yjs';

import {
  ILocalEdits,
  IYEventLike,
  IYTypeLike,
  LocalEdits,
  SKIP_EXECUTION,
  SharedCells,
  foldLocalEdits,
  noLocalEdits,
  touchesTurn
} from '../ynotebook';

const REMOTE = 'remote';

/** Two clients' notebooks: each one's changes reach the other as remote. */
function twoClients(): [YNotebook, YNotebook] {
  const a = YNotebook.create();
  const b = YNotebook.create();
  // The first sync (what each has so far), then every update as it comes.
  Y.applyUpdate(b.ydoc, Y.encodeStateAsUpdate(a.ydoc), REMOTE);
  Y.applyUpdate(a.ydoc, Y.encodeStateAsUpdate(b.ydoc), REMOTE);
  const forward = (to: YNotebook) => (update: Uint8Array, origin: unknown) => {
    if (origin !== REMOTE) {
      Y.applyUpdate(to.ydoc, update, REMOTE);
    }
  };
  a.ydoc.on('update', forward(b));
  b.ydoc.on('update', forward(a));
  return [a, b];
}

function codeCell(id: string, source: string) {
  return {
    cell_type: 'code' as const,
    id,
    source,
    metadata: {},
    outputs: [],
    execution_count: null
  };
}

function edits(cells: string[], layout = false): ILocalEdits {
  return { cells: new Set(cells), layout };
}

/**
 * @jupyter/ydoc reads a new cell's types before they join the document;
 * Yjs warns about it (in JupyterLab too). Other warnings still show.
 */
function quietYjsWarnings(): void {
  const warn = console.warn;
  beforeAll(() => {
    jest.spyOn(console, 'warn').mockImplementation((...args: unknown[]) => {
      if (!String(args[0]).startsWith('Invalid access: Add Yjs type')) {
        warn(...args);
      }
    });
  });
  afterAll(() => jest.restoreAllMocks());
}

describe('LocalEdits', () => {
  quietYjsWarnings();

  it("leaves out a collaborator's changes and keeps this client's", () => {
    const [a, b] = twoClients();
    a.insertCell(0, codeCell('c1', 'x = 1'));
    a.insertCell(1, codeCell('c2', 'y = 2'));
    expect(b.cells.map(c => c.getId())).toEqual(['c1', 'c2']);
    const local = new LocalEdits(b);

    // A edits a source, tags a cell, deletes one: nothing is B's.
    a.getCell(0).setSource('x = 10');
    a.getCell(1).setMetadata('jupyter_data_agent', {
      turn_id: 't1',
      intent: 'q',
      status: 'accepted'
    });
    expect(b.getCell(0).getSource()).toBe('x = 10');
    expect(local.take()).toEqual(noLocalEdits());

    // B's own edits: the cell by id, the metadata of another.
    b.getCell(0).setSource('x = 11');
    b.getCell(1).deleteMetadata('jupyter_data_agent');
    expect(local.take()).toEqual(edits(['c1', 'c2']));
    // Taken: the next take starts empty.
    expect(local.take()).toEqual(noLocalEdits());

    // B deletes a cell; A inserts one: only B's delete counts.
    b.deleteCell(1);
    expect(local.take()).toEqual(edits([], true));
    a.insertCell(1, codeCell('c3', 'z = 3'));
    expect(local.take()).toEqual(noLocalEdits());

    // B's undo of its own delete is B's change too.
    b.undoManager.stopCapturing();
    b.deleteCell(0);
    expect(b.cells.map(c => c.getId())).toEqual(['c3']);
    local.take();
    b.undo();
    expect(b.cells.map(c => c.getId())).toEqual(['c1', 'c3']);
    expect(local.take()).toEqual(edits([], true));

    local.dispose();
    expect(local.isDisposed).toBe(true);
    b.getCell(0).setSource('gone');
    expect(local.take()).toBeNull();
  });

  it('a model without a Yjs document: changes are not told apart', () => {
    const local = new LocalEdits({});
    expect(local.take()).toBeNull();
    expect(touchesTurn(local.take(), ['a'], ['a'])).toBe(true);
  });
});

describe('foldLocalEdits', () => {
  const cells: IYTypeLike = { parent: null };
  const cell = (id: string): IYTypeLike => ({
    parent: cells,
    get: key => (key === 'id' ? id : undefined)
  });
  const event = (target: IYTypeLike, local: boolean): IYEventLike => ({
    target,
    transaction: { local }
  });

  it('finds the cell of a nested change and skips remote ones', () => {
    const c1 = cell('c1');
    const metadata: IYTypeLike = { parent: c1 };
    const tag: IYTypeLike = { parent: metadata };
    const out = foldLocalEdits(
      [
        event(tag, true),
        event(cell('c2'), false),
        event({ parent: cell('c3') }, false)
      ],
      cells,
      noLocalEdits()
    );
    expect(out).toEqual(edits(['c1']));
    expect(foldLocalEdits([event(cells, true)], cells, out)).toEqual(
      edits(['c1'], true)
    );
  });

  it('ignores a change outside the cells', () => {
    const other: IYTypeLike = { parent: null };
    expect(
      foldLocalEdits([event({ parent: other }, true)], cells, noLocalEdits())
    ).toEqual(noLocalEdits());
  });
});

describe('touchesTurn', () => {
  it("a turn is this client's to record when it changed the turn's cells", () => {
    expect(touchesTurn(edits(['a']), ['a', 'b'], ['a', 'b'])).toBe(true);
    // A cell newly tagged with the turn (an undo re-tagging it).
    expect(touchesTurn(edits(['c']), ['a'], ['a', 'c'])).toBe(true);
    expect(touchesTurn(edits(['x']), ['a'], ['a'])).toBe(false);
    expect(touchesTurn(noLocalEdits(), ['a'], [])).toBe(false);
  });

  it('its cells came or went while this client inserted or removed cells', () => {
    expect(touchesTurn(edits([], true), ['a', 'b'], ['a'])).toBe(true);
    expect(touchesTurn(edits([], true), [], ['a'])).toBe(true);
    expect(touchesTurn(edits([], true), ['a', 'b'], ['b', 'a'])).toBe(true);
    // Cells were inserted elsewhere: not this turn's change.
    expect(touchesTurn(edits([], true), ['a'], ['a'])).toBe(false);
  });
});

describe('SharedCells.anchorBelow', () => {
  const tag = (turn_id: string, status: string) => ({
    jupyter_data_agent: { turn_id, intent: 'q', status }
  });

  it('places a newer suggestion below the pending ones under its cell', () => {
    const notebook = YNotebook.create();
    notebook.insertCells(0, [
      { cell_type: 'code', source: 'df', id: 'asked' },
      {
        cell_type: 'code',
        source: 'old 1',
        id: 'old1',
        metadata: tag('t1', 'pending')
      },
      {
        cell_type: 'code',
        source: 'old 2',
        id: 'old2',
        metadata: tag('t1', 'pending')
      },
      {
        cell_type: 'code',
        source: 'kept',
        id: 'kept',
        metadata: tag('t0', 'accepted')
      },
      { cell_type: 'code', source: 'mine', id: 'mine' }
    ] as any);
    const cells = new SharedCells({ model: { sharedModel: notebook } } as any);
    expect(cells.anchorBelow('asked', 0)).toEqual({
      afterId: 'old2',
      index: 3
    });
    // An accepted cell is the user's: the anchor stays right below its cell.
    expect(cells.anchorBelow('kept', 0)).toEqual({ afterId: 'kept', index: 4 });
    expect(cells.anchorBelow('mine', 0)).toEqual({ afterId: 'mine', index: 5 });
    notebook.dispose();
  });
});

describe('SharedCells.apply', () => {
  quietYjsWarnings();

  it("clears a fixed cell's outputs in the undoable step; undo puts them back", () => {
    const notebook = YNotebook.create();
    const error = {
      output_type: 'error',
      ename: 'KeyError',
      evalue: "'nope'",
      traceback: ['KeyError: nope']
    };
    notebook.insertCells(0, [
      {
        ...codeCell('x', 'df["nope"].mean()'),
        outputs: [error],
        execution_count: 3
      }
    ] as any);
    const cells = new SharedCells({ model: { sharedModel: notebook } } as any);
    cells.apply([
      { op: 'setSource', id: 'x', source: 'df["delay"].mean()' },
      { op: 'setOutputs', id: 'x', outputs: [], executionCount: null }
    ]);
    const fixed = notebook.getCell(0).toJSON() as any;
    expect(fixed).toMatchObject({
      source: 'df["delay"].mean()',
      outputs: [],
      execution_count: null
    });
    // The notebook's own undo (z) reverts the whole step: code and traceback.
    notebook.undo();
    expect(notebook.getCell(0).toJSON()).toMatchObject({
      source: 'df["nope"].mean()',
      outputs: [error],
      execution_count: 3
    });
    notebook.dispose();
  });
});

describe('pending suggestions carry the skip tag', () => {
  quietYjsWarnings();

  it('a pending code cell is tagged for nbclient to skip; accepting it removes the tag', () => {
    const notebook = YNotebook.create();
    notebook.insertCells(0, [
      { ...codeCell('mine', 'x = 1'), metadata: { tags: ['keep'] } }
    ] as any);
    const cells = new SharedCells({ model: { sharedModel: notebook } } as any);
    const tag = { turn_id: 't1', intent: 'q', status: 'pending' as const };
    cells.apply([
      {
        op: 'insert',
        index: 1,
        afterId: 'mine',
        cell: { id: 's1', cell_type: 'code', source: 'y = 2', tag }
      } as any,
      {
        op: 'insert',
        index: 2,
        afterId: 's1',
        cell: { id: 'm1', cell_type: 'markdown', source: 'why', tag }
      } as any
    ]);
    const json = () => notebook.toJSON().cells as any[];
    expect(json()[1].metadata.tags).toEqual([SKIP_EXECUTION]);
    expect(json()[2].metadata.tags).toBeUndefined(); // markdown never runs
    cells.apply([
      { op: 'setTag', id: 's1', tag: { ...tag, status: 'accepted' } } as any
    ]);
    expect(json()[1].metadata.tags).toBeUndefined();
    // an edit turn's pending cell keeps the user's own tags beside the skip tag
    cells.apply([{ op: 'setTag', id: 'mine', tag } as any]);
    expect(json()[0].metadata.tags).toEqual(['keep', SKIP_EXECUTION]);
    cells.setTag('mine', null);
    expect(json()[0].metadata.tags).toEqual(['keep']);
    notebook.dispose();
  });
});
