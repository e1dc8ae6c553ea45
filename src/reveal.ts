/**
 * Bringing a suggestion into view in the notebook: all of its cells when
 * they fit, else the top of the first one, where its bar (Accept, Reject)
 * is. JupyterLab's `scrollToItem` aligns a cell taller than the view (a
 * fix's diff over a cell with a long traceback) by its end, which put the
 * bar above the view.
 */
import type { Notebook } from '@jupyterlab/notebook';

/** A vertical extent in one coordinate system (the page's). */
export interface IExtent {
  top: number;
  bottom: number;
}

/**
 * How far to scroll (pixels, positive: down) so that `block` shows in
 * `view`: the least move that shows all of it, or, when it is taller than
 * the view (less `margin` at each end), its top at the view's top.
 */
export function revealDelta(view: IExtent, block: IExtent, margin = 8): number {
  const top = view.top + margin;
  const bottom = view.bottom - margin;
  if (block.top < top || block.bottom - block.top > bottom - top) {
    return block.top - top;
  }
  if (block.bottom > bottom) {
    return block.bottom - bottom;
  }
  return 0;
}

/** Scroll `scroller` so that the block from `first`'s top to `last`'s bottom shows. */
export function revealBlock(
  scroller: HTMLElement,
  first: HTMLElement,
  last: HTMLElement
): void {
  const view = scroller.getBoundingClientRect();
  const delta = revealDelta(
    { top: view.top, bottom: view.bottom },
    {
      top: first.getBoundingClientRect().top,
      bottom: last.getBoundingClientRect().bottom
    }
  );
  if (delta) {
    scroller.scrollTop += delta;
  }
}

/**
 * Scroll a notebook to the cells at these indices (sorted); `select` also
 * makes them the active cell and selection.
 */
export function showCells(
  notebook: Notebook,
  indices: readonly number[],
  select: boolean
): void {
  const first = indices[0];
  const last = indices[indices.length - 1];
  if (select) {
    notebook.mode = 'command';
    notebook.activeCellIndex = first;
    notebook.deselectAll();
    for (const i of indices) {
      notebook.select(notebook.widgets[i]);
    }
  }
  // The last cell first, then the first (both rendered, in a windowed
  // notebook), then the block: whole when it fits, else from its top,
  // where the bar is.
  void notebook
    .scrollToItem(last, 'smart')
    .then(() => notebook.scrollToItem(first, 'smart'))
    .then(() => {
      const top = notebook.widgets[first]?.node;
      const bottom = notebook.widgets[last]?.node;
      if (top && bottom) {
        revealBlock(notebook.outerNode, top, bottom);
      }
    })
    .catch(() => undefined);
}
