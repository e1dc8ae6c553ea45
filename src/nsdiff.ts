/**
 * What accepting a candidate will change, in a few words: the variables its
 * cell added, changed and deleted in its kernel copy (a fork of the user's
 * kernel) and the files it wrote in the copy's scratch folder, e.g.
 * "adds `clean` (99,500 × 6); changes `df`: 500 rows fewer; writes
 * `out.csv` in scratch". The one formatter of a candidate's namespace diff
 * (`NamespaceDiff`, computed in the copy by
 * `kernel/copy/namespace_diff.py`): the sidebar's candidate view, the
 * suggestion bar and the turn stored for a reload all use it.
 */
import type { NamespaceDiff, Variable } from './wire';

/** Names listed per kind at most; the rest are counted. */
export const MAX_NAMES = 3;

const NUMBER = new Intl.NumberFormat('en-US');

function count(n: number, one: string, many = `${one}s`): string {
  return `${NUMBER.format(n)} ${n === 1 ? one : many}`;
}

/** A shape as "99,500 × 6"; '' without one. */
export function shapeText(shape: readonly number[] | null): string {
  return shape && shape.length
    ? shape.map(n => NUMBER.format(n)).join(' × ')
    : '';
}

/** How a changed variable's shape moved: "500 rows fewer", "1 column more"; '' when it kept it. */
function shapeChange(before: readonly number[], after: readonly number[]) {
  if (before.length !== after.length) {
    return `now ${shapeText(after)}`;
  }
  const parts: string[] = [];
  const words = [
    ['row', 'rows'],
    ['column', 'columns']
  ];
  after.forEach((n, axis) => {
    const delta = n - before[axis];
    if (!delta) {
      return;
    }
    const [one, many] = words[axis] ?? ['item', 'items'];
    parts.push(
      `${count(Math.abs(delta), one, many)} ${delta > 0 ? 'more' : 'fewer'}`
    );
  });
  return parts.join(', ');
}

function names(
  vars: readonly Variable[],
  each: (v: Variable) => string
): string {
  const shown = vars.slice(0, MAX_NAMES).map(each);
  const more = vars.length - shown.length;
  return shown.join(', ') + (more > 0 ? ` and ${more} more` : '');
}

function added(v: Variable): string {
  const shape = shapeText(v.shape);
  return `\`${v.name}\`` + (shape ? ` (${shape})` : '');
}

function changed(v: Variable): string {
  const moved = v.before && v.shape ? shapeChange(v.before, v.shape) : '';
  return `\`${v.name}\`` + (moved ? `: ${moved}` : '');
}

/**
 * The diff in words; '' when the copy could not tell (no diff, a `note`:
 * a copy that is not a fork, a namespace it could not read) or saw no
 * change (a large frame changed in place is not seen: "nothing" could be
 * wrong).
 */
export function namespaceChanges(
  diff: NamespaceDiff | null | undefined
): string {
  if (!diff || diff.note) {
    return '';
  }
  const clauses: string[] = [];
  if (diff.new.length) {
    clauses.push(`adds ${names(diff.new, added)}`);
  }
  if (diff.changed.length) {
    // One changed variable reads "changes `df`: 500 rows fewer"; several are listed.
    clauses.push(`changes ${names(diff.changed, changed)}`);
  }
  if (diff.deleted.length) {
    clauses.push(`deletes ${names(diff.deleted, v => `\`${v.name}\``)}`);
  }
  const files = diff.files ?? [];
  if (files.length) {
    const shown = files.slice(0, MAX_NAMES).map(f => `\`${f}\``);
    const more = files.length - shown.length;
    clauses.push(
      `writes ${shown.join(', ')}${more > 0 ? ` and ${more} more` : ''} in scratch`
    );
  }
  return clauses.join('; ') + (clauses.length && diff.truncated ? '; …' : '');
}

/** The longest line a stored turn keeps (the formatter lists a few names). */
const MAX_STORED_CHARS = 1000;

/** A stored turn's line, read back defensively (notebook metadata is anyone's). */
export function storedChanges(raw: unknown): { changes?: string } {
  return typeof raw === 'string' && raw
    ? { changes: raw.slice(0, MAX_STORED_CHARS) }
    : {};
}

/** What the line means, for its tooltip. */
export const NAMESPACE_TITLE =
  'What the cell changed when it ran in its kernel copy (a fork of your ' +
  'kernel): what running it in your kernel will change. Nothing of it is ' +
  'in your kernel before you accept and run it; files were written in the ' +
  "copy's scratch folder.";

/** A line's text in pieces, the `code` ones between backticks. */
export function codeSpans(text: string): { text: string; code: boolean }[] {
  return text
    .split('`')
    .map((part, i) => ({ text: part, code: i % 2 === 1 }))
    .filter(part => part.text);
}
