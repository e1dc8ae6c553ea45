import {
  IAnalysisStep,
  acceptedMarkdown,
  analysisCells,
  planStatusAtEnd,
  planSummary,
  restoredSteps,
  stepDecisions,
  stepMarkdown,
  stepOutputs,
  stepsShown,
  storedSteps
} from '../analysis';
import {
  acceptUpTo,
  dropStep,
  editedFrom,
  replaceFrom,
  withStepEdits
} from '../analysisreview';
import { parseTurn } from '../metadata';
import { initialJob, reduceJob } from '../events';
import {
  CellChange,
  ISuggestionState,
  emptySuggestion,
  insert,
  observe,
  undo
} from '../suggestions';
import type { ExecResult, ProgressEvent } from '../wire';

const JOB = 'job1';

const result = (
  text: string,
  status: ExecResult['status'] = 'ok'
): ExecResult => ({
  status,
  outputs: [
    {
      output_type: 'execute_result',
      name: null,
      text: null,
      data: {
        'text/plain': text,
        'text/html': '<script>alert(1)</script>',
        'application/javascript': 'alert(1)'
      },
      metadata: {},
      ename: null,
      evalue: null,
      traceback: null,
      execution_count: null
    } as unknown as ExecResult['outputs'][number]
  ],
  value: null,
  ename: status === 'error' ? 'KeyError' : null,
  evalue: status === 'error' ? "'x'" : null,
  traceback: [],
  duration_s: 0.1,
  pid: 7,
  limit: null,
  truncated: false,
  namespace: null
});

const step = (
  number: number,
  code: string,
  extra: Partial<IAnalysisStep> = {}
): IAnalysisStep => ({
  number,
  title: `Title ${number}`,
  explanation: `Why step ${number}.`,
  code,
  cell_id: null,
  result: result(`out ${number}`),
  status: 'ok',
  repairs: 0,
  replanned: false,
  ...extra
});

const STEPS = [
  step(1, "df = pd.DataFrame({'a': [1, 2, 3]})"),
  step(2, "total = df['a'].sum()"),
  step(3, 'ratio = total / len(df)'),
  step(4, 'ratio * 2')
];

let ids = 0;
const newId = () => `c${++ids}`;

/** A notebook as a list of cells, the machine's changes applied by id. */
interface IFake {
  id: string;
  cell_type: string;
  source: string;
  tag?: Record<string, unknown>;
  outputs?: unknown[];
}

function apply(cells: IFake[], changes: CellChange[]): IFake[] {
  const out = cells.map(c => ({ ...c }));
  const at = (id: string) => out.findIndex(c => c.id === id);
  for (const change of changes) {
    if (change.op === 'remove') {
      out.splice(at(change.id), 1);
    } else if (change.op === 'setSource') {
      out[at(change.id)].source = change.source;
    } else if (change.op === 'setTag') {
      out[at(change.id)].tag = change.tag ? { ...change.tag } : undefined;
    } else if (change.op === 'setOutputs') {
      out[at(change.id)].outputs = change.outputs;
    } else {
      const after = change.afterId ? at(change.afterId) : -1;
      out.splice(after >= 0 ? after + 1 : change.index, 0, {
        id: change.cell.id,
        cell_type: change.cell.cell_type,
        source: change.cell.source,
        tag: { ...change.cell.tag },
        outputs: change.cell.outputs
      });
    }
  }
  return out;
}

const BEFORE: IFake[] = [
  { id: 'a', cell_type: 'code', source: 'import pandas as pd' },
  { id: 'b', cell_type: 'markdown', source: '# notes' }
];

function placed(
  steps = STEPS,
  existing?: (id: string) => { original: string; tag: null } | null,
  before: IFake[] = BEFORE
): { state: ISuggestionState; cells: IFake[] } {
  const t = insert(emptySuggestion('t1', 'analyse a'), {
    candidates: [
      {
        code: steps.map(s => s.code).join('\n\n'),
        explanation: '',
        steps: [],
        analysis: steps
      }
    ],
    index: 0,
    mode: 'single',
    anchor: { afterId: 'a', index: 1 },
    newId,
    existing
  });
  return { state: t.state, cells: apply(before, t.changes) };
}

const progress = (
  seq: number,
  plan: unknown,
  message = 'step'
): ProgressEvent =>
  ({
    version: 1,
    job_id: JOB,
    seq,
    type: 'progress',
    message,
    data: { state: 'step', plan }
  }) as ProgressEvent;

describe('the live plan', () => {
  it('follows the plan each progress event sends, and keeps it when one has none', () => {
    let job = reduceJob(
      initialJob(JOB),
      progress(1, [
        { number: 1, title: 'Load', status: 'ok' },
        { number: 2, title: 'Sum', status: 'running' },
        { number: 3, title: 'Plot', status: 'pending' }
      ])
    );
    expect(job.plan?.map(s => s.status)).toEqual(['ok', 'running', 'pending']);
    expect(planSummary(job.plan!)).toBe('1 of 3 steps done');
    job = reduceJob(job, {
      version: 1,
      job_id: JOB,
      seq: 2,
      type: 'progress',
      message: 'generating',
      data: { state: 'generating' }
    } as ProgressEvent);
    expect(job.plan).toHaveLength(3);
    // A re-plan replaces the rest of the plan.
    job = reduceJob(
      job,
      progress(3, [
        { number: 1, title: 'Load', status: 'ok' },
        { number: 2, title: 'Sum', status: 'error' },
        { number: 3, title: 'Clean first', status: 'generating' }
      ])
    );
    expect(job.plan?.map(s => s.title)).toEqual(['Load', 'Sum', 'Clean first']);
    expect(job.plan?.[2].status).toBe('generating');
    // Once the turn ended (a Stop), a step under way was not done.
    expect(job.plan?.map(s => planStatusAtEnd(s.status))).toEqual([
      'ok',
      'error',
      'skipped'
    ]);
  });
});

describe('the cells of an analysis', () => {
  it('are a Markdown cell and a code cell with the copy outputs per new step', () => {
    const cells = analysisCells(
      { turnId: 't', intent: 'q' },
      [step(1, 'x = 1\n\n'), step(2, 'df2', { cell_id: 'old' }), step(3, 'y')],
      'pending',
      newId
    );
    // A step that edits a cell the notebook no longer has becomes a new cell.
    expect(cells.map(c => [c.cell_type, c.tag.step])).toEqual([
      ['markdown', 1],
      ['code', 1],
      ['markdown', 2],
      ['code', 2],
      ['markdown', 3],
      ['code', 3]
    ]);
    expect(cells[3].source).toBe('df2');
    expect(cells[0].source).toBe('**Step 1.** Title 1\n\nWhy step 1.');
    expect(cells[1].source).toBe('x = 1');
    expect(cells[1].outputs).toEqual([
      {
        output_type: 'execute_result',
        data: { 'text/plain': 'out 1' },
        metadata: {},
        execution_count: null
      }
    ]);
  });

  it('never carries HTML or script from a copy, and says when a step failed', () => {
    const failed = step(2, 'df.x', {
      status: 'error',
      result: result('', 'error')
    });
    expect(stepOutputs(failed).map(o => o.output_type)).toEqual([
      'execute_result',
      'error'
    ]);
    for (const o of stepOutputs(failed)) {
      expect(Object.keys((o.data as object) ?? {})).not.toContain('text/html');
    }
    expect(stepMarkdown(failed)).toContain(
      'raised KeyError in its kernel copy'
    );
    expect(stepMarkdown(step(3, 'y'))).not.toContain('⚠');
  });
});

describe('the review', () => {
  it('places the whole analysis below the anchor as one pending change', () => {
    const { state, cells } = placed();
    expect(state.status).toBe('suggested');
    expect(cells.map(c => c.id).slice(0, 1)).toEqual(['a']);
    expect(cells).toHaveLength(2 + 8);
    expect(cells[cells.length - 1].id).toBe('b');
    expect(stepsShown(state.cells)).toEqual([1, 2, 3, 4]);
  });

  it('accepts up to step 3, and one undo gives back the notebook before', () => {
    const { state, cells } = placed();
    const dropped = dropStep(state, 2);
    const afterDrop = apply(cells, dropped.changes);
    const accepted = acceptUpTo(dropped.state, 3);
    expect(accepted.decision).toBe('accepted');
    const after = apply(afterDrop, accepted.changes);
    expect(stepsShown(accepted.state.cells)).toEqual([1, 3]);
    // The notebook's headings have no gap where step 2 was dropped.
    expect(
      after
        .filter(c => c.tag && c.cell_type === 'markdown')
        .map(c => c.source.split('\n')[0])
    ).toEqual(['**Step 1.** Title 1', '**Step 2.** Title 3']);
    expect(
      after.filter(c => c.tag).every(c => c.tag!.status === 'accepted')
    ).toBe(true);
    expect(after.filter(c => c.tag)).toHaveLength(4);
    // The review's steps (placing, dropping) are one change to undo.
    const undone = undo(accepted.state);
    expect(apply(after, undone.changes)).toEqual(BEFORE);
    expect(undone.state.status).toBe('none');
    expect(undo(undone.state).changes).toEqual([]);
  });

  it('a dropped step is rejected and the others accepted, one decision each', () => {
    const { state } = placed();
    const accepted = acceptUpTo(dropStep(state, 2).state, null);
    const decisions = stepDecisions(STEPS, accepted.state.cells, false);
    expect(decisions.map(d => [d.step, d.decision])).toEqual([
      [1, 'accepted'],
      [2, 'rejected'],
      [3, 'accepted'],
      [4, 'accepted']
    ]);
    expect(
      stepDecisions(STEPS, accepted.state.cells, true).map(d => d.decision)
    ).toEqual(['accepted_run', 'rejected', 'accepted_run', 'accepted_run']);
    expect(
      stepDecisions(STEPS, [], false).every(d => d.decision === 'rejected')
    ).toBe(true);
  });

  it('an edited step re-runs from there; the decision says edited with its code', () => {
    const { state } = placed();
    const code2 = state.cells.find(
      c => c.cell_type === 'code' && c.tag.step === 2
    )!;
    const sources = { [code2.id]: "total = df['a'].sum() + 1" };
    const edited = editedFrom(state, sources);
    expect(edited?.fromStep).toBe(2);
    expect(edited?.steps.map(s => s.code)).toEqual([
      "total = df['a'].sum() + 1",
      'ratio = total / len(df)',
      'ratio * 2'
    ]);
    expect(editedFrom(state, {})).toBeNull();
    const rerun = [
      step(2, "total = df['a'].sum() + 1", { result: result('7') }),
      step(3, 'ratio = total / len(df)', { result: result('2.33') }),
      step(4, 'ratio * 2', { result: result('4.67') })
    ];
    const replaced = replaceFrom(state, 2, rerun, newId, sources);
    expect(stepsShown(replaced.state.cells)).toEqual([1, 2, 3, 4]);
    const code4 = replaced.state.cells.find(
      c => c.cell_type === 'code' && c.tag.step === 4
    )!;
    expect(code4.outputs?.[0]).toMatchObject({
      data: { 'text/plain': '4.67' }
    });
    // The cells of steps 2-4 are new; step 1's stay.
    expect(replaced.state.cells[0].id).toBe(state.cells[0].id);
    expect(replaced.state.cells[2].id).not.toBe(state.cells[2].id);
    const accepted = acceptUpTo(replaced.state, null);
    const candidate = accepted.state.candidates[0];
    const decisions = stepDecisions(
      candidate.originalAnalysis!,
      accepted.state.cells,
      false
    );
    expect(decisions.map(d => d.decision)).toEqual([
      'accepted',
      'edited',
      'accepted',
      'accepted'
    ]);
    expect(decisions[1].finalCode).toBe("total = df['a'].sum() + 1");
  });

  it("the notebook's own undo of a partial accept brings the dropped steps back as pending", () => {
    const { state } = placed();
    const accepted = acceptUpTo(state, 3).state;
    // What the notebook holds after its undo (every cell back, pending).
    const seen = state.cells.map(c => ({
      id: c.id,
      source: c.source,
      status: 'pending' as const,
      step: c.tag.step,
      cell_type: c.cell_type
    }));
    const back = observe(accepted, seen);
    expect(back.state.status).toBe('suggested');
    expect(back.decision).toBe('pending');
    expect(stepsShown(back.state.cells)).toEqual([1, 2, 3, 4]);
    expect(back.state.cells.map(c => c.cell_type)).toEqual(
      state.cells.map(c => c.cell_type)
    );
  });

  it('a step that edits an existing cell is a diff over it until accepted, and undo restores it', () => {
    const steps = [
      step(1, 'x = 1'),
      step(2, 'import pandas as pd\nimport numpy as np', { cell_id: 'a' }),
      step(3, 'y = np.sqrt(x)')
    ];
    const own = [{ output_type: 'stream', name: 'stdout', text: 'old\n' }];
    const existing = (id: string) =>
      id === 'a'
        ? {
            original: 'import pandas as pd',
            tag: null,
            outputs: own,
            executionCount: 3
          }
        : null;
    // The notebook's cell a shows its own output before the analysis comes.
    const before = [{ ...BEFORE[0], outputs: own }, BEFORE[1]];
    const { state, cells } = placed(steps, existing, before);
    // Cell a stays where it is, with its source, marked as step 2.
    expect(cells.map(c => c.id)[0]).toBe('a');
    expect(cells[0].source).toBe('import pandas as pd');
    expect(cells[0].tag).toMatchObject({ status: 'pending', step: 2 });
    // The new cells follow the anchor, in order, without a gap for the edit.
    expect(cells.slice(1, 6).map(c => [c.cell_type, c.tag?.step])).toEqual([
      ['markdown', 1],
      ['code', 1],
      ['markdown', 2],
      ['markdown', 3],
      ['code', 3]
    ]);
    expect(cells[3].source).toContain('edits an existing cell');
    // The step's own output from its copy is in its Markdown (m4); the
    // cell keeps its own until Accept.
    expect(cells[3].source).toContain(
      'Its output in a kernel copy:\n\n```text\nout 2\n```'
    );
    expect(cells[0].outputs).toEqual(own);
    expect(cells[cells.length - 1].id).toBe('b');
    // Its code is not "edited by the user": nothing to re-run.
    expect(editedFrom(state, {})).toBeNull();

    const accepted = acceptUpTo(state, null);
    const after = apply(cells, accepted.changes);
    expect(after[0].source).toBe('import pandas as pd\nimport numpy as np');
    expect(after[0].tag).toMatchObject({ status: 'accepted', step: 2 });
    // Accepted: the cell shows the step's output (not the old code's), and
    // its Markdown is what a new step's says, without the pending note.
    expect(after[0].outputs).toEqual([
      expect.objectContaining({ data: { 'text/plain': 'out 2' } })
    ]);
    expect(after[3].source).toBe(stepMarkdown(steps[1]));
    expect(
      stepDecisions(steps, accepted.state.cells, false).map(d => d.decision)
    ).toEqual(['accepted', 'accepted', 'accepted']);
    // Undo: the cell's own source and its own output back.
    expect(apply(after, undo(accepted.state).changes)).toEqual(before);

    // Accepting only step 1 leaves cell a as it was, its output too.
    const partial = acceptUpTo(state, 1);
    const kept = apply(cells, partial.changes);
    expect(kept[0]).toEqual(before[0]);
    expect(kept).toHaveLength(2 + 2);
  });

  it('comes back from a reopened notebook: the steps stored with the turn, the edited cell', () => {
    const steps = [
      step(1, 'x = 1'),
      step(2, 'import numpy as np', { cell_id: 'a' })
    ];
    const stored = storedSteps(steps);
    expect(JSON.stringify(stored)).not.toContain('out 1');
    const turn = parseTurn({
      turn_id: 't1',
      intent: 'analyse a',
      code: '',
      status: 'pending',
      cell_ids: [],
      candidates: ['x'],
      created: 1,
      analysis: [...stored, { title: 'no number' }]
    });
    expect(turn?.analysis).toEqual(stored);
    const { state } = placed(restoredSteps(turn!.analysis!), (id: string) =>
      id === 'a' ? { original: 'import pandas as pd', tag: null } : null
    );
    // What restore() gives: the cells without the knowledge of the edit.
    const bare = {
      ...state,
      history: [],
      cells: state.cells.map(({ edits, ...c }) => c)
    };
    const back = withStepEdits(bare);
    expect(back.cells.find(c => c.id === 'a')?.edits).toEqual({
      original: 'import pandas as pd',
      tag: null
    });
    // Accepting only step 1 gives cell a back its source, untagged.
    const acceptedOne = acceptUpTo(back, 1);
    expect(acceptedOne.changes).toContainEqual({
      op: 'setTag',
      id: 'a',
      tag: null
    });
    // With no history from before the reload, undo after an accept still
    // takes the whole analysis out.
    const undone = undo(acceptUpTo(back, null).state);
    expect(undone.state.status).toBe('none');
    expect(undone.changes.filter(c => c.op === 'remove')).toHaveLength(3);
    expect(undone.changes).toContainEqual({
      op: 'setSource',
      id: 'a',
      source: 'import pandas as pd'
    });
    // Its step's output is not known after the reload: Accept clears the
    // old code's output; undo gives the cell's own back (read at restore).
    const own = [{ output_type: 'stream', name: 'stdout', text: 'own\n' }];
    const read = withStepEdits(bare, id =>
      id === 'a' ? { outputs: own, executionCount: 4 } : null
    );
    const accepted = acceptUpTo(read, null);
    expect(accepted.changes).toContainEqual({
      op: 'setOutputs',
      id: 'a',
      outputs: [],
      executionCount: null
    });
    expect(undo(accepted.state).changes).toContainEqual({
      op: 'setOutputs',
      id: 'a',
      outputs: own,
      executionCount: 4
    });
  });
});

describe("an edit step's Markdown", () => {
  it('fences its output so no backticks in it close the block, and clips long output', () => {
    const noisy = step(2, 'x', {
      cell_id: 'a',
      result: result('a ```` b\n' + 'line\n'.repeat(30))
    });
    const md = stepMarkdown(noisy, true);
    expect(md).toContain('`````text\n');
    expect(md).toContain('… (11 more lines)');
    expect(acceptedMarkdown(md, 1)).toBe(stepMarkdown({ ...noisy, number: 1 }));
    // A step that raised keeps its warning after the output goes.
    const failed = { ...noisy, status: 'error' as const };
    expect(acceptedMarkdown(stepMarkdown(failed, true), 2)).toBe(
      stepMarkdown(failed)
    );
  });
});
