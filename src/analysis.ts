/**
 * Analysis mode (issue 26), DOM-free: the plan shown while the turn runs,
 * the steps of a finished analysis as they come from the server, the cells
 * they become (a Markdown cell and a code cell with the copy's outputs per
 * step: the whole analysis is one suggestion), and which decision goes out
 * per step. The review's operations on those cells are in
 * analysisreview.ts.
 */
import { ICellAgentMetadata, IStoredStep, TurnStatus } from './metadata';
import { NbformatOutput, previewOutputs } from './models';
import { inertMarkdown } from './norequests';
import { ICellSpec, IExistingCell, IdFactory, tagFor } from './suggestioncells';
import type {
  AnalysisStep,
  AnalysisStepEdit,
  Candidate,
  PlanStepState,
  ProgressData
} from './wire';

/** The strategy name of Analysis mode in the server's catalog. */
export const ANALYSIS: string = 'analysis';

export type IPlanStep = PlanStepState;
export type PlanStatus = PlanStepState['status'];
export type IAnalysisStep = AnalysisStep;
export type StepStatus = AnalysisStep['status'];
/** One step as the analysis endpoint takes it (a re-run after an edit). */
export type IRerunStep = AnalysisStepEdit;

/**
 * The plan in a progress event's data; null when the event has none (then
 * the plan shown stays). The server sends the whole plan each time.
 */
export function planOf(data: Pick<ProgressData, 'plan'>): IPlanStep[] | null {
  return data.plan ?? null;
}

/** A candidate's analysis steps (none for every other strategy, or an older server). */
export function analysisOf(
  candidate: Partial<Pick<Candidate, 'analysis'>>
): IAnalysisStep[] {
  return candidate.analysis ?? [];
}

/** The steps as stored with the turn (no outputs: those are in the cells). */
export function storedSteps(steps: readonly IAnalysisStep[]): IStoredStep[] {
  return steps.map(s => ({
    number: s.number,
    title: s.title,
    explanation: s.explanation,
    code: s.code,
    cell_id: s.cell_id,
    status: s.status
  }));
}

const STEP_STATUSES: StepStatus[] = [
  'ok',
  'error',
  'timeout',
  'died',
  'not_run'
];

/** Stored steps back as the review's steps (a reopened notebook). */
export function restoredSteps(stored: readonly IStoredStep[]): IAnalysisStep[] {
  return stored.map(s => ({
    ...s,
    result: null,
    status: STEP_STATUSES.includes(s.status as StepStatus)
      ? (s.status as StepStatus)
      : 'not_run',
    repairs: 0,
    replanned: false
  }));
}

/** Words and an icon for a plan step's status (the sidebar's list). */
export const PLAN_LABELS: Record<PlanStatus, { icon: string; words: string }> =
  {
    pending: { icon: '○', words: 'to do' },
    generating: { icon: '✎', words: 'writing the code' },
    running: { icon: '▶', words: 'running in a kernel copy' },
    repairing: { icon: '↻', words: 'repairing an error' },
    ok: { icon: '✓', words: 'done' },
    error: { icon: '✗', words: 'failed' },
    skipped: { icon: '–', words: 'not done' }
  };

/**
 * A step's status once the turn ended: one still being written, run or
 * repaired was stopped there (a Stop keeps only the verified steps).
 */
export function planStatusAtEnd(status: PlanStatus): PlanStatus {
  return status === 'generating' ||
    status === 'running' ||
    status === 'repairing' ||
    status === 'pending'
    ? 'skipped'
    : status;
}

/** Steps done / all, for the plan's heading. */
export function planSummary(plan: readonly IPlanStep[]): string {
  const done = plan.filter(s => s.status === 'ok').length;
  return `${done} of ${plan.length} step${plan.length === 1 ? '' : 's'} done`;
}

/**
 * Only the rich outputs a copy may show: text and images. A copy's output
 * is data, never trusted HTML or script (DESIGN: kernel copies).
 */
const SAFE_MIME = ['text/plain', 'image/png', 'image/jpeg', 'text/latex'];

/** The copy's outputs of a step as nbformat outputs for its code cell. */
export function stepOutputs(step: IAnalysisStep | undefined): NbformatOutput[] {
  return previewOutputs(step?.result ?? null)
    .map(o => {
      if (
        o.output_type !== 'execute_result' &&
        o.output_type !== 'display_data'
      ) {
        return o;
      }
      const data = (o.data ?? {}) as Record<string, unknown>;
      const safe = Object.fromEntries(
        Object.entries(data).filter(([mime]) => SAFE_MIME.includes(mime))
      );
      return Object.keys(safe).length
        ? { ...o, data: safe, metadata: {} }
        : null;
    })
    .filter((o): o is NbformatOutput => o !== null);
}

/** What an edit step's Markdown says while it is pending (stale once accepted). */
export const EDIT_NOTE =
  ' _(edits an existing cell: the change is shown over it)_';
/** Heads the copy's output of an edit step in its Markdown while pending. */
export const EDIT_OUTPUT_HEAD = 'Its output in a kernel copy:';
/** The most lines of an edit step's output its Markdown shows. */
const EDIT_OUTPUT_LINES = 20;

/**
 * An edit step's output from its copy as text for its Markdown cell (the
 * cell it edits keeps its own outputs until Accept); '' when there is none.
 */
export function editOutputText(step: IAnalysisStep): string {
  const text = stepOutputs(step)
    .map(o => {
      const data = (o.data ?? {}) as Record<string, unknown>;
      const plain = o.output_type === 'stream' ? o.text : data['text/plain'];
      const joined = Array.isArray(plain) ? plain.join('') : plain;
      return typeof joined === 'string'
        ? joined.replace(/\n$/, '')
        : data['image/png'] || data['image/jpeg']
          ? '(an image)'
          : '';
    })
    .filter(Boolean)
    .join('\n');
  if (!text) {
    return '';
  }
  const lines = text.split('\n');
  const shown =
    lines.length > EDIT_OUTPUT_LINES
      ? [
          ...lines.slice(0, EDIT_OUTPUT_LINES),
          `… (${lines.length - EDIT_OUTPUT_LINES} more lines)`
        ]
      : lines;
  // A fence longer than any run of backticks in the text: it cannot close early.
  const longest = Math.max(0, ...(text.match(/`+/g) ?? []).map(r => r.length));
  const fence = '`'.repeat(Math.max(3, longest + 1));
  return `${EDIT_OUTPUT_HEAD}\n\n${fence}text\n${shown.join('\n')}\n${fence}`;
}

/** The Markdown cell of a step: its number, title, explanation, and why it failed. */
export function stepMarkdown(step: IAnalysisStep, edit = false): string {
  const title = step.title.trim();
  const head = `**Step ${step.number}.**${title ? ` ${title}` : ''}`;
  const lines = [edit ? `${head}${EDIT_NOTE}` : head];
  if (step.explanation.trim()) {
    lines.push('', step.explanation.trim());
  }
  const output = edit ? editOutputText(step) : '';
  if (output) {
    lines.push('', output);
  }
  if (step.status !== 'ok') {
    const why =
      step.status === 'not_run'
        ? 'was not run in a kernel copy'
        : step.status === 'error'
          ? `raised ${step.result?.ename ?? 'an error'} in its kernel copy`
          : step.status === 'timeout'
            ? 'timed out in its kernel copy'
            : 'ended its kernel copy (it died)';
    lines.push('', `> ⚠ This step ${why}.`);
  }
  // The title, explanation and error name are the model's and the copy's words.
  return inertMarkdown(lines.join('\n'));
}

/**
 * An accepted step's Markdown: without the pending edit's note, and its
 * heading numbered by its place among the steps kept, so a dropped step
 * leaves no gap in the notebook (the tags keep the server's numbers).
 */
export function acceptedMarkdown(source: string, place: number): string {
  return withoutEditOutput(source)
    .replace(EDIT_NOTE, '')
    .replace(/^\*\*Step \d+\.\*\*/, `**Step ${place}.**`);
}

/** The Markdown without the copy's output (once accepted it shows on the cell itself). */
function withoutEditOutput(source: string): string {
  const head = `\n\n${EDIT_OUTPUT_HEAD}\n\n`;
  const at = source.indexOf(head);
  const fence = at < 0 ? null : /^`{3,}/.exec(source.slice(at + head.length));
  const end = fence
    ? source.indexOf(`\n${fence[0]}`, at + head.length + 1)
    : -1;
  return end < 0
    ? source
    : source.slice(0, at) + source.slice(end + 1 + fence![0].length);
}

/** A cell of an analysis step carries the step number in its tag. */
function stepTag(
  state: { turnId: string; intent: string },
  status: TurnStatus,
  step: number
): ICellAgentMetadata {
  return { ...tagFor(state, status), step };
}

/** An existing code cell as it is now; null: gone, not code, or not editable. */
export type ExistingCells = (cellId: string) => IExistingCell | null;

/**
 * The cells of an analysis: per step a Markdown cell (number, title,
 * explanation) and, for a new cell, its code cell with the outputs
 * computed in the copy. A step that edits an existing cell lays out that
 * cell (it stays where it is, shown as a diff while pending, the step's
 * code once accepted); when it is gone the step becomes a new cell.
 */
export function analysisCells(
  state: { turnId: string; intent: string },
  steps: readonly IAnalysisStep[],
  status: TurnStatus,
  newId: IdFactory,
  existing: ExistingCells = () => null
): ICellSpec[] {
  const cells: ICellSpec[] = [];
  for (const step of steps) {
    const tag = stepTag(state, status, step.number);
    const code = step.code.replace(/\s+$/, '');
    const edited = step.cell_id ? existing(step.cell_id) : null;
    cells.push({
      id: newId(),
      cell_type: 'markdown',
      source: stepMarkdown(step, !!edited),
      tag
    });
    if (edited && step.cell_id) {
      cells.push({
        id: step.cell_id,
        cell_type: 'code',
        source: status === 'pending' ? edited.original : code,
        tag: { ...tag },
        edits: edited
      });
    } else {
      cells.push({
        id: newId(),
        cell_type: 'code',
        source: code,
        tag: { ...tag },
        outputs: stepOutputs(step)
      });
    }
  }
  return cells;
}

/** The step numbers the cells hold, in order, each once. */
export function stepsShown(cells: readonly ICellSpec[]): number[] {
  const seen: number[] = [];
  for (const cell of cells) {
    const step = cell.tag.step;
    if (typeof step === 'number' && !seen.includes(step)) {
      seen.push(step);
    }
  }
  return seen;
}

export type StepDecision = 'accepted' | 'accepted_run' | 'rejected' | 'edited';

/** One decision per step of the analysis as it came from the server. */
export interface IStepDecision {
  step: number;
  decision: StepDecision;
  /** The step's code as it came. */
  code: string;
  /** The code the notebook keeps ('' when dropped). */
  finalCode: string;
}

/**
 * Which decision goes out for each step: kept as it came -> accepted (or
 * accepted_run), changed -> edited with its final code, not kept ->
 * rejected. `cells`: the turn's cells as they are after the decision
 * (none after a reject).
 */
export function stepDecisions(
  steps: readonly IAnalysisStep[],
  cells: readonly Pick<ICellSpec, 'cell_type' | 'source' | 'tag'>[],
  run: boolean
): IStepDecision[] {
  const finalCode = new Map<number, string>();
  for (const cell of cells) {
    if (cell.cell_type === 'code' && typeof cell.tag.step === 'number') {
      finalCode.set(cell.tag.step, cell.source);
    }
  }
  return steps.map(step => {
    const final = finalCode.get(step.number);
    const code = step.code;
    if (final === undefined) {
      return { step: step.number, decision: 'rejected', code, finalCode: '' };
    }
    const same = final.trim() === code.trim();
    return {
      step: step.number,
      decision: same ? (run ? 'accepted_run' : 'accepted') : 'edited',
      code,
      finalCode: final
    };
  });
}
