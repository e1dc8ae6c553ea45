/**
 * Fix and Improve as typed requests: the cell itself (its id, source, the
 * error it raised or the text it printed) and the user's own words, if any,
 * rather than a sentence about it. The server writes the model's instruction
 * from these fields (prompts/edit.py); the answer replaces the cell.
 *
 * Pure: read from an nbformat cell (the shared model's JSON), so it is
 * tested without a notebook.
 */
import type { CellEdit, CellError } from './wire';

export type EditKind = CellEdit['kind'];

/** Improve sends the cell's text output, cut to about this many characters. */
export const MAX_EDIT_OUTPUT_CHARS = 5_000;

/** The server's bounds on an error (server/models.py CellError). */
const MAX_ENAME = 1_000;
const MAX_EVALUE = 20_000;
const MAX_TRACEBACK_LINES = 200;

/** An nbformat v4 cell as the shared model's `toJSON()` gives it. */
export interface IEditedCell {
  id?: string | null;
  cell_type?: string;
  source?: string | string[];
  outputs?: readonly unknown[];
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return !!value && typeof value === 'object' && !Array.isArray(value);
}

/** nbformat's multiline strings: a string, or a list of lines. */
function multiline(value: unknown): string {
  if (Array.isArray(value)) {
    return value.map(v => (typeof v === 'string' ? v : '')).join('');
  }
  return typeof value === 'string' ? value : '';
}

function outputsOf(cell: IEditedCell): Record<string, unknown>[] {
  return (cell.outputs ?? []).filter(isRecord);
}

/** The first error output of the cell, as the server takes it; null: none. */
export function cellError(cell: IEditedCell): Required<CellError> | null {
  const error = outputsOf(cell).find(o => o.output_type === 'error');
  if (!error) {
    return null;
  }
  const traceback = Array.isArray(error.traceback)
    ? error.traceback.map(line => (typeof line === 'string' ? line : ''))
    : [];
  return {
    ename: multiline(error.ename).slice(0, MAX_ENAME) || 'Error',
    evalue: multiline(error.evalue).slice(0, MAX_EVALUE),
    // The end of a traceback is where the error is.
    traceback: traceback.slice(-MAX_TRACEBACK_LINES)
  };
}

/** Does the cell show an error output? */
export function hasErrorOutput(cell: IEditedCell): boolean {
  return outputsOf(cell).some(o => o.output_type === 'error');
}

/**
 * The cell's text output as the user saw it: its stream text and the
 * `text/plain` of its results and displays, in order, cut to `max`
 * characters (the cut said at the end).
 */
export function cellTextOutput(
  cell: IEditedCell,
  max: number = MAX_EDIT_OUTPUT_CHARS
): string {
  const parts: string[] = [];
  for (const output of outputsOf(cell)) {
    let text = '';
    if (output.output_type === 'stream') {
      text = multiline(output.text);
    } else if (
      output.output_type === 'execute_result' ||
      output.output_type === 'display_data'
    ) {
      const data = isRecord(output.data) ? output.data : {};
      text = multiline(data['text/plain']);
      if (text && !text.endsWith('\n')) {
        text += '\n';
      }
    }
    if (text) {
      parts.push(text);
    }
  }
  const all = parts.join('');
  if (all.length <= max) {
    return all;
  }
  return (
    all.slice(0, max) +
    `\n… (cut: ${(all.length - max).toLocaleString('en-US')} more characters)`
  );
}

/**
 * Which edit a typed request about a cell asks for ("rewrite …" with the
 * cell pinned): Fix when the words say so or the cell shows an error,
 * Improve otherwise.
 */
export function editKindFor(cell: IEditedCell, words: string): EditKind {
  if (/^\s*(please\s+)?(fix|debug|correct)\b/i.test(words)) {
    return 'fix';
  }
  return hasErrorOutput(cell) ? 'fix' : 'improve';
}

/** The typed request for the server: the cell, its error or output, the words. */
export function cellEdit(
  cell: IEditedCell,
  kind: EditKind,
  instruction = ''
): CellEdit {
  return {
    kind,
    cell_id: cell.id ?? '',
    source: multiline(cell.source),
    error: kind === 'fix' ? cellError(cell) : null,
    output: kind === 'improve' ? cellTextOutput(cell) : '',
    instruction: instruction.trim()
  };
}

/**
 * The question as the sidebar shows it: the user's words where they typed
 * any, else what the command asked ("Fix the error in cell 3").
 * `index`: the cell's position, from 0.
 */
export function editQuestion(
  kind: EditKind,
  index: number,
  instruction = ''
): string {
  const words = instruction.trim();
  if (words) {
    return words;
  }
  const cell = index >= 0 ? `cell ${index + 1}` : 'this cell';
  return kind === 'fix' ? `Fix the error in ${cell}` : `Improve ${cell}`;
}
