/**
 * The diff shown over a cell that an edit turn ("fix this cell") would
 * replace: CodeMirror's own unified merge view (@codemirror/merge), the
 * cell's source as the original and the candidate as the document,
 * read-only. Accepting writes the candidate into the cell; this view only
 * shows the change.
 */
import { unifiedMergeView } from '@codemirror/merge';
import { language } from '@codemirror/language';
import { EditorState, Extension } from '@codemirror/state';
import { EditorView } from '@codemirror/view';
import { Cell } from '@jupyterlab/cells';
import { CodeMirrorEditor, jupyterTheme } from '@jupyterlab/codemirror';
import { Widget } from '@lumino/widgets';

export const CELL_DIFF_CLASS = 'jp-DataAgent-cellDiff';
/** On the cell while its diff is shown: its own editor is hidden by CSS. */
export const REPLACING_CLASS = 'jp-DataAgent-replacing';

/** The cell editor's language (Python, R, …), so the diff is highlighted alike. */
export function cellLanguage(cell: Cell): Extension {
  const editor = cell.editor;
  if (editor instanceof CodeMirrorEditor) {
    const lang = editor.editor.state.facet(language);
    if (lang) {
      return lang.extension;
    }
  }
  return [];
}

/** A read-only unified diff of `original` -> `candidate`. */
export class CellDiffView extends Widget {
  constructor() {
    super();
    this.addClass(CELL_DIFF_CLASS);
    this.node.setAttribute('role', 'region');
    this.node.setAttribute('aria-label', 'Suggested change to this cell');
  }

  /** Show the diff; a no-op when the texts are the ones shown. */
  render(original: string, candidate: string, lang: Extension = []): void {
    if (
      this._view &&
      original === this._original &&
      candidate === this._candidate
    ) {
      return;
    }
    this._original = original;
    this._candidate = candidate;
    this._view?.destroy();
    this._view = new EditorView({
      parent: this.node,
      state: EditorState.create({
        doc: candidate,
        extensions: [
          EditorState.readOnly.of(true),
          EditorView.editable.of(false),
          unifiedMergeView({
            original,
            mergeControls: false,
            gutter: true,
            syntaxHighlightDeletions: true
          }),
          jupyterTheme,
          lang
        ]
      })
    });
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._view?.destroy();
    this._view = null;
    super.dispose();
  }

  private _view: EditorView | null = null;
  private _original = '';
  private _candidate = '';
}
