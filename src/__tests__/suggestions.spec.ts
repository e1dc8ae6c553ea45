import {
  CellChange,
  ICellSpec,
  ISuggestionCandidate,
  ISuggestionState,
  accept,
  cycle,
  diffCells,
  emptySuggestion,
  follow,
  insert,
  isEditIntent,
  observe,
  reject,
  restore,
  select,
  solutionCode,
  undo
} from '../suggestions';

/**
 * A notebook as a list of cells, to apply the machine's changes the way the
 * adapter does (by id, inserting after a cell or at an index) and check the
 * result cell by cell.
 */
interface IFakeCell {
  id: string;
  cell_type: string;
  source: string;
  metadata: Record<string, unknown>;
  outputs?: Record<string, unknown>[];
  execution_count?: number | null;
}

function apply(cells: IFakeCell[], changes: CellChange[]): IFakeCell[] {
  const out = cells.map(c => ({ ...c, metadata: { ...c.metadata } }));
  const at = (id: string) => out.findIndex(c => c.id === id);
  for (const change of changes) {
    switch (change.op) {
      case 'remove':
        out.splice(at(change.id), 1);
        break;
      case 'setSource':
        out[at(change.id)].source = change.source;
        break;
      case 'setTag':
        if (change.tag) {
          out[at(change.id)].metadata.jupyter_data_agent = { ...change.tag };
        } else {
          delete out[at(change.id)].metadata.jupyter_data_agent;
        }
        break;
      case 'setOutputs':
        out[at(change.id)].outputs = change.outputs.map(o => ({ ...o }));
        out[at(change.id)].execution_count = change.executionCount;
        break;
      case 'insert': {
        const after = change.afterId ? at(change.afterId) : -1;
        const index =
          after >= 0 ? after + 1 : Math.min(change.index, out.length);
        out.splice(index, 0, {
          id: change.cell.id,
          cell_type: change.cell.cell_type,
          source: change.cell.source,
          metadata: { jupyter_data_agent: { ...change.cell.tag } }
        });
        break;
      }
    }
  }
  return out;
}

const notebook = (): IFakeCell[] => [
  {
    id: 'a',
    cell_type: 'code',
    source: 'import pandas as pd',
    metadata: { tags: ['setup'] }
  },
  {
    id: 'b',
    cell_type: 'code',
    source: "df = pd.read_csv('f.csv')",
    metadata: {}
  },
  { id: 'c', cell_type: 'markdown', source: '# Later', metadata: {} }
];

const candidates: ISuggestionCandidate[] = [
  {
    code: '# Step 1: Group by airline\ng = df.groupby("airline")\n# Step 2: Mean delay\ng.delay.mean()',
    explanation: 'Step 1: Group by airline\nStep 2: Mean delay',
    steps: [
      {
        number: 1,
        explanation: 'Group by airline',
        code: 'g = df.groupby("airline")'
      },
      { number: 2, explanation: 'Mean delay', code: 'g.delay.mean()' }
    ]
  },
  {
    code: 'df.groupby("airline").delay.mean()',
    explanation: '',
    steps: [
      { number: 0, explanation: '', code: 'df.groupby("airline").delay.mean()' }
    ]
  },
  {
    code: 'df.pivot_table(index="airline", values="delay")',
    explanation: 'Step 1: Pivot',
    steps: [
      {
        number: 1,
        explanation: 'Pivot',
        code: 'df.pivot_table(index="airline", values="delay")'
      }
    ]
  }
];

function ids(): () => string {
  let n = 0;
  return () => `new${++n}`;
}

function inserted(mode: 'single' | 'perStep' = 'single', newId = ids()) {
  const start = emptySuggestion('t1', 'mean delay per airline', mode);
  return insert(start, {
    candidates,
    index: 0,
    mode,
    anchor: { afterId: 'b', index: 2 },
    newId
  });
}

const tag = (status: string) => ({
  turn_id: 't1',
  intent: 'mean delay per airline',
  status
});

describe('suggestion state machine', () => {
  it('inserts one marked code cell below the anchor', () => {
    const { state, changes, decision } = inserted();
    expect(state.status).toBe('suggested');
    expect(state.index).toBe(0);
    expect(decision).toBe('pending');
    expect(changes).toEqual([
      {
        op: 'insert',
        afterId: 'b',
        index: 2,
        cell: {
          id: 'new1',
          cell_type: 'code',
          source: candidates[0].code,
          tag: tag('pending')
        }
      }
    ]);
    const after = apply(notebook(), changes);
    expect(after.map(c => c.id)).toEqual(['a', 'b', 'new1', 'c']);
    expect(after[2].metadata).toEqual({ jupyter_data_agent: tag('pending') });
  });

  it('lays out one markdown + code cell per step in perStep mode', () => {
    const { state, changes } = inserted('perStep');
    expect(state.cells.map(c => [c.cell_type, c.source])).toEqual([
      ['markdown', '**Step 1.** Group by airline'],
      ['code', 'g = df.groupby("airline")'],
      ['markdown', '**Step 2.** Mean delay'],
      ['code', 'g.delay.mean()']
    ]);
    const after = apply(notebook(), changes);
    expect(after.map(c => c.id)).toEqual([
      'a',
      'b',
      'new1',
      'new2',
      'new3',
      'new4',
      'c'
    ]);
    expect(solutionCode(state.cells)).toBe(
      'g = df.groupby("airline")\n\ng.delay.mean()'
    );
  });

  it('cycles in place, wrapping around both ways', () => {
    const first = inserted();
    let nb = apply(notebook(), first.changes);
    const next = cycle(first.state, 1);
    expect(next.state.index).toBe(1);
    expect(next.changes).toEqual([
      { op: 'setSource', id: 'new1', source: candidates[1].code }
    ]);
    nb = apply(nb, next.changes);
    expect(nb.map(c => c.id)).toEqual(['a', 'b', 'new1', 'c']);
    expect(nb[2].source).toBe(candidates[1].code);

    const wrapped = cycle(cycle(next.state, 1).state, 1);
    expect(wrapped.state.index).toBe(0);
    const back = cycle(first.state, -1);
    expect(back.state.index).toBe(2);
    expect(back.decision).toBeNull();
  });

  it('cycles in perStep mode by reusing cells of the same type', () => {
    const newId = ids();
    const first = inserted('perStep', newId);
    let nb = apply(notebook(), first.changes);
    // Candidate 2 has no explanation: one code cell.
    const second = select(first.state, 1, newId);
    nb = apply(nb, second.changes);
    expect(nb.map(c => [c.id, c.cell_type])).toEqual([
      ['a', 'code'],
      ['b', 'code'],
      ['new2', 'code'],
      ['c', 'markdown']
    ]);
    // The first code cell was kept (edited in place), the others removed.
    expect(second.state.cells.map(c => c.id)).toEqual(['new2']);
    // Candidate 3: markdown + code; back to a two-cell layout in place.
    const third = cycle(second.state, 1, newId);
    nb = apply(nb, third.changes);
    expect(nb.map(c => c.cell_type)).toEqual([
      'code',
      'code',
      'markdown',
      'code',
      'markdown'
    ]);
    expect(nb[3].id).toBe('new2');
    expect(nb[3].source).toBe(candidates[2].code);
    expect(nb[2].source).toBe('**Step 1.** Pivot');
  });

  it('does not cycle a single candidate', () => {
    const start = emptySuggestion('t1', 'x');
    const one = insert(start, {
      candidates: [candidates[1]],
      index: 0,
      mode: 'single',
      anchor: { afterId: 'a', index: 1 },
      newId: ids()
    });
    const next = cycle(one.state, 1);
    expect(next.changes).toEqual([]);
    expect(next.state).toBe(one.state);
  });

  it('accepts by re-tagging, keeping the user edits', () => {
    const first = inserted();
    let nb = apply(notebook(), first.changes);
    nb[2].source = 'g = 1  # edited by hand';
    const accepted = accept(first.state, { new1: nb[2].source });
    expect(accepted.decision).toBe('accepted');
    expect(accepted.state.status).toBe('accepted');
    expect(accepted.changes).toEqual([
      { op: 'setTag', id: 'new1', tag: tag('accepted') }
    ]);
    nb = apply(nb, accepted.changes);
    expect(nb[2].source).toBe('g = 1  # edited by hand');
    expect(nb[2].metadata).toEqual({ jupyter_data_agent: tag('accepted') });
    // No more cycling or rejecting once accepted.
    expect(cycle(accepted.state, 1).changes).toEqual([]);
    expect(reject(accepted.state).changes).toEqual([]);
  });

  it('rejects by removing exactly the inserted cells', () => {
    const before = notebook();
    const first = inserted('perStep');
    let nb = apply(before, first.changes);
    const rejected = reject(first.state);
    expect(rejected.decision).toBe('rejected');
    expect(rejected.state.status).toBe('rejected');
    nb = apply(nb, rejected.changes);
    expect(nb).toEqual(before);
  });

  it('undoes each operation back to the exact previous notebook', () => {
    const before = notebook();
    const first = inserted();
    const nb1 = apply(before, first.changes);
    const cycled = cycle(first.state, 1);
    const nb2 = apply(nb1, cycled.changes);
    const accepted = accept(cycled.state);
    const nb3 = apply(nb2, accepted.changes);

    const u1 = undo(accepted.state);
    expect(u1.state.status).toBe('suggested');
    expect(u1.decision).toBe('pending');
    expect(apply(nb3, u1.changes)).toEqual(nb2);

    const u2 = undo(u1.state);
    expect(u2.state.index).toBe(0);
    expect(apply(nb2, u2.changes)).toEqual(nb1);

    const u3 = undo(u2.state);
    expect(u3.state.status).toBe('none');
    expect(apply(nb1, u3.changes)).toEqual(before);

    // Nothing left to undo.
    expect(undo(u3.state).changes).toEqual([]);
  });

  it('undoes a reject by putting the cells back where they were', () => {
    const first = inserted('perStep');
    const nb1 = apply(notebook(), first.changes);
    const rejected = reject(first.state, {
      anchor: { afterId: 'b', index: 2 }
    });
    const nb2 = apply(nb1, rejected.changes);
    const restored = undo(rejected.state);
    expect(restored.state.status).toBe('suggested');
    expect(restored.decision).toBe('pending');
    expect(apply(nb2, restored.changes)).toEqual(nb1);
  });

  it('inserts at the anchor index when the anchor cell is gone', () => {
    const changes = diffCells(
      [],
      [
        {
          id: 'x',
          cell_type: 'code',
          source: '1',
          tag: tag('pending')
        } as ICellSpec
      ],
      { afterId: 'gone', index: 1 }
    );
    const nb = apply(notebook(), changes);
    expect(nb.map(c => c.id)).toEqual(['a', 'x', 'b', 'c']);
  });

  it('allows a new insert after a reject', () => {
    const rejected = reject(inserted().state);
    const again = insert(rejected.state, {
      candidates,
      index: 2,
      mode: 'single',
      anchor: { afterId: 'a', index: 1 },
      newId: () => 'again'
    });
    expect(again.state.status).toBe('suggested');
    expect(again.state.index).toBe(2);
    expect(apply(notebook(), again.changes).map(c => c.id)).toEqual([
      'a',
      'again',
      'b',
      'c'
    ]);
    // And an insert while suggested changes nothing.
    expect(
      insert(again.state, {
        candidates,
        index: 0,
        mode: 'single',
        anchor: { afterId: null, index: 0 }
      }).changes
    ).toEqual([]);
  });
});

describe('observing changes made by the notebook', () => {
  const observed = (state: ISuggestionState, status: string) =>
    state.cells.map(c => ({
      id: c.id,
      source: c.source,
      status: status as any
    }));

  it('treats a deleted suggestion as rejected', () => {
    const first = inserted();
    const result = observe(first.state, []);
    expect(result.state.status).toBe('rejected');
    expect(result.decision).toBe('rejected');
    expect(result.changes).toEqual([]);
  });

  it('follows the notebook undo of an accept back to suggested', () => {
    const accepted = accept(inserted().state);
    const result = observe(accepted.state, observed(accepted.state, 'pending'));
    expect(result.state.status).toBe('suggested');
    expect(result.decision).toBe('pending');
  });

  it('follows the notebook undo of a reject (cells back, pending)', () => {
    const first = inserted();
    const rejected = reject(first.state);
    const result = observe(rejected.state, observed(first.state, 'pending'));
    expect(result.state.status).toBe('suggested');
    expect(result.state.cells.map(c => c.id)).toEqual(['new1']);
    expect(result.decision).toBe('pending');
  });

  it('is a no-op when the notebook matches', () => {
    const first = inserted();
    const result = observe(first.state, observed(first.state, 'pending'));
    expect(result.decision).toBeNull();
    expect(result.state.status).toBe('suggested');
    const accepted = accept(first.state);
    const again = observe(accepted.state, observed(accepted.state, 'edited'));
    expect(again.decision).toBeNull();
    expect(again.state.status).toBe('accepted');
  });

  it('keeps an accepted turn accepted when its cells are deleted later', () => {
    const accepted = accept(inserted().state);
    const result = observe(accepted.state, []);
    expect(result.state.status).toBe('accepted');
    expect(result.decision).toBeNull();
  });
});

describe('restoring from a reopened notebook', () => {
  it('finds the shown candidate by its code and can cycle again', () => {
    const state = restore({
      turnId: 't1',
      intent: 'mean delay per airline',
      candidates,
      mode: 'single',
      cells: [
        {
          id: 'k',
          cell_type: 'code',
          source: candidates[2].code,
          status: 'pending'
        }
      ],
      anchor: { afterId: 'b', index: 2 }
    });
    expect(state.status).toBe('suggested');
    expect(state.index).toBe(2);
    const next = cycle(state, 1);
    expect(next.changes).toEqual([
      { op: 'setSource', id: 'k', source: candidates[0].code }
    ]);
  });

  it('restores accepted cells as accepted', () => {
    const state = restore({
      turnId: 't1',
      intent: 'x',
      candidates: [],
      mode: 'single',
      cells: [{ id: 'k', cell_type: 'code', source: 'df', status: 'accepted' }],
      anchor: { afterId: null, index: 0 }
    });
    expect(state.status).toBe('accepted');
  });
});

describe('replace mode (a suggestion that edits an existing cell)', () => {
  const broken = () => [
    ...notebook().slice(0, 2),
    {
      id: 'x',
      cell_type: 'code',
      source: 'df["nope"].mean()',
      metadata: { tags: ['keep'] }
    },
    notebook()[2]
  ];
  const fixes: ISuggestionCandidate[] = [
    { code: 'df["delay"].mean()\n\n', explanation: 'Use delay', steps: [] },
    { code: 'df.delay.mean()', explanation: '', steps: [] }
  ];
  const editTag = (status: string) => ({
    turn_id: 't2',
    intent: 'Fix the error in this cell',
    status
  });
  const target = { id: 'x', original: 'df["nope"].mean()', tag: null };
  const placed = () =>
    insert(emptySuggestion('t2', 'Fix the error in this cell'), {
      candidates: fixes,
      index: 0,
      mode: 'single',
      anchor: { afterId: 'x', index: 3 },
      target
    });

  it('marks the cell without touching its source or adding cells', () => {
    const { state, changes, decision } = placed();
    expect(decision).toBe('pending');
    expect(state.target).toEqual(target);
    expect(changes).toEqual([
      { op: 'setTag', id: 'x', tag: editTag('pending') }
    ]);
    const after = apply(broken(), changes);
    expect(after.map(c => c.id)).toEqual(['a', 'b', 'x', 'c']);
    expect(after[2].source).toBe('df["nope"].mean()');
    expect(after[2].metadata).toEqual({
      tags: ['keep'],
      jupyter_data_agent: editTag('pending')
    });
  });

  it('cycles candidates without changing the cell', () => {
    const next = cycle(placed().state, 1);
    expect(next.state.index).toBe(1);
    expect(next.changes).toEqual([]);
    expect(cycle(next.state, 1).state.index).toBe(0);
  });

  it('accepts by writing the candidate into the same cell', () => {
    const first = placed();
    const nb = apply(broken(), first.changes);
    const { state, changes, decision } = accept(first.state, {
      x: 'df["nope"].mean()'
    });
    expect(decision).toBe('accepted');
    expect(state.status).toBe('accepted');
    expect(changes).toEqual([
      { op: 'setSource', id: 'x', source: 'df["delay"].mean()' },
      { op: 'setTag', id: 'x', tag: editTag('accepted') }
    ]);
    const after = apply(nb, changes);
    expect(after.map(c => c.id)).toEqual(['a', 'b', 'x', 'c']);
    expect(after[2].source).toBe('df["delay"].mean()');
    expect(solutionCode(state.cells)).toBe('df["delay"].mean()');
  });

  it('accepts the candidate shown after cycling', () => {
    const cycled = cycle(placed().state, 1).state;
    const { changes } = accept(cycled);
    expect(changes[0]).toEqual({
      op: 'setSource',
      id: 'x',
      source: 'df.delay.mean()'
    });
  });

  it('undoes an accept in one step, back to the exact original', () => {
    const first = placed();
    const nb1 = apply(broken(), first.changes);
    const accepted = accept(first.state);
    const nb2 = apply(nb1, accepted.changes);
    const back = undo(accepted.state);
    expect(back.decision).toBe('pending');
    expect(back.state.status).toBe('suggested');
    expect(apply(nb2, back.changes)).toEqual(nb1);
    // And undoing the placement leaves the notebook as it was before.
    const none = undo(back.state);
    expect(none.state.status).toBe('none');
    expect(apply(nb1, none.changes)).toEqual(broken());
  });

  it('rejects by dropping only the mark; undo puts it back', () => {
    const first = placed();
    const nb1 = apply(broken(), first.changes);
    const rejected = reject(first.state);
    expect(rejected.decision).toBe('rejected');
    expect(rejected.changes).toEqual([{ op: 'setTag', id: 'x', tag: null }]);
    const nb2 = apply(nb1, rejected.changes);
    expect(nb2).toEqual(broken());
    expect(apply(nb2, undo(rejected.state).changes)).toEqual(nb1);
  });

  it('keeps edits made to the cell while suggested, on reject and undo', () => {
    const first = placed();
    const edited = apply(broken(), first.changes);
    edited[2].source = 'df["nope"].sum()';
    const rejected = reject(first.state, { sources: { x: edited[2].source } });
    expect(rejected.changes).toEqual([{ op: 'setTag', id: 'x', tag: null }]);
    const accepted = accept(first.state, { x: edited[2].source });
    const after = apply(edited, accepted.changes);
    expect(apply(after, undo(accepted.state).changes)[2].source).toBe(
      'df["nope"].sum()'
    );
  });

  it("restores an earlier turn's tag on the cell", () => {
    const old = { turn_id: 't0', intent: 'mean', status: 'accepted' as const };
    const start = broken();
    start[2].metadata.jupyter_data_agent = { ...old };
    const first = insert(emptySuggestion('t2', 'Fix the error in this cell'), {
      candidates: fixes,
      index: 0,
      mode: 'single',
      anchor: { afterId: 'x', index: 3 },
      target: { ...target, tag: old }
    });
    const nb1 = apply(start, first.changes);
    expect(nb1[2].metadata.jupyter_data_agent).toEqual(editTag('pending'));
    expect(apply(nb1, reject(first.state).changes)).toEqual(start);
  });

  describe('the outputs of the cell an edit replaces', () => {
    const error = {
      output_type: 'error',
      ename: 'KeyError',
      evalue: "'nope'",
      traceback: ['KeyError: nope']
    };
    const printed = { output_type: 'stream', name: 'stdout', text: '1\n' };
    const shown = (outputs: Record<string, unknown>[]) =>
      broken().map(c =>
        c.id === 'x' ? { ...c, outputs, execution_count: 7 } : c
      );
    const placedOver = (outputs: Record<string, unknown>[]) =>
      insert(emptySuggestion('t2', 'Fix the error in this cell'), {
        candidates: fixes,
        index: 0,
        mode: 'single',
        anchor: { afterId: 'x', index: 3 },
        target: { ...target, outputs, executionCount: 7 }
      });

    it("a fix's accept clears the traceback; undo puts it back", () => {
      const first = placedOver([printed, error]);
      const nb1 = apply(shown([printed, error]), first.changes);
      const accepted = accept(first.state);
      expect(accepted.changes).toContainEqual({
        op: 'setOutputs',
        id: 'x',
        outputs: [],
        executionCount: null
      });
      const nb2 = apply(nb1, accepted.changes);
      expect(nb2[2]).toMatchObject({
        source: 'df["delay"].mean()',
        outputs: [],
        execution_count: null
      });
      // One undo: the broken code with its traceback and count, exactly.
      expect(apply(nb2, undo(accepted.state).changes)).toEqual(nb1);
    });

    it('outputs without an error stay (as after an edit by hand)', () => {
      const first = placedOver([printed]);
      const accepted = accept(first.state);
      expect(accepted.changes.map(c => c.op)).toEqual(['setSource', 'setTag']);
      expect(undo(accepted.state).changes.map(c => c.op)).toEqual([
        'setSource',
        'setTag'
      ]);
    });

    it('placing and rejecting never touch the outputs', () => {
      const first = placedOver([error]);
      expect(first.changes.map(c => c.op)).toEqual(['setTag']);
      const rejected = reject(first.state);
      expect(rejected.changes.map(c => c.op)).toEqual(['setTag']);
      expect(undo(rejected.state).changes.map(c => c.op)).toEqual(['setTag']);
    });
  });

  it('follows the notebook undo of an accept back to suggested', () => {
    const accepted = accept(placed().state).state;
    const seen = observe(accepted, [
      { id: 'x', source: 'df["nope"].mean()', status: 'pending' }
    ]);
    expect(seen.state.status).toBe('suggested');
    expect(seen.decision).toBe('pending');
    expect(seen.state.cells[0].source).toBe('df["nope"].mean()');
  });

  it('restores a pending edit turn from a reopened notebook', () => {
    const state = restore({
      turnId: 't2',
      intent: 'Fix the error in this cell',
      candidates: fixes,
      mode: 'single',
      cells: [
        {
          id: 'x',
          source: 'df["nope"].mean()',
          status: 'pending',
          cell_type: 'code'
        }
      ],
      anchor: { afterId: 'b', index: 2 },
      target: { id: 'x', original: 'df["nope"].mean()', tag: null },
      code: 'df.delay.mean()'
    });
    expect(state.status).toBe('suggested');
    expect(state.index).toBe(1);
    const { changes } = accept(state);
    expect(changes[0]).toEqual({
      op: 'setSource',
      id: 'x',
      source: 'df.delay.mean()'
    });
  });
});

describe('an empty cell at the anchor (the new cell the user asked from)', () => {
  const withEmpty = (): IFakeCell[] => [
    ...notebook().slice(0, 2),
    { id: 'e', cell_type: 'code', source: '', metadata: { tags: ['mine'] } },
    notebook()[2]
  ];
  const placedInto = (mode: 'single' | 'perStep' = 'single') =>
    insert(emptySuggestion('t1', 'mean delay per airline', mode), {
      candidates,
      index: 0,
      mode,
      anchor: { afterId: 'e', index: 3 },
      newId: ids(),
      into: 'e'
    });

  it('takes the empty cell: no cell added, none left empty above', () => {
    const { state, changes } = placedInto();
    const nb1 = apply(withEmpty(), changes);
    expect(nb1.map(c => c.id)).toEqual(['a', 'b', 'e', 'c']);
    expect(nb1[2]).toEqual({
      id: 'e',
      cell_type: 'code',
      source: candidates[0].code,
      metadata: { tags: ['mine'], jupyter_data_agent: tag('pending') }
    });
    // Cycling writes the other candidates into the same cell.
    const cycled = cycle(state, 1);
    const nb2 = apply(nb1, cycled.changes);
    expect(nb2.map(c => c.id)).toEqual(['a', 'b', 'e', 'c']);
    expect(nb2[2].source).toBe(candidates[1].code);
    // Reject (after cycling): the empty cell is back, exactly.
    const rejected = reject(cycled.state, {
      anchor: { afterId: 'b', index: 2 }
    });
    const nb3 = apply(nb2, rejected.changes);
    expect(nb3).toEqual(withEmpty());
    // Undo of the reject shows the suggestion in it again.
    expect(apply(nb3, undo(rejected.state).changes)).toEqual(nb2);
  });

  it('accept keeps the cell; undo back to the empty cell, step by step', () => {
    const first = placedInto();
    const nb1 = apply(withEmpty(), first.changes);
    const accepted = accept(first.state);
    const nb2 = apply(nb1, accepted.changes);
    expect(nb2.map(c => c.id)).toEqual(['a', 'b', 'e', 'c']);
    expect(nb2[2].metadata.jupyter_data_agent).toEqual(tag('accepted'));
    const back = undo(accepted.state);
    const nb3 = apply(nb2, back.changes);
    expect(nb3).toEqual(nb1);
    expect(apply(nb3, undo(back.state).changes)).toEqual(withEmpty());
  });

  it('perStep cells go below it, as before', () => {
    const { changes } = placedInto('perStep');
    const nb = apply(withEmpty(), changes);
    expect(nb.map(c => c.id)).toEqual([
      'a',
      'b',
      'e',
      'new1',
      'new2',
      'new3',
      'new4',
      'c'
    ]);
    expect(nb[2].source).toBe('');
  });
});

describe('follow: the candidate a collaborator chose', () => {
  it('takes the index of the candidate the turn names, nothing else', () => {
    const { state } = inserted();
    const seen = follow(state, `${candidates[2].code}\n`);
    expect(seen).toEqual({ ...state, index: 2 });
    // The history is the client's own: a followed choice is not undone by it.
    expect(seen.history).toBe(state.history);
  });

  it('keeps the state when the turn names the shown candidate or none', () => {
    const { state } = inserted();
    expect(follow(state, candidates[0].code)).toBe(state);
    expect(follow(state, undefined)).toBe(state);
    expect(follow(state, '  ')).toBe(state);
    // Code no candidate has (edited by hand): nothing to follow.
    expect(follow(state, 'df.head()')).toBe(state);
  });

  it('a duplicate of the shown candidate keeps its index', () => {
    const twins = [candidates[0], { ...candidates[0] }, candidates[1]];
    const { state } = insert(emptySuggestion('t1', 'q'), {
      candidates: twins,
      index: 1,
      mode: 'single',
      anchor: { afterId: 'b', index: 2 },
      newId: ids()
    });
    expect(follow(state, candidates[0].code)).toBe(state);
  });

  it('only a pending suggestion follows', () => {
    const first = inserted();
    const accepted = accept(first.state).state;
    expect(follow(accepted, candidates[1].code)).toBe(accepted);
    const rejected = reject(first.state).state;
    expect(follow(rejected, candidates[1].code)).toBe(rejected);
  });

  it('an edit turn follows too: its diff and Accept take that candidate', () => {
    const start = emptySuggestion('t2', 'Fix it', 'single', {
      id: 'b',
      original: "df = pd.read_csv('f.csv')",
      tag: null
    });
    const { state } = insert(start, {
      candidates,
      index: 0,
      mode: 'single',
      anchor: { afterId: 'a', index: 1 }
    });
    const seen = follow(state, candidates[1].code);
    expect(seen.index).toBe(1);
    expect(accept(seen).changes).toContainEqual({
      op: 'setSource',
      id: 'b',
      source: candidates[1].code
    });
  });
});

describe('edit intents', () => {
  it.each([
    'Fix the error in this cell',
    'fix it',
    'Rewrite this with groupby',
    'please refactor',
    'Clean up this cell',
    'Optimize the loop',
    'improve the plot'
  ])('%s edits the cell', intent => expect(isEditIntent(intent)).toBe(true));
  it.each([
    'Which airline has the longest delay?',
    'plot delay per month',
    'fixed costs per airline',
    'explain this cell'
  ])('%s asks for new code', intent =>
    expect(isEditIntent(intent)).toBe(false)
  );
});
